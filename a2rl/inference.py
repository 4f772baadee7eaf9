"""One inference interface for every evaluator; backends: transformers (CPU/GPU) and vLLM (GPU)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GenerationRequest:
    """Greedy generation settings. Evaluation is always greedy (deterministic)."""

    max_new_tokens: int
    stop: Sequence[str] = field(default_factory=tuple)
    #: Apply the tokenizer's chat template to each prompt (as a single user message).
    chat: bool = False


class InferenceBackend(ABC):
    """Generates completions for a batch of prompts with a loaded model."""

    name: str

    @abstractmethod
    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        """Return one completion per prompt (the new text only, cut at the first stop string)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model (GPU memory) when the evaluator is done."""
