"""GSM8K sources and the agent-visible / held-out split (official train / test).

No package ships GSM8K and nothing downloads at evaluation time, so staging needs a source:

- a local directory with `train.jsonl` and `test.jsonl` in the official format
  (`{"question": …, "answer": "…\\n#### N"}`, as in `openai/grade-school-math`);
- two files `TRAIN.jsonl,TEST.jsonl`;
- `s3://bucket/prefix` holding `train.jsonl` and `test.jsonl` (credentials from the usual
  AWS_* variables);
- `hf:openai/gsm8k` (config `main`), via `datasets`, only when the hub is reachable.

The held-out split is the official test split. Train rows whose question or solution also
appears in the test split (whitespace-normalised, case-folded) are dropped, so the two share no
item by content.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl.store.open import open_store
from a2rl_tasks.common.numbers import GOLD_MARKER, parse_gold

HF_PREFIX = "hf:"
NO_SOURCE = (
    "task gsm8k needs a data source (no package ships GSM8K): "
    "a2rl data stage gsm8k --source DIR (train.jsonl + test.jsonl) | TRAIN.jsonl,TEST.jsonl | "
    "s3://bucket/prefix | hf:openai/gsm8k"
)

Rows = list[dict[str, Any]]


def normalise(question: str) -> str:
    return " ".join(question.split()).lower()


def validate(rows: list[Any], origin: str) -> Rows:
    out: Rows = []
    for n, row in enumerate(rows, 1):
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("question"), str)
            or not isinstance(row.get("answer"), str)
        ):
            raise A2rlError(f'{origin}: row {n} needs string fields "question" and "answer"')
        if GOLD_MARKER not in row["answer"]:
            raise A2rlError(f"{origin}: row {n}: answer has no '{GOLD_MARKER} N' line")
        try:
            float(parse_gold(row["answer"]))
        except ValueError as exc:
            raise A2rlError(f"{origin}: row {n}: the answer after '{GOLD_MARKER}' is not a number") from exc
        out.append({"question": row["question"], "answer": row["answer"]})
    if not out:
        raise A2rlError(f"{origin}: no rows")
    return out


def _read_jsonl(path: Path) -> list[Any]:
    if not path.is_file():
        raise A2rlError(f"GSM8K file not found: {path}")
    rows: list[Any] = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise A2rlError(f"{path}:{n}: not JSON: {exc}") from exc
    return rows


def _from_files(train: Path, test: Path) -> tuple[Rows, Rows]:
    return validate(_read_jsonl(train), str(train)), validate(_read_jsonl(test), str(test))


def _from_s3(uri: str) -> tuple[Rows, Rows]:

    store = open_store(uri)
    with tempfile.TemporaryDirectory(prefix="a2rl-gsm8k-") as tmp:
        for name in ("train.jsonl", "test.jsonl"):
            store.get_file(name, Path(tmp) / name)
        return _from_files(Path(tmp) / "train.jsonl", Path(tmp) / "test.jsonl")


def _from_hub(name: str) -> tuple[Rows, Rows]:
    try:
        import datasets

        ds = datasets.load_dataset(name, "main")
        return validate(list(ds["train"]), f"{name}/train"), validate(list(ds["test"]), f"{name}/test")
    except A2rlError:
        raise
    except Exception as exc:
        raise A2rlError(
            f"could not load {HF_PREFIX}{name} ({type(exc).__name__}: {str(exc)[:200]}); the hub is "
            "probably unreachable or offline — pass a local directory with train.jsonl and test.jsonl"
        ) from exc


def load_source(source: str | None) -> tuple[Rows, Rows]:
    """(official train rows, official test rows) from `source`."""
    if source is None or not source.strip():
        raise A2rlError(NO_SOURCE)
    source = source.strip()
    if source.startswith(HF_PREFIX):
        return _from_hub(source[len(HF_PREFIX) :])
    if source.startswith("s3://"):
        return _from_s3(source)
    if "," in source:
        train, test = (Path(p).expanduser() for p in source.split(",", 1))
        return _from_files(train, test)
    path = Path(source).expanduser()
    if not path.is_dir():
        raise A2rlError(f"GSM8K source not found: {source} ({NO_SOURCE})")
    return _from_files(path / "train.jsonl", path / "test.jsonl")


def split(train: Rows, test: Rows) -> tuple[Rows, Rows]:
    """(agent-visible rows, held-out rows) with ids.

    Train rows repeating a test question or solution are dropped."""
    heldout_texts = {normalise(r["question"]) for r in test} | {normalise(r["answer"]) for r in test}
    kept = [
        r
        for r in train
        if normalise(r["question"]) not in heldout_texts and normalise(r["answer"]) not in heldout_texts
    ]
    dropped = len(train) - len(kept)
    if dropped:
        print(
            f"[gsm8k] dropped {dropped} train row(s) that repeat a held-out question or solution",
            file=sys.stderr,
        )
    visible = [{"id": f"gsm8k-train-{i:05d}", **r} for i, r in enumerate(kept, 1)]
    heldout = [{"id": f"gsm8k-test-{i:05d}", **r} for i, r in enumerate(test, 1)]
    return visible, heldout
