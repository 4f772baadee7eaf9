"""`revisions/<n>.json`: code revision n, a snapshot of the agent's `code/` tree (written by the
recorder's `CodeSnapshotter`, read back by it after a restart and by the report)."""

from __future__ import annotations

from a2rl.records.base import Record
from a2rl.records.tree import TreeRecord


class LeftOut(Record):
    """An entry of `code/` a revision does not hold, and why."""

    path: str
    reason: str


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
    #: Files left out of the snapshot (over the size limit, or vanished while it ran).
    skipped: list[str] = []
    #: Entries refused by the no-follow walk (symlinks, FIFOs, sockets, devices, files with a
    #: second hard link, sparse files, entries swapped while being read) and files past the run's
    #: cap on stored bytes, with the reason; absent when none. A revision whose every entry was
    #: refused has no files and lists them all here.
    refused: list[LeftOut] = []
    #: Ignored caches (`__pycache__/`, `.ipynb_checkpoints/`, `*.pyc`); absent when none.
    ignored: list[LeftOut] = []
