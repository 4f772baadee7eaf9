"""`7d`, `12h`, `30m`, `90s`, `2w`: the durations `a2rl runs prune --older-than` takes."""

from __future__ import annotations

import re
from datetime import timedelta

from a2rl.errors import A2rlError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")


def parse_duration(text: str) -> timedelta:
    """`<number><unit>` (units s, m, h, d, w; e.g. `7d`, `12h`, `1.5h`) as a positive timedelta."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise A2rlError(
            f"not a duration: {text!r} (expected a number and a unit s, m, h, d or w, e.g. 7d or 12h)"
        )
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise A2rlError(f"duration must be positive: {text!r}")
    return timedelta(seconds=seconds)


def format_duration(seconds: float | None) -> str:
    """A short human duration: `45s`, `12m`, `3h05m`, `2d04h`; `-` for None."""
    if seconds is None:
        return "-"
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def format_bytes(n: int) -> str:
    """`512 B`, `1.5 KiB`, `3.2 GiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable
