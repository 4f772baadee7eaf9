"""Code revisions: content-addressed snapshots of the workspace's `code/`.

`CodeSnapshotter.snapshot(reason)` writes `revisions/<n>.json` (a `CodeRevision`,
`a2rl.records.revision`) only when the tree digest or the list of entries left out changed
(numbered from 1, continuing after a recorder restart); a `code/` whose every entry was refused
still gets a revision (no files, the refusals listed). `CodeWatcher` polls `code/` (cheap: file
sizes and mtimes), and snapshots once the tree has changed and then stayed unchanged for the
debounce interval, so a burst of edits gives one revision — or, while `code/` keeps changing, at
least every `max_wait_s`; `stop()` flushes a final one.

`code/` is walked and read without following anything (`a2rl.store.safe_tree`): symlinks, FIFOs,
sockets, devices, files with a second hard link, sparse files and files past the run's cap on
stored bytes (`UploadBudget`, shared with submissions) are left out and listed in the revision's
`refused`; ignored caches (`__pycache__/`, `.ipynb_checkpoints/`, `*.pyc`) are listed in
`ignored`. A `code/` that is itself a symlink gives no revision (a warning is logged).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from a2rl.records.base import load_record, write_record
from a2rl.records.revision import CodeRevision, LeftOut
from a2rl.records.times import utc_now
from a2rl.records.tree import TreeRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import DigestCache, UploadBudget, snapshot_tree
from a2rl.store.layout import RunLayout
from a2rl.store.safe_tree import MISSING, OpenTree, Refusal, TreeRefusedError

#: A cheap fingerprint of a tree: (path, size, mtime in ns) per file.
Signature = tuple[tuple[str, int, int], ...]

log = logging.getLogger(__name__)

IGNORED_DIRS = frozenset({"__pycache__", ".ipynb_checkpoints"})
IGNORED = "ignored"  # the start of every reason for an ignored entry
#: At most this many refused and ignored entries are listed in one revision.
MAX_LISTED = 1000
#: While `code/` keeps changing, a revision is still taken at least this often (seconds).
DEFAULT_MAX_WAIT_S = 10.0


#: What a revision lists as left out: (section, path, reason), sorted.
LeftOutKey = tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Revision:
    index: int
    digest: str
    left_out: LeftOutKey = ()


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
        budget: UploadBudget | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.code_dir = code_dir
        self.max_file_bytes = max_file_bytes
        self.known = known if known is not None else set()
        self.digests = digests if digests is not None else DigestCache()
        self.budget = budget
        self._lock = threading.Lock()
        self._warned = False
        self.latest = self._load_latest()

    def _load_latest(self) -> Revision | None:
        keys = list(self.store.list(self.layout.revisions))
        if not keys:
            return None
        data = load_record(self.store, keys[-1], CodeRevision)
        if data.index is None or data.digest is None:
            raise ValueError(f"{self.store.url_for(keys[-1])} has no index or digest")
        return Revision(data.index, data.digest, _left_out_key(data.skipped, data.refused, data.ignored))

    def _exclude(self, rel: str, st: os.stat_result) -> str | None:
        """Why the walk leaves `rel` out (an ignored cache, a file over the size limit), or None."""
        if stat.S_ISDIR(st.st_mode):
            name = rel.rsplit("/", 1)[-1]
            return f"{IGNORED}: a {name} cache directory" if name in IGNORED_DIRS else None
        if rel.endswith(".pyc"):
            return f"{IGNORED}: compiled Python"
        if st.st_size > self.max_file_bytes:
            return f"larger than the per-file limit of {self.max_file_bytes} bytes"
        return None

    def _open(self) -> OpenTree | None:
        """`code/` opened (no-follow) and scanned; None when it is missing or not a real directory."""
        try:
            tree = OpenTree.open(self.code_dir, label="")
        except TreeRefusedError as exc:
            if exc.refusal.kind != MISSING and not self._warned:
                log.warning(
                    "code revisions: %s %s; nothing in it is recorded", self.code_dir, exc.refusal.reason
                )
                self._warned = True
            return None
        self._warned = False
        try:
            tree.scan(exclude=self._exclude, allow_hard_links=False)
        except BaseException:
            tree.close()
            raise
        return tree

    def signature(self) -> Signature:
        """A cheap fingerprint of `code/` (path, size, mtime; refused entries too), without hashing."""
        tree = self._open()
        if tree is None:
            return ()
        with tree:
            sig = [(f.rel, f.size, f.mtime_ns) for f in tree.files]
            sig += [(f"{r.path}\0{r.reason}", -1, -1) for r in tree.refused]
        return tuple(sorted(sig))

    def snapshot(self, reason: str) -> Revision | None:
        """The revision describing `code/` now; a new one is written only if the digest changed.

        None while no revision exists and `code/` is empty (nothing to record yet).
        """
        with self._lock:
            tree = self._open()
            if tree is None:
                return self.latest
            with tree:
                manifest, stats = snapshot_tree(
                    self.store,
                    self.layout,
                    tree,
                    known=self.known,
                    digests=self.digests,
                    max_file_bytes=self.max_file_bytes,
                    budget=self.budget,
                )
            ignored = [r for r in stats.excluded if r.reason.startswith(IGNORED)]
            oversize = [r.path for r in stats.excluded if not r.reason.startswith(IGNORED)]
            skipped = sorted(stats.skipped + oversize)
            listed: dict[str, list[LeftOut]] = {}
            if stats.refused:
                listed["refused"] = _listed(stats.refused)
            if ignored:
                listed["ignored"] = _listed(ignored)
            left_out = _left_out_key(skipped, listed.get("refused", []), listed.get("ignored", []))
            if self.latest is not None and (manifest.digest, left_out) == (
                self.latest.digest,
                self.latest.left_out,
            ):
                return self.latest
            if self.latest is None and not manifest.entries and not left_out:
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
                    skipped=skipped,
                    **listed,
                ),
            )
            self.latest = Revision(index, manifest.digest, left_out)
            log.info("code revision %d (%s): %d files, %s", index, reason, stats.files, manifest.digest[:12])
            if stats.refused:
                log.warning("code revision %d left out %d refused entries, e.g. %s", index,
                            len(stats.refused), stats.refused[0].message)  # fmt: skip
            return self.latest


def _left_out_key(skipped: list[str], refused: list[LeftOut], ignored: list[LeftOut]) -> LeftOutKey:
    rows = [("skipped", p, "") for p in skipped]
    rows += [("refused", r.path, r.reason) for r in refused]
    rows += [("ignored", r.path, r.reason) for r in ignored]
    return tuple(sorted(rows))


def _listed(entries: list[Refusal]) -> list[LeftOut]:
    out = [LeftOut(path=r.path, reason=r.reason) for r in entries[:MAX_LISTED]]
    if len(entries) > MAX_LISTED:
        out.append(LeftOut(path="…", reason=f"{len(entries) - MAX_LISTED} more not listed"))
    return out


class Debounce:
    """When a watched tree is due for a snapshot: once it has changed and then stayed unchanged for
    `quiet_s`, or — while it keeps changing — once `max_wait_s` have passed since the first change
    not yet recorded (pure: the caller passes each observed signature with the time it was
    observed)."""

    def __init__(self, quiet_s: float, max_wait_s: float | None = None) -> None:
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s
        self._seen: Signature | None = None
        self._recorded: Signature | None = None
        self._changed_at = 0.0
        self._pending_since: float | None = None

    def due(self, signature: Signature, now: float) -> bool:
        changed = signature != self._seen
        if changed:
            self._seen, self._changed_at = signature, now
        if signature == self._recorded:
            self._pending_since = None
            return False
        if self._pending_since is None:
            self._pending_since = now
        overdue = self.max_wait_s is not None and now - self._pending_since >= self.max_wait_s
        if changed:
            return overdue
        return overdue or now - self._changed_at >= self.quiet_s

    def recorded(self, signature: Signature) -> None:
        self._recorded = signature
        self._pending_since = None


class CodeWatcher:
    """Polls `code/` in a daemon thread; snapshots after `debounce_s` of quiet following a change,
    and at least every `max_wait_s` (default `max(DEFAULT_MAX_WAIT_S, debounce_s)`) while it keeps
    changing. A file that lives less than one poll interval may still be missed."""

    def __init__(
        self,
        snapshotter: CodeSnapshotter,
        *,
        poll_s: float,
        debounce_s: float,
        max_wait_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.snapshotter = snapshotter
        self.poll_s = poll_s
        wait = max(DEFAULT_MAX_WAIT_S, debounce_s) if max_wait_s is None else max_wait_s
        self.debounce = Debounce(debounce_s, wait)
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
