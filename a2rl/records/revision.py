"""`revisions/<n>.json`: code revision n, a snapshot of the agent's `code/` tree (written by the
recorder's `CodeSnapshotter`, read back by it after a restart and by the report)."""

from __future__ import annotations

from a2rl.records.base import Record
from a2rl.records.tree import TreeRecord


class CodeRevision(Record):
    """One code revision; every field is optional when reading (the report tolerates partial ones)."""

    index: int | None = None
    created_at: str | None = None
    #: Why it was taken: `change` (the watcher), `submit`, `final`.
    reason: str | None = None
    tree: TreeRecord | None = None
    digest: str | None = None
    files_uploaded: int | None = None
    bytes_uploaded: int | None = None
    #: Files left out of the snapshot (over the size limit).
    skipped: list[str] = []
