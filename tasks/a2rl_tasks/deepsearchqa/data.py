"""DeepSearchQA sources and the reference's seed-42 split (100 train / 200 held out).

The source is the `eval` split of `google/deepsearchqa` (900 questions; columns `example_id`,
`problem`, `problem_category`, `answer`, `answer_type` ∈ {"Single Answer", "Set Answer"}) in the
order the dataset ships it:

- a `.jsonl`, `.json` (a list) or `.csv` file with those columns, or a directory holding one
  (`deepsearchqa.jsonl|json|csv`, `eval.jsonl|json|csv`, `DSQA-full.csv`);
- `s3://bucket/prefix` holding `deepsearchqa.jsonl`;
- `hf:` → `datasets.load_dataset("google/deepsearchqa", split="eval")`, only when asked and reachable.

Split (as the reference's `data.py`): shuffle with seed 42 the way `datasets.Dataset.shuffle(seed=42)`
does — `numpy.random.default_rng(42).permutation(n)` — then rows 0-99 → agent, rows 100-299 →
held out, the rest unused. Sources with fewer than 300 rows (tests, smoke runs) are split one
third / two thirds in the same shuffled order. Agent rows that contain a held-out question or
answer of 32+ characters (whitespace-normalised, case-folded) are dropped.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl_tasks.common.leaks import contains_any, leak_texts
from a2rl_tasks.common.sources import (
    S3_SCHEME,
    fetched_from_store,
    parse_json_lines,
    require_file,
    require_source,
    validate_rows,
)

DATASET = "google/deepsearchqa"
SOURCE_SPLIT = "eval"
SHUFFLE_SEED = 42
TRAIN_SIZE = 100
EVAL_SIZE = 200
HF_PREFIX = "hf:"
S3_FILE = "deepsearchqa.jsonl"
DIR_NAMES = (
    *(f"{stem}.{ext}" for stem in ("deepsearchqa", "eval") for ext in ("jsonl", "json", "csv")),
    "DSQA-full.csv",
)
ANSWER_TYPES = ("Single Answer", "Set Answer")
NO_SOURCE = (
    "task deepsearchqa needs a data source: a2rl data stage deepsearchqa --source FILE|DIR "
    f"(the {DATASET} '{SOURCE_SPLIT}' split as .jsonl/.json/.csv) | s3://bucket/prefix | hf:"
)

Rows = list[dict[str, Any]]


def _read_file(path: Path) -> list[Any]:
    require_file(path, "DeepSearchQA")
    if path.suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise A2rlError(f"{path}: not JSON: {exc}") from exc
        if not isinstance(data, list):
            raise A2rlError(f"{path}: expected a JSON list of objects")
        return data
    return parse_json_lines(text, path)


def _row(n: int, row: dict[str, Any], origin: str) -> dict[str, Any]:
    problem, answer = row.get("problem"), row.get("answer")
    if not isinstance(problem, str) or not problem.strip() or not isinstance(answer, str):
        raise A2rlError(f'{origin}: row {n} needs string fields "problem" and "answer"')
    answer_type = row.get("answer_type") or "Single Answer"
    if answer_type not in ANSWER_TYPES:
        raise A2rlError(f"{origin}: row {n}: answer_type {answer_type!r} is not one of {ANSWER_TYPES}")
    category = row.get("problem_category") or ""
    example_id = row.get("example_id")
    return {
        "example_id": str(example_id) if example_id not in (None, "") else str(n - 1),
        "problem": problem,
        "problem_category": str(category),
        "answer": answer,
        "answer_type": answer_type,
    }


def validate(rows: list[Any], origin: str) -> Rows:
    out = validate_rows(rows, origin, lambda n, row: _row(n, row, origin))
    ids = [r["example_id"] for r in out]
    if len(set(ids)) != len(ids):
        raise A2rlError(f"{origin}: example_id values are not unique")
    return out


def _from_hub() -> Rows:
    try:
        import datasets

        ds = datasets.load_dataset(DATASET, split=SOURCE_SPLIT)
    except Exception as exc:
        raise A2rlError(
            f"could not load {HF_PREFIX}{DATASET} ({type(exc).__name__}: {str(exc)[:200]}); the hub is "
            "probably unreachable or offline — pass a local file with the 'eval' split"
        ) from exc
    return validate(list(ds), DATASET)


def _from_s3(uri: str) -> Rows:
    with fetched_from_store(uri, (S3_FILE,), prefix="a2rl-deepsearchqa-") as tmp:
        return validate(_read_file(tmp / S3_FILE), f"{uri}/{S3_FILE}")


def load_source(source: str | None) -> Rows:
    """The source rows in their shipped order."""
    source = require_source(source, NO_SOURCE)
    if source.startswith(HF_PREFIX):
        return _from_hub()
    if source.startswith(S3_SCHEME):
        return _from_s3(source)
    path = Path(source).expanduser()
    if path.is_dir():
        for name in DIR_NAMES:
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise A2rlError(f"{source}: no DeepSearchQA file (looked for {', '.join(DIR_NAMES)})")
    elif not path.is_file():
        raise A2rlError(f"DeepSearchQA source not found: {source} ({NO_SOURCE})")
    return validate(_read_file(path), str(path))


def shuffled_order(n: int, seed: int = SHUFFLE_SEED) -> list[int]:
    """The order `datasets.Dataset.shuffle(seed=seed)` puts n rows in."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


def split_sizes(n: int) -> tuple[int, int]:
    if n >= TRAIN_SIZE + EVAL_SIZE:
        return TRAIN_SIZE, EVAL_SIZE
    return n // 3, n - n // 3


def split(rows: Rows, seed: int = SHUFFLE_SEED) -> tuple[Rows, Rows, dict[str, Any]]:
    """(agent-visible rows, held-out rows, split metadata)."""
    order = shuffled_order(len(rows), seed)
    n_train, n_eval = split_sizes(len(rows))
    train = [rows[i] for i in order[:n_train]]
    heldout = [rows[i] for i in order[n_train : n_train + n_eval]]
    heldout_texts = leak_texts(heldout, ("problem", "answer"))
    visible = [r for r in train if not contains_any(f"{r['problem']} {r['answer']}", heldout_texts)]
    if len(visible) < len(train):
        print(
            f"[deepsearchqa] dropped {len(train) - len(visible)} train row(s) that repeat held-out text",
            file=sys.stderr,
        )
    meta = {
        "dataset": DATASET,
        "source_split": SOURCE_SPLIT,
        "shuffle_seed": seed,
        "train_size": len(visible),
        "eval_size": len(heldout),
        "unused_size": len(rows) - n_train - n_eval,
        "total_size": len(rows),
    }
    return (
        [{"id": f"deepsearchqa-{r['example_id']}", **r} for r in visible],
        [{"id": f"deepsearchqa-{r['example_id']}", **r} for r in heldout],
        meta,
    )
