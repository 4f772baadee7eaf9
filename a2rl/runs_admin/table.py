"""Plain aligned text tables and the cell formats of `a2rl runs list` / `compare` (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime


def format_score(value: float | None) -> str:
    return "-" if value is None else str(round(float(value), 4))


def format_delta(value: float | None) -> str:
    if value is None:
        return "-"
    text = str(round(float(value), 4))
    return f"+{text}" if value > 0 else text


def format_cost(value: float | None) -> str:
    return "-" if value is None else f"${value:.2f}"


def format_local_time(moment: datetime | None) -> str:
    """`2026-03-01 13:00` in this machine's time zone; `-` for None."""
    return "-" if moment is None else moment.astimezone().strftime("%Y-%m-%d %H:%M")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, gap: str = "  ") -> str:
    """`headers` and `rows` as left-aligned columns, one line each (no trailing spaces)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = [
        gap.join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in [headers, *rows]
    ]
    return "\n".join(lines) + "\n"
