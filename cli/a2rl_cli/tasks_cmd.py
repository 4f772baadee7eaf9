"""`a2rl tasks list|describe|score`: the benchmark's tasks, their agent description, offline scoring."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from a2rl_cli.protocol_arg import add_protocol_arg

# The paper's six tasks (level, metric), shown even before their evaluator exists here.
PAPER_TASKS: dict[str, tuple[str, str]] = {
    "gsm8k": ("L1", "accuracy (%)"),
    "humaneval": ("L1", "pass@1 (%)"),
    "alpacaeval": ("L2", "length-controlled win rate (%)"),
    "alfworld": ("L3", "success rate (%)"),
    "webshop": ("L3", "success rate (%)"),
    "deepsearchqa": ("L3", "judged accuracy (%)"),
}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("tasks", help="list tasks, show a task's description, score saved predictions")
    tsub = parser.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND")
    tsub.required = True

    ls = tsub.add_parser("list", help="the tasks with level, metric and data status")
    ls.add_argument("--seed", type=int, default=0, help="staging seed whose data status to show")
    ls.add_argument(
        "--json", action="store_true", help="print the rows as JSON (adds implemented, offline_scoring)"
    )
    ls.set_defaults(func=_list)

    d = tsub.add_parser("describe", help="print the agent-facing description.md of TASK")
    d.add_argument("task", help="task id (see `a2rl tasks list`)")
    add_protocol_arg(d)
    d.set_defaults(func=_describe)

    s = tsub.add_parser(
        "score",
        help="score saved predictions offline (no model needed)",
        description="Score saved raw model outputs against references with the task's own scoring "
        "rules. webshop replays each prediction (an episode's replies, one per line) in the "
        "simulated shop.",
    )
    s.add_argument("task", help="task id (see `a2rl tasks list`)")
    s.add_argument(
        "--predictions", type=Path, required=True, help='JSONL {"id", "prediction"} (raw model output)'
    )
    s.add_argument(
        "--references",
        type=Path,
        required=True,
        help="JSONL with id + the task's held-out fields (webshop: the held-out goals.jsonl, with "
        "catalogue.json beside it, or the held-out directory)",
    )
    s.add_argument("--json", action="store_true", help='print {"score", "n", "correct", "metrics", …}')
    s.add_argument("--details", type=Path, default=None, help="also write per-item records (JSONL) here")
    add_protocol_arg(s)
    s.set_defaults(func=_score)


def data_status(task: Any, seed: int) -> str:
    from a2rl_tasks.artifacts import MANIFEST
    from a2rl_tasks.staging import HELDOUT, TRAIN, cached_dir

    root = cached_dir(task, seed)
    if (root / TRAIN).is_dir() and (root / HELDOUT).is_dir():
        checked = all((root / s / MANIFEST).is_file() for s in (TRAIN, HELDOUT))
        return "staged" + (" (checksummed)" if checked else "")
    if hasattr(task, "default_source") and task.default_source is None:
        return "not staged (needs: a2rl data stage " + task.name + " --source …)"
    return "not staged (staged on first run)"


def task_rows(seed: int = 0) -> list[dict[str, Any]]:
    """The paper's six tasks first (in the paper's order), then the other registered tasks."""
    from a2rl_tasks import TASKS, get_task

    rows: list[dict[str, Any]] = []
    for name in [*PAPER_TASKS, *(n for n in TASKS if n not in PAPER_TASKS)]:
        if name in TASKS:
            task = get_task(name)
            rows.append({
                "task": name, "level": task.level, "metric": task.metric, "data": data_status(task, seed),
                "implemented": True, "offline_scoring": _scores_offline(task),
            })  # fmt: skip
        else:
            level, metric = PAPER_TASKS[name]
            rows.append({
                "task": name, "level": level, "metric": metric, "data": "not implemented yet",
                "implemented": False, "offline_scoring": False,
            })  # fmt: skip
    return rows


def _scores_offline(task: Any) -> bool:
    return callable(getattr(task, "score_prediction_files", None)) or callable(
        getattr(task, "score_predictions", None)
    )


def _list(args: argparse.Namespace) -> int:
    rows = task_rows(args.seed)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in ("task", "level", "metric")}
    header = f"{'TASK':{widths['task']}}  {'LEVEL':{widths['level']}}  {'METRIC':{widths['metric']}}  DATA"
    print(header)
    for r in rows:
        cells = [f"{r[k]:{widths[k]}}" for k in ("task", "level", "metric")]
        print("  ".join([*cells, r["data"]]))
    return 0


def _describe(args: argparse.Namespace) -> int:
    from a2rl_tasks import get_task

    print(get_task(args.task, protocol=args.protocol).description(), end="")
    return 0


def score_task(task: Any, predictions: Path, references: Path) -> Any:
    """The `EvalResult` of offline scoring: a task's own file-level scorer when it has one
    (webshop replays episodes and needs the catalogue beside the references), else the shared
    `score_predictions` path."""
    from a2rl_tasks.scoring import score_files

    from a2rl.errors import A2rlError

    for path, what in ((predictions, "predictions"), (references, "references")):
        if not path.exists():
            raise A2rlError(f"{what} file not found: {path}")
    own = getattr(task, "score_prediction_files", None)
    try:
        if callable(own):
            return own(predictions, references)
        return score_files(task, predictions, references)
    except (OSError, UnicodeDecodeError) as exc:
        raise A2rlError(f"cannot read {what_failed(exc, predictions, references)}: {exc}") from exc


def what_failed(exc: Exception, predictions: Path, references: Path) -> str:
    name = str(getattr(exc, "filename", "") or "")
    if name == str(predictions):
        return "the predictions"
    if name == str(references):
        return "the references"
    return "the input files"


def _write_details(path: Path, details: list[dict[str, Any]]) -> None:
    from a2rl.errors import A2rlError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for d in details:
                f.write(json.dumps(d, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    except OSError as exc:
        raise A2rlError(f"cannot write --details {path}: {exc.strerror or exc}") from exc


def _score(args: argparse.Namespace) -> int:
    from a2rl_tasks import get_task

    task = get_task(args.task, protocol=args.protocol)
    result = score_task(task, args.predictions, args.references)
    if args.details is not None:
        _write_details(args.details, result.details)
    if args.json:
        out = {
            "task": task.name,
            "protocol": task.protocol,
            "score": round(result.score, 4),
            "n": result.n,
            "correct": result.correct,
            "metrics": {k: round(v, 4) for k, v in result.metrics.items()},
            "evaluator_version": result.evaluator_version,
        }
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"{task.name}: {result.score:.2f} ({result.correct}/{result.n} correct, {task.metric})")
    return 0
