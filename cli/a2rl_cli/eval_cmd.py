"""`a2rl eval submission|baseline`: the crash-isolated evaluation process (also the eval Job command);
`a2rl eval fetch-heldout`: the eval Job's init container (the task's held-out data from the store)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl_cli.protocol_arg import add_protocol_arg, chosen_protocol

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from a2rl.store.base import ObjectStore
    from a2rl.store.layout import RunLayout

BACKEND_CHOICES = ("auto", "transformers", "vllm")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("eval", help="evaluate a submission or the baseline (writes result.json)")
    esub = parser.add_subparsers(dest="eval_command", metavar="SUBCOMMAND")
    esub.required = True

    s = esub.add_parser("submission", help="evaluate submission N of a run from its stored snapshot")
    _common(s)
    s.add_argument("--index", type=int, required=True, help="submission index (1, 2, …)")
    s.add_argument(
        "--max-parameters",
        type=int,
        default=None,
        help="refuse a submission estimated above this many parameters before loading it (default: "
        "$A2RL_EVAL_MAX_PARAMETERS, else max(4x the base model, the base model + 1B))",
    )
    s.set_defaults(func=_submission)

    b = esub.add_parser("baseline", help="score the base model (cached) and record it as submission 0")
    _common(b)
    b.add_argument("--model-dir", type=Path, required=True, help="the base model directory")
    b.add_argument(
        "--base-name", default=None, help="name under models/ in the workspace (default: dir name)"
    )
    b.set_defaults(func=_baseline)

    f = esub.add_parser(
        "fetch-heldout",
        help="download a task's staged held-out data from the store, every checksum verified",
        description="Fetch the held-out artifact staged by `a2rl data stage TASK --seed S --store URI` "
        "into DEST (the eval Job's init container).",
    )
    f.add_argument("--task", required=True, help="task id, e.g. arith")
    f.add_argument("--seed", type=int, default=0, help="the staging seed (default 0)")
    add_protocol_arg(f, from_env=True)
    f.add_argument("--store", required=True, help="store URI (file:///… or s3://bucket/prefix)")
    f.add_argument("--dest", type=Path, required=True, help="directory to write the artifact into")
    f.set_defaults(func=_fetch_heldout)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="store URI (file:///… or s3://bucket/prefix)")
    p.add_argument("--run-prefix", required=True, help="<namespace>/<run>-<uid>")
    p.add_argument("--task", required=True, help="task id, e.g. arith")
    p.add_argument("--heldout", type=Path, required=True, help="the task's staged held-out directory")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N held-out items")
    p.add_argument("--batch-size", type=int, default=None, help="generation batch (transformers backend)")
    add_protocol_arg(p, from_env=True)


def _setup(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from a2rl_grader.evaluate import EvalOptions
    from a2rl_tasks import get_task

    from a2rl.store.layout import RunLayout
    from a2rl.store.open import open_store

    if args.limit is not None and args.limit < 1:
        from a2rl.errors import A2rlError

        raise A2rlError("--limit must be at least 1")
    task = get_task(args.task, protocol=chosen_protocol(args))
    store = open_store(args.store)
    layout = RunLayout.from_prefix(args.run_prefix)
    options = EvalOptions(
        backend=args.backend,
        limit=args.limit,
        batch_size=args.batch_size,
        max_parameters=_max_parameters(args),
    )
    return task, store, layout, options


def _max_parameters(args: argparse.Namespace) -> int | None:
    from a2rl.constants import ENV_EVAL_MAX_PARAMETERS
    from a2rl.errors import A2rlError

    value = getattr(args, "max_parameters", None)
    raw = os.environ.get(ENV_EVAL_MAX_PARAMETERS, "").strip()
    if value is None and raw:
        try:
            value = int(float(raw))
        except ValueError:
            raise A2rlError(
                f"{ENV_EVAL_MAX_PARAMETERS} must be a number of parameters, got {raw!r}"
            ) from None
    if value is not None and value < 1:
        raise A2rlError("the parameter bound must be at least 1")
    return value


@contextlib.contextmanager
def _traced(span_name: str, store: ObjectStore, layout: RunLayout, index: int) -> Iterator[Span]:
    """The eval process's span (child of A2RL_TRACEPARENT; nothing is recorded without it)."""
    from a2rl.constants import COMPONENT_EVAL
    from a2rl.tracing import ATTR_SUBMISSION_INDEX, init_tracing

    tracing = init_tracing(COMPONENT_EVAL, store=store, run_prefix=layout.prefix)
    try:
        with tracing.span(span_name, {ATTR_SUBMISSION_INDEX: index}) as sp:
            yield sp
    finally:
        tracing.shutdown()


def _submission(args: argparse.Namespace) -> int:
    from a2rl_grader.evaluate import evaluate_submission

    task, store, layout, options = _setup(args)
    with _traced("eval_submission", store, layout, args.index):
        result = evaluate_submission(store, layout, args.index, task, args.heldout, options=options)
    print(json.dumps(result.to_json(), sort_keys=True))
    return 0


def _baseline(args: argparse.Namespace) -> int:
    from a2rl_grader.baseline import evaluate_baseline

    from a2rl.errors import NotFoundError
    from a2rl.local_keys import BASELINE_CACHE_KEY, machine_key

    if not (args.model_dir / "config.json").is_file():
        raise NotFoundError(f"base model not found: {args.model_dir} (no config.json)")
    from a2rl.constants import BASELINE_INDEX

    task, store, layout, options = _setup(args)
    with _traced("eval_baseline", store, layout, BASELINE_INDEX) as sp:
        result = evaluate_baseline(
            store,
            layout,
            task,
            args.model_dir,
            args.heldout,
            options=options,
            base_name=args.base_name,
            # local mode only (the operator reads its cache itself): entries are signed and checked
            cache_mac_key=machine_key(BASELINE_CACHE_KEY),
        )
        sp.set_attribute("a2rl.eval.cached", bool(result.cached))
    print(json.dumps(result.to_json(), sort_keys=True))
    return 0


def _fetch_heldout(args: argparse.Namespace) -> int:
    from a2rl_tasks import get_task
    from a2rl_tasks.artifacts import fetch_heldout, heldout_key

    from a2rl.store.open import open_store

    task = get_task(args.task, protocol=chosen_protocol(args))
    manifest = fetch_heldout(open_store(args.store), task, args.seed, args.dest)
    key = heldout_key(task, args.seed)
    print(f"held-out data {key}: {len(manifest.files)} file(s), digest {manifest.digest}")
    return 0
