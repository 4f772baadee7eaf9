"""Text helpers shared by the backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from a2rl_grader.inference.loading import ModelLoadError


def cut_at_stops(text: str, stops: Sequence[str]) -> str:
    """`text` up to the earliest occurrence of any stop string (unchanged when none occurs)."""
    end = len(text)
    for stop in stops:
        if stop:
            i = text.find(stop)
            if 0 <= i < end:
                end = i
    return text[:end]


def largest_power_of_two_at_most(n: int) -> int:
    """1, 2, 4, 8 … ≤ n (1 for n < 1): tensor-parallel sizes must divide the attention heads."""
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def prompt_texts(tokenizer: Any, prompts: Sequence[str], chat: bool) -> list[str]:
    """What a backend tokenizes: the prompts, or (`chat`) each as one user message in the
    tokenizer's chat template with the generation prompt added."""
    if not chat:
        return list(prompts)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError("chat prompts need a chat template, and the tokenizer has none")
    return [
        str(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
            )
        )
        for p in prompts
    ]
