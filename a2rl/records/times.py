"""How every a2rl document writes a time: ISO 8601 in UTC with a `Z` suffix (microseconds when the
moment has them), e.g. `2026-11-24T18:04:19.123456Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(moment: datetime | float | None) -> str | None:
    """`moment` (an aware datetime, or epoch seconds) as stored; None stays None."""
    if moment is None:
        return None
    when = moment.astimezone(UTC) if isinstance(moment, datetime) else datetime.fromtimestamp(moment, UTC)
    return when.isoformat().replace("+00:00", "Z")


def utc_now() -> str:
    """Now, as stored."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")
