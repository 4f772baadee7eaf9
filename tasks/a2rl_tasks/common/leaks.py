"""Keeping held-out text out of the agent's training rows: texts compared whitespace-normalised
and case-folded, and only texts long enough to identify a row (32+ characters) count."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MIN_LEAK_CHARS = 32


def normalise(text: str) -> str:
    """White space folded to single spaces, case-folded."""
    return " ".join(text.split()).casefold()


def leak_texts(
    rows: Iterable[dict[str, Any]], fields: Iterable[str], min_chars: int = MIN_LEAK_CHARS
) -> list[str]:
    """The normalised `fields` of `rows` that are at least `min_chars` long, row by row."""
    names = tuple(fields)
    return [t for r in rows for t in (normalise(r[f]) for f in names) if len(t) >= min_chars]


def contains_any(text: str, needles: Iterable[str]) -> bool:
    """Whether the normalised `text` contains one of the (normalised) `needles`."""
    haystack = normalise(text)
    return any(t in haystack for t in needles)
