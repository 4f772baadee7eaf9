"""Chat-template rendering of multi-turn prompts through whichever backend loaded the model.

`GenerationRequest(chat=True)` wraps one user message; few-shot prompts in chat form need
several turns, so they are rendered here with the model's own tokenizer and sent as plain text
(both backends then tokenize the same string). The tokenizer comes from the backend's
`tokenizer` (transformers: the loaded tokenizer; vLLM: the engine's `get_tokenizer()`). A backend
may also offer `render_chat(messages) -> str | None` itself, which wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Message = dict[str, str]


def backend_tokenizer(backend: Any) -> Any | None:
    """The backend's tokenizer (transformers: the loaded one; vLLM: the engine's), None if unknown."""
    return getattr(backend, "tokenizer", None)


def chat_tokenizer(backend: Any) -> Any | None:
    """The backend's tokenizer when it has a chat template, else None."""
    tok = backend_tokenizer(backend)
    return tok if getattr(tok, "chat_template", None) else None


def context_length(backend: Any) -> int | None:
    """The model's context length as its tokenizer states it (`model_max_length`); None when
    unknown or unset (transformers' huge sentinel)."""
    value = getattr(backend_tokenizer(backend), "model_max_length", None)
    return value if isinstance(value, int) and 0 < value < 10_000_000 else None


def has_chat_template(backend: Any) -> bool:
    return callable(getattr(backend, "render_chat", None)) or chat_tokenizer(backend) is not None


def render_chat(backend: Any, messages: Sequence[Message]) -> str | None:
    """`messages` rendered with the model's chat template plus the generation prompt; None
    when the model has no chat template."""
    own = getattr(backend, "render_chat", None)
    if callable(own):
        rendered = own(list(messages))
        return None if rendered is None else str(rendered)
    tok = chat_tokenizer(backend)
    if tok is None:
        return None
    return str(tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True))
