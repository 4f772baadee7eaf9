"""`submissions/<n>/dispatch.json`: why an evaluation produced no result.json (written by the
recorder, read by it to count the submission as evaluated, and by the report)."""

from __future__ import annotations

from a2rl.records.base import Record
from a2rl.records.times import utc_now


class DispatchRecord(Record):
    index: int | None = None
    status: str | None = None
    error: str | None = None
    exit_code: int | None = None
    #: Store key of the eval process's log, when there was one.
    log: str | None = None
    finished_at: str | None = None

    @classmethod
    def failed(cls, index: int, error: str, exit_code: int | None, log_key: str | None) -> DispatchRecord:
        return cls(
            index=index,
            status="failed",
            error=error,
            exit_code=exit_code,
            log=log_key,
            finished_at=utc_now(),
        )
