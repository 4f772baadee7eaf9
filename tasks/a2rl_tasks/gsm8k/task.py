"""The `gsm8k` task: 4-shot chain-of-thought maths, last-number exact match on the test split.

Protocols: `reference` = OpenCompass `gsm8k_gen_1d7fe4`'s exemplars and OpenCompass's answer
rules (`REFERENCE_RULES`); `a2rl` = our exemplars and rules (`A2RL_RULES`). Decoding is the
same: greedy, 512 new tokens (the config's `max_out_len`), cut at `Question:` (the reference
cuts there when scoring, so stopping the generation there changes no prediction).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest
from a2rl.protocols import DEFAULT_PROTOCOL, PROTOCOL_REFERENCE, EvalProtocol
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.common.gsm8k_scoring import A2RL_RULES, REFERENCE_RULES, AnswerRules, score_record, summarise
from a2rl_tasks.common.jsonl import read_heldout, write_jsonl
from a2rl_tasks.gsm8k import data
from a2rl_tasks.gsm8k.chat import render_chat
from a2rl_tasks.gsm8k.prompting import MAX_NEW_TOKENS, STOP, chat_messages, plain_prompt

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

#: The evaluator's version; `evaluator_version` adds the protocol (`gsm8k-2+reference`).
BASE_VERSION = "gsm8k-2"

TRAIN_FILE = "train.jsonl"
HELDOUT_FILE = "heldout.jsonl"


def rules_of(protocol: EvalProtocol) -> AnswerRules:
    return REFERENCE_RULES if protocol == PROTOCOL_REFERENCE else A2RL_RULES


def score_item(
    item: dict[str, Any], completion: str, mode: str | None = None, protocol: EvalProtocol = "a2rl"
) -> dict[str, Any]:
    """One per-item record: the last number before any `Question:` against the `####` gold."""
    return score_record(item, completion, rules_of(protocol), **({} if mode is None else {"mode": mode}))


def build_prompts(
    backend: Any, questions: list[str], protocol: EvalProtocol = "a2rl"
) -> tuple[list[str], str]:
    """(prompt texts, "chat" | "plain"): chat form when the model has a chat template."""
    rendered = [render_chat(backend, chat_messages(q, protocol)) for q in questions]
    if rendered and all(r is not None for r in rendered):
        return [str(r) for r in rendered], "chat"
    return [plain_prompt(q, protocol) for q in questions], "plain"


class GSM8KTask(Task):
    name = "gsm8k"
    level = "L1"
    metric = "accuracy (%)"
    evaluator_version = BASE_VERSION
    data_version = "1"
    #: No built-in data: staging needs `--source`.
    default_source: str | None = None

    def __init__(
        self, environ: Mapping[str, str] | None = None, *, protocol: EvalProtocol = DEFAULT_PROTOCOL
    ) -> None:
        super().__init__(environ, protocol=protocol)
        self.evaluator_version = self.versioned(BASE_VERSION)

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        train, test = data.load_source(source)
        visible, heldout = data.split(train, test)
        write_jsonl(Path(staged.train_dir) / TRAIN_FILE, visible)
        write_jsonl(Path(staged.heldout_dir) / HELDOUT_FILE, heldout)

    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:

        items = read_heldout(Path(heldout_dir) / HELDOUT_FILE, limit)
        prompts, mode = build_prompts(backend, [it["question"] for it in items], self.protocol)
        # The prompts are already rendered (chat=False): the same text for every backend.
        request = GenerationRequest(max_new_tokens=MAX_NEW_TOKENS, stop=(STOP,))
        completions = backend.generate(prompts, request)
        records = [
            score_item(it, out, mode, self.protocol) for it, out in zip(items, completions, strict=True)
        ]
        return summarise(records, self.evaluator_version)

    def score_predictions(self, predictions: dict[str, str], references: list[dict[str, Any]]) -> EvalResult:
        records = []
        for ref in references:
            if not isinstance(ref.get("question"), str) or not isinstance(ref.get("answer"), str):
                raise A2rlError(f'reference {ref["id"]!r} needs "question" and "answer" (GSM8K format)')
            try:
                records.append(score_item(ref, predictions.get(str(ref["id"]), ""), protocol=self.protocol))
            except ValueError as exc:
                raise A2rlError(f"reference {ref['id']!r}: {exc}") from exc
        return summarise(records, self.evaluator_version)
