"""Code revisions: content-addressed snapshots of the workspace's `code/`.

`CodeSnapshotter.snapshot(reason)` writes `revisions/<n>.json` (a `CodeRevision`,
`a2rl.records.revision`) only when the tree digest changed (numbered from 1, continuing after a
recorder restart). `CodeWatcher` polls `code/` (cheap: file sizes and mtimes), and snapshots once
the tree has changed and then stayed unchanged for the debounce interval, so a burst of edits
gives one revision; `stop()` flushes a final one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from a2rl.records.base import load_record, write_record
from a2rl.records.revision import CodeRevision
from a2rl.records.times import utc_now
from a2rl.records.tree import TreeRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import DigestCache, iter_files, snapshot_tree
from a2rl.store.layout import RunLayout

#: A cheap fingerprint of a tree: (path, size, mtime in ns) per file.
Signature = tuple[tuple[str, int, int], ...]

log = logging.getLogger(__name__)

IGNORED_DIRS = frozenset({"__pycache__", ".ipynb_checkpoints"})


@dataclass(frozen=True)
class Revision:
    index: int
    digest: str


class CodeSnapshotter:
    def __init__(
        self,
        store: ObjectStore,
        layout: RunLayout,
        code_dir: Path,
        *,
        max_file_bytes: int,
        known: set[str] | None = None,
        digests: DigestCache | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.code_dir = code_dir
        self.max_file_bytes = max_file_bytes
        self.known = known if known is not None else set()
        self.digests = digests if digests is not None else DigestCache()
        self._lock = threading.Lock()
        self.latest = self._load_latest()

    def _load_latest(self) -> Revision | None:
        keys = list(self.store.list(self.layout.revisions))
        if not keys:
            return None
        data = load_record(self.store, keys[-1], CodeRevision)
        if data.index is None or data.digest is None:
            raise ValueError(f"{self.store.url_for(keys[-1])} has no index or digest")
        return Revision(data.index, data.digest)

    def include(self, rel: str) -> bool:
        """Files that belong in a code snapshot: not caches, not oversized (checkpoints, datasets)."""
        if IGNORED_DIRS.intersection(rel.split("/")[:-1]) or rel.endswith(".pyc"):
            return False
        try:
            return (self.code_dir / rel).lstat().st_size <= self.max_file_bytes
        except FileNotFoundError:
            return False

    def signature(self) -> Signature:
        """A cheap fingerprint of `code/` (path, size, mtime) to notice changes without hashing."""
        if not self.code_dir.is_dir():
            return ()
        sig = []
        for rel, path in iter_files(self.code_dir, self.include):
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            sig.append((rel, st.st_size, st.st_mtime_ns))
        return tuple(sig)

    def snapshot(self, reason: str) -> Revision | None:
        """The revision describing `code/` now; a new one is written only if the digest changed.

        None while no revision exists and `code/` is empty (nothing to record yet).
        """
        with self._lock:
            if not self.code_dir.is_dir():
                return self.latest
            skipped_large = [
                rel
                for rel, path in iter_files(self.code_dir)
                if not IGNORED_DIRS.intersection(rel.split("/")[:-1]) and _size(path) > self.max_file_bytes
            ]
            manifest, stats = snapshot_tree(
                self.store,
                self.layout,
                self.code_dir,
                include=self.include,
                known=self.known,
                digests=self.digests,
            )
            if self.latest is not None and manifest.digest == self.latest.digest:
                return self.latest
            if self.latest is None and not manifest.entries:
                return None
            index = 1 if self.latest is None else self.latest.index + 1
            write_record(
                self.store,
                self.layout.revision(index),
                CodeRevision(
                    index=index,
                    created_at=utc_now(),
                    reason=reason,
                    tree=TreeRecord.of(manifest),
                    digest=manifest.digest,
                    files_uploaded=stats.files_uploaded,
                    bytes_uploaded=stats.bytes_uploaded,
                    skipped=sorted(stats.skipped + skipped_large),
                ),
            )
            self.latest = Revision(index, manifest.digest)
            log.info("code revision %d (%s): %d files, %s", index, reason, stats.files, manifest.digest[:12])
            return self.latest


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return 0


class Debounce:
    """When a watched tree is due for a snapshot: once it has changed and then stayed unchanged for
    `quiet_s` (pure: the caller passes each observed signature with the time it was observed)."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self._seen: Signature | None = None
        self._recorded: Signature | None = None
        self._changed_at = 0.0

    def due(self, signature: Signature, now: float) -> bool:
        if signature != self._seen:
            self._seen, self._changed_at = signature, now
            return False
        return signature != self._recorded and now - self._changed_at >= self.quiet_s

    def recorded(self, signature: Signature) -> None:
        self._recorded = signature


class CodeWatcher:
    """Polls `code/` in a daemon thread; snapshots after `debounce_s` of quiet following a change."""

    def __init__(
        self,
        snapshotter: CodeSnapshotter,
        *,
        poll_s: float,
        debounce_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.snapshotter = snapshotter
        self.poll_s = poll_s
        self.debounce = Debounce(debounce_s)
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="a2rl-code-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poll(self) -> Revision | None:
        """One look at `code/`: a snapshot (reason "change") when the debounce says it is due."""
        sig = self.snapshotter.signature()
        if not self.debounce.due(sig, self._clock()):
            return None
        revision = self.snapshotter.snapshot("change")
        self.debounce.recorded(sig)
        return revision

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # a transient store or filesystem error must not kill the watcher
                log.exception("code watcher: snapshot failed; retrying at the next poll")
            self._stop.wait(self.poll_s)

    def stop(self, *, final: bool = True) -> Revision | None:
        """Stop polling; with `final`, flush a last revision (reason "final") if `code/` changed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.snapshotter.snapshot("final") if final else self.snapshotter.latest
