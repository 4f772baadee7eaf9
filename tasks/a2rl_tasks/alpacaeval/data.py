"""AlpacaEval sources and the agent-visible / held-out split.

Nothing downloads at evaluation time, so staging needs a source holding two files:

- the **evaluation set** in AlpacaEval format — a JSON list (or JSONL) of
  `{"instruction", "output", "generator", "dataset"}` where `output` is the reference model's
  output (`alpaca_eval_gpt4_baseline.json` from `tatsu-lab/alpaca_eval`: 805 instructions, GPT-4
  Turbo outputs);
- the **training set** in Alpaca format — a JSON list (or JSONL) of `{"instruction", "input",
  "output"}` (`alpaca_data.json` of `tatsu-lab/alpaca`).

Accepted sources: a directory holding both (`alpaca_eval_gpt4_baseline.json` | `alpaca_eval.json`
| `eval.json[l]`, and `alpaca_data.json` | `train.json[l]`), two files `TRAIN,EVAL`,
`s3://bucket/prefix` holding `alpaca_data.json` and `alpaca_eval_gpt4_baseline.json`, or `hf:` (the
two public datasets through `datasets`/`huggingface_hub`, only when asked and reachable).

The public table of AlpacaEval's length-controlled win rate, `df_gamed.csv` (the
`tatsu-lab/alpaca_eval` dataset repo), is staged into the held-out dir when a directory source
holds it next to the evaluation file (it must cover every evaluation item); the evaluation then
computes the exact `length_controlled_v1` LC win rate (`glm.py`), else our simplified one.

Split: every evaluation row is held out; the agent gets the first 2,000 training rows (as the
reference) **after** dropping any training row that repeats a held-out instruction or contains
any held-out text of 32+ characters (whitespace-normalised, case-folded) — the Alpaca and
AlpacaEval sets share instructions, and the reference did not check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl_tasks.alpacaeval.glm import GAMED_FILE, read_gamed_table
from a2rl_tasks.common.leaks import contains_any, leak_texts, normalise
from a2rl_tasks.common.sources import (
    S3_SCHEME,
    fetched_from_store,
    parse_json_lines,
    require_file,
    require_source,
    validate_rows,
)

TRAIN_SIZE = 2000
HF_PREFIX = "hf:"
HF_TRAIN = "tatsu-lab/alpaca"
HF_EVAL_REPO = "tatsu-lab/alpaca_eval"
EVAL_FILE = "alpaca_eval_gpt4_baseline.json"
TRAIN_FILE = "alpaca_data.json"
EVAL_NAMES = (EVAL_FILE, "alpaca_eval.json", "eval.json", "eval.jsonl")
TRAIN_NAMES = (TRAIN_FILE, "train.json", "train.jsonl")
NO_SOURCE = (
    "task alpacaeval needs a data source: a2rl data stage alpacaeval --source DIR "
    f"(with {EVAL_FILE} and {TRAIN_FILE}) | TRAIN.json,EVAL.json | s3://bucket/prefix | hf:"
)

#: The string fields of a row and their defaults (None: required).
EVAL_FIELDS: dict[str, str | None] = {
    "instruction": None,
    "output": None,
    "generator": "reference",
    "dataset": "",
}
TRAIN_FIELDS: dict[str, str | None] = {"instruction": None, "input": "", "output": None}

Rows = list[dict[str, Any]]


def read_json_rows(path: Path) -> list[Any]:
    """A JSON list, or JSON lines when the file is `.jsonl` (or is not one JSON document)."""
    text = require_file(path, "AlpacaEval").read_text(encoding="utf-8")
    if path.suffix != ".jsonl":
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, list):
            return data
        if data is not None:
            raise A2rlError(f"{path}: expected a JSON list of objects")
    return parse_json_lines(text, path)


def _str_field(row: dict[str, Any], key: str, origin: str, n: int, default: str | None = None) -> str:
    value = row.get(key, default)
    if not isinstance(value, str):
        raise A2rlError(f'{origin}: row {n} needs a string field "{key}"')
    return value


def _str_fields(row: dict[str, Any], fields: dict[str, str | None], origin: str, n: int) -> dict[str, str]:
    return {key: _str_field(row, key, origin, n, default) for key, default in fields.items()}


def validate_eval(rows: list[Any], origin: str) -> Rows:
    return validate_rows(rows, origin, lambda n, row: _str_fields(row, EVAL_FIELDS, origin, n))


def validate_train(rows: list[Any], origin: str) -> Rows:
    return validate_rows(rows, origin, lambda n, row: _str_fields(row, TRAIN_FIELDS, origin, n))


def _from_files(train: Path, evals: Path) -> tuple[Rows, Rows]:
    return validate_train(read_json_rows(train), str(train)), validate_eval(read_json_rows(evals), str(evals))


def _first(directory: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    raise A2rlError(f"{directory}: no {what} file (looked for {', '.join(names)}); {NO_SOURCE}")


def _from_s3(uri: str) -> tuple[Rows, Rows]:
    with fetched_from_store(uri, (TRAIN_FILE, EVAL_FILE), prefix="a2rl-alpacaeval-") as tmp:
        return _from_files(tmp / TRAIN_FILE, tmp / EVAL_FILE)


def _from_hub() -> tuple[Rows, Rows]:
    try:
        import datasets
        from huggingface_hub import hf_hub_download

        train = list(datasets.load_dataset(HF_TRAIN, split="train"))
        path = hf_hub_download(HF_EVAL_REPO, filename=EVAL_FILE, repo_type="dataset")
    except Exception as exc:
        raise A2rlError(
            f"could not load {HF_TRAIN} / {HF_EVAL_REPO} ({type(exc).__name__}: {str(exc)[:200]}); the hub "
            f"is probably unreachable or offline — pass a local directory with {EVAL_FILE} and {TRAIN_FILE}"
        ) from exc
    return validate_train(train, HF_TRAIN), validate_eval(read_json_rows(Path(path)), EVAL_FILE)


def load_source(source: str | None) -> tuple[Rows, Rows]:
    """(training rows in Alpaca format, evaluation rows in AlpacaEval format)."""
    source = require_source(source, NO_SOURCE)
    if source.startswith(HF_PREFIX):
        return _from_hub()
    if source.startswith(S3_SCHEME):
        return _from_s3(source)
    if "," in source:
        train, evals = (Path(p.strip()).expanduser() for p in source.split(",", 1))
        return _from_files(train, evals)
    path = Path(source).expanduser()
    if not path.is_dir():
        raise A2rlError(f"AlpacaEval source not found: {source} ({NO_SOURCE})")
    return _from_files(_first(path, TRAIN_NAMES, "training"), _first(path, EVAL_NAMES, "evaluation"))


def lc_table_source(source: str | None) -> Path | None:
    """`df_gamed.csv` of a directory source, None when the source is not a directory or lacks it."""
    if source is None or source.strip().startswith((HF_PREFIX, S3_SCHEME)) or "," in source:
        return None
    path = Path(source.strip()).expanduser() / GAMED_FILE
    return path if path.is_file() else None


def stage_lc_table(source: str | None, n_eval: int, heldout_dir: Path) -> bool:
    """Copy the source's `df_gamed.csv` into `heldout_dir` after checking that it parses and has an
    instruction difficulty for each of the `n_eval` evaluation items; False when there is none."""
    path = lc_table_source(source)
    if path is None:
        return False
    read_gamed_table(path).difficulties(n_eval)
    (heldout_dir / GAMED_FILE).write_bytes(path.read_bytes())
    return True


def question(row: dict[str, Any]) -> str:
    """The reference's `question` field: the instruction, plus the input after a blank line."""
    return row["instruction"] + ("\n\n" + row["input"] if row.get("input") else "")


def split(train: Rows, evals: Rows, train_size: int = TRAIN_SIZE) -> tuple[Rows, Rows]:
    """(agent-visible rows, held-out rows) with ids; see the module docstring for the rule."""
    heldout_instr = {normalise(r["instruction"]) for r in evals}
    heldout_texts = leak_texts(evals, ("instruction", "output"))
    visible: Rows = []
    dropped = 0
    for row in train:
        if len(visible) >= train_size:
            break
        text = " ".join((row["instruction"], row["input"], row["output"]))
        if normalise(row["instruction"]) in heldout_instr or contains_any(text, heldout_texts):
            dropped += 1
            continue
        visible.append(
            {
                "id": f"alpacaeval-train-{len(visible) + 1:05d}",
                **row,
                "question": question(row),
                "answer": row["output"],
            }
        )
    if dropped:
        print(f"[alpacaeval] dropped {dropped} training row(s) that repeat held-out text", file=sys.stderr)
    heldout = [{"id": f"alpacaeval-{i:05d}", **r} for i, r in enumerate(evals, 1)]
    return visible, heldout
