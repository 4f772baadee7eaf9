"""Time zero and seconds since it, shared by every section of the report (docs/report.md, "Metrics")."""

from __future__ import annotations

from datetime import datetime

from a2rl_grader.report.history import RunHistory

SECONDS_DIGITS = 3
RATIO_DIGITS = 4


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def origin(history: RunHistory) -> datetime | None:
    """Time zero of every `*_s` metric: run.json `started_at`, else the earliest recorded event."""
    if history.run.started_at is not None:
        return history.run.started_at
    times = [s.submitted_at for s in history.submissions if s.submitted_at is not None]
    times += [r.created_at for r in history.revisions if r.created_at is not None]
    return min(times) if times else None


def seconds_since(start: datetime | None, moment: datetime | None) -> float | None:
    if start is None or moment is None:
        return None
    return round((moment - start).total_seconds(), SECONDS_DIGITS)


def clock(seconds: float | None) -> str:
    """The page's one time base: seconds since the run's start as `m:ss` (`h:mm:ss` from an hour
    on; negative before the start, e.g. the baseline's `-0:20`); "-" for None."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    total = int(abs(seconds) + 0.5)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours}:{minutes:02d}:{secs:02d}" if hours else f"{sign}{minutes}:{secs:02d}"
