"""The `arith` task: two-number addition and subtraction in GSM8K format, learnable on a CPU."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest
from a2rl.protocols import DEFAULT_PROTOCOL, EvalProtocol
from a2rl_tasks.arith import data
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.common.gsm8k_scoring import score_record
from a2rl_tasks.common.gsm8k_scoring import summarise as gsm8k_summarise
from a2rl_tasks.common.jsonl import read_heldout, write_jsonl
from a2rl_tasks.common.numbers import QUESTION_CUT

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

#: The evaluator's version; `evaluator_version` adds the protocol (`arith-1+reference`).
BASE_VERSION = "arith-1"

TRAIN_FILE = "train.jsonl"
HELDOUT_FILE = "heldout.jsonl"
PROMPT = "Question: {question}\nAnswer: "
MAX_NEW_TOKENS = 24
#: Record fields the summary also reports accuracy by.
GROUP_KEYS = ("op", "style")


def build_prompt(question: str) -> str:
    return PROMPT.format(question=question)


def score_item(item: dict[str, Any], completion: str) -> dict[str, Any]:
    """One per-item record: the prediction and whether it matches the gold number."""
    return score_record(item, completion, op=item.get("op"), style=item.get("style"))


def summarise(records: list[dict[str, Any]], evaluator_version: str) -> EvalResult:
    """Accuracy, accuracy per operation and per question style, and the no-number rate."""
    return gsm8k_summarise(records, evaluator_version, GROUP_KEYS)


class ArithTask(Task):
    name = "arith"
    level = "cpu"
    metric = "exact match (%)"
    evaluator_version = BASE_VERSION
    data_version = "3"
    secret_heldout = True

    def __init__(
        self, environ: Mapping[str, str] | None = None, *, protocol: EvalProtocol = DEFAULT_PROTOCOL
    ) -> None:
        super().__init__(environ, protocol=protocol)
        self.evaluator_version = self.versioned(BASE_VERSION)

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        if source is not None:
            raise A2rlError("task arith generates its data; it takes no data source")
        train, heldout = data.generate(seed, heldout_seed=heldout_seed)
        write_jsonl(Path(staged.train_dir) / TRAIN_FILE, train)
        write_jsonl(Path(staged.heldout_dir) / HELDOUT_FILE, heldout)

    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:

        items = read_heldout(Path(heldout_dir) / HELDOUT_FILE, limit)
        request = GenerationRequest(max_new_tokens=MAX_NEW_TOKENS, stop=(QUESTION_CUT,))
        completions = backend.generate([build_prompt(it["question"]) for it in items], request)
        records = [score_item(it, out) for it, out in zip(items, completions, strict=True)]
        return summarise(records, self.evaluator_version)
