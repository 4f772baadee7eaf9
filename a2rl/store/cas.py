"""Content-addressed snapshots of directory trees.

A tree is described by a `TreeManifest`: every regular file's relative path, sha256, size and
mode, plus a digest of that list. File contents are stored once as blobs keyed by sha256, so an
unchanged file is never uploaded twice and two identical trees have the same digest (that is
how a submission identical to the base model is detected).

Trees are walked and read through `a2rl.store.safe_tree`: nothing is followed (a symlink, the
root included, is never read through), only regular files and directories are taken, and each
file is hashed and uploaded from the one descriptor that was checked (`put_fileobj_verified`).
`restore_tree` and `hash_file` read trusted paths (the store's own downloads).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from a2rl.errors import A2rlError
from a2rl.store.base import ContentChangedError, ObjectStore
from a2rl.store.local import check_key
from a2rl.store.safe_tree import (
    CHANGED,
    FdReader,
    OpenTree,
    Refusal,
    TreeFile,
    TreeRefusedError,
    read_chunks,
)


class BlobLayout(Protocol):
    """Where a tree's blobs live: a run's `blobs/` (`RunLayout`) or the store's model library."""

    def blob(self, digest: str) -> str: ...


CHUNK = 1 << 20


@dataclass(frozen=True)
class TreeEntry:
    path: str
    sha256: str
    size: int
    mode: int


@dataclass(frozen=True)
class TreeManifest:
    entries: tuple[TreeEntry, ...]

    @property
    def digest(self) -> str:
        canonical = json.dumps([[e.path, e.sha256, e.size] for e in self.entries], separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "files": [asdict(e) for e in self.entries]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TreeManifest:
        manifest = cls(tuple(TreeEntry(**e) for e in data["files"]))
        if "digest" in data and data["digest"] != manifest.digest:
            raise ValueError("tree manifest digest does not match its entries")
        return manifest


@dataclass
class SnapshotStats:
    files: int = 0
    bytes_total: int = 0
    files_uploaded: int = 0
    bytes_uploaded: int = 0
    #: Blobs copied inside the store from `copy_from` layouts instead of uploaded.
    files_copied: int = 0
    bytes_copied: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)
    #: Links, special files, hard links, swapped entries left out (`a2rl.store.safe_tree`).
    refused: list[Refusal] = field(default_factory=list)
    #: Files and directories the caller's policy left out (caches, over-size files), with why.
    excluded: list[Refusal] = field(default_factory=list)


def sha256_file(path: Path) -> str:
    """sha256 of a trusted file (follows links; for agent-written trees use `hash_tree`)."""
    return hash_file(path)[0]


def iter_files(root: Path, include: Callable[[str], bool] | None = None) -> list[tuple[str, Path]]:
    """Regular files under `root` as sorted (relative posix path, path) pairs.

    Walked with `a2rl.store.safe_tree` (no link is ever followed, the root included): symlinks,
    sockets and other special files are left out. The paths are for display and trusted
    readers; agent-written trees are read through `snapshot_tree`/`hash_tree`, never by path.
    """
    with OpenTree.open(Path(root)) as tree:
        tree.scan(include=include)
        return [(f.rel, Path(root) / f.rel) for f in tree.files]


def hash_tree(root: Path | OpenTree, include: Callable[[str], bool] | None = None) -> TreeManifest:
    """The manifest of `root`'s regular files, read through no-follow descriptors (nothing stored)."""
    tree, owned = _opened(root, include)
    try:
        entries = []
        for f in tree.files:
            try:
                fd = tree.open_file(f)
            except (FileNotFoundError, TreeRefusedError):
                if tree.strict:
                    raise
                continue
            try:
                digest, size = _hash_fd(fd, None, None)
            finally:
                os.close(fd)
            entries.append(TreeEntry(f.rel, digest, size, f.mode))
        return TreeManifest(tuple(entries))
    finally:
        if owned:
            tree.close()


def _opened(root: Path | OpenTree, include: Callable[[str], bool] | None) -> tuple[OpenTree, bool]:
    """`root` itself when already opened and scanned; else opened (no-follow) and scanned leniently."""
    if isinstance(root, OpenTree):
        return root, False
    tree = OpenTree.open(Path(root), label="")
    try:
        tree.scan(include=include)
    except BaseException:
        tree.close()
        raise
    return tree, True


# --- snapshots: hash a tree, upload the blobs the store lacks; restore a tree from blobs -------

SNAPSHOT_WORKERS = 4
CHANGE_RETRIES = 3

# Blob keys known to exist, per process (`<store uri>/<blob key>`): a blob is immutable once
# written, so a digest seen once never needs another `exists` round trip (a HEAD on S3).
_KNOWN_BLOBS: set[str] = set()
_KNOWN_LOCK = threading.Lock()


def forget_known_blobs() -> None:
    """Drop the process-wide cache of blobs known to exist (tests; after deleting blobs)."""
    with _KNOWN_LOCK:
        _KNOWN_BLOBS.clear()


def hash_file(path: Path) -> tuple[str, int]:
    """(sha256 hex, bytes read) of a trusted file, streaming in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


class _TooLongError(Exception):
    """A file read past the limit it was allowed (it grew after the scan)."""


def _hash_fd(fd: int, limit: int | None, check: Callable[[], None] | None) -> tuple[str, int]:
    """(sha256, bytes) of descriptor `fd` from offset 0; `_TooLongError` past `limit` bytes."""
    h = hashlib.sha256()
    size = 0
    for chunk in read_chunks(fd, limit=limit, check=check, chunk=CHUNK):
        size += len(chunk)
        if limit is not None and size > limit:
            raise _TooLongError
        h.update(chunk)
    if check is not None:
        check()
    return h.hexdigest(), size


class SnapshotDeadlineError(A2rlError):
    """A file could not be read completely before the snapshot's read deadline."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path} could not be read completely before the deadline")


class StoreBudgetError(A2rlError):
    """Storing a blob would take the run past its cap on bytes stored (`UploadBudget`)."""

    def __init__(self, name: str, size: int, limit: int, used: int) -> None:
        #: Why, without the file's name (for a listing under it).
        self.reason = (
            f"its {size} bytes would take this run past its limit of {limit} bytes stored ({used} used)"
        )
        super().__init__(
            f"storing {name} ({size} bytes) would take this run past its limit of {limit} bytes stored "
            f"({used} used); store fewer or smaller distinct files"
        )


#: Refusal kind of a file left out of a lenient snapshot because the run's byte cap is reached.
OVER_BUDGET = "over-budget"
#: At run start, a run may store at most this fraction of the store's free space (local stores).
FREE_SPACE_FRACTION = 0.5


def run_stored_cap(configured: int | None, free_bytes: int | None) -> int | None:
    """The cap on new blob bytes for one run: the configured cap (None: none), and at most
    `FREE_SPACE_FRACTION` of the store's free space when the store reports it, so the cap is
    never above what its disk can hold."""
    from_free = None if free_bytes is None else int(free_bytes * FREE_SPACE_FRACTION)
    return min((c for c in (configured, from_free) if c is not None), default=None)


class UploadBudget:
    """A cap on the bytes one run uploads as new blobs (deduplicated and in-store copies are free).

    Shared by concurrent snapshots (submissions and code revisions): `reserve` before an upload
    (raises `StoreBudgetError` past the cap), `release` when the upload did not happen.
    `for_store` computes the cap at run start from the configured one and the store's free space.
    """

    def __init__(self, limit: int | None, used: int = 0) -> None:
        self.limit = limit
        self.used = used
        self._lock = threading.Lock()

    @classmethod
    def for_store(cls, store: ObjectStore, configured: int | None) -> UploadBudget:
        """The budget of a run starting now on `store` (`configured` None or <= 0: no configured cap)."""
        return cls(run_stored_cap(configured if configured and configured > 0 else None, store.free_bytes()))

    def reserve(self, n: int, name: str) -> None:
        with self._lock:
            if self.limit is not None and self.used + n > self.limit:
                raise StoreBudgetError(name, n, self.limit, self.used)
            self.used += n

    def release(self, n: int) -> None:
        with self._lock:
            self.used = max(0, self.used - n)


# A file's digest is cached only when its last change is at least this much older than the read:
# a write in the same timestamp tick as the read would otherwise go unnoticed ("racy git").
STABLE_AFTER_NS = 1_000_000_000


class DigestCache:
    """sha256 of files already hashed, so an unchanged file is not read again on the next snapshot.

    An entry is valid while the file's (device, inode, size, mtime, ctime) are unchanged. The ctime
    cannot be set from user space, so any write — even one that restores the mtime — invalidates
    it. Only files that had not changed for `STABLE_AFTER_NS` before being read are cached.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[tuple[int, int, int, int, int], str]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def get(self, path: Path | str, st: os.stat_result) -> str | None:
        with self._lock:
            found = self._entries.get(str(path))
        return found[1] if found is not None and found[0] == self._stamp(st) else None

    def put(self, path: Path | str, st: os.stat_result, digest: str, read_started_ns: int) -> None:
        if max(st.st_ctime_ns, st.st_mtime_ns) > read_started_ns - STABLE_AFTER_NS:
            return
        with self._lock:
            self._entries[str(path)] = (self._stamp(st), digest)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class _BlobUploader:
    """Uploads blobs at most once per process and store, counting what was actually sent."""

    def __init__(
        self,
        store: ObjectStore,
        layout: BlobLayout,
        known: set[str] | None,
        copy_from: Sequence[BlobLayout] = (),
        budget: UploadBudget | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.known = known
        self.copy_from = tuple(copy_from)
        self.budget = budget
        self.lock = threading.Lock()
        self._digest_locks: dict[str, threading.Lock] = {}
        self.files_uploaded = 0
        self.bytes_uploaded = 0
        self.files_copied = 0
        self.bytes_copied = 0

    def _copy_in_store(self, digest: str, key: str, size: int) -> bool:
        """Copy the blob from a `copy_from` layout that has it (no upload); False when none has."""
        for source in self.copy_from:
            src = source.blob(digest)
            if self.store.exists(src):
                self.store.copy(src, key)
                with self.lock:
                    self.files_copied += 1
                    self.bytes_copied += size
                return True
        return False

    def _cache_key(self, digest: str) -> str:
        return f"{self.store.uri}/{self.layout.blob(digest)}"

    def is_known(self, digest: str) -> bool:
        if self.known is not None and digest in self.known:
            return True
        with _KNOWN_LOCK:
            hit = self._cache_key(digest) in _KNOWN_BLOBS
        if hit and self.known is not None:
            with self.lock:
                self.known.add(digest)
        return hit

    def remember(self, digest: str) -> None:
        if self.known is not None:
            with self.lock:
                self.known.add(digest)
        with _KNOWN_LOCK:
            _KNOWN_BLOBS.add(self._cache_key(digest))

    def _lock_for(self, digest: str) -> threading.Lock:
        with self.lock:
            return self._digest_locks.setdefault(digest, threading.Lock())

    def ensure(
        self, fd: int, name: str, digest: str, size: int, rehash: Callable[[], tuple[str, int]]
    ) -> tuple[str, int]:
        """Make sure the blob of descriptor `fd` is stored; returns the (digest, size) stored.

        The upload reads `fd` (never a path) and is verified against `digest`. When the file
        changed since it was hashed, `rehash()` decides: it hashes again (the snapshot records
        the newer content) or raises (past a read deadline: `SnapshotDeadlineError`).
        """
        for _ in range(CHANGE_RETRIES):
            if self.is_known(digest):
                return digest, size
            with self._lock_for(digest):  # identical files: one upload
                if self.is_known(digest):
                    return digest, size
                key = self.layout.blob(digest)
                if self.store.exists(key) or self._copy_in_store(digest, key, size):
                    self.remember(digest)
                    return digest, size
                if self.budget is not None:
                    self.budget.reserve(size, name)
                try:
                    self.store.put_fileobj_verified(key, FdReader(fd, size), digest, size=size, name=name)
                except ContentChangedError:
                    if self.budget is not None:
                        self.budget.release(size)
                    digest, size = rehash()
                    continue
                except BaseException:
                    if self.budget is not None:
                        self.budget.release(size)
                    raise
                self.remember(digest)
                with self.lock:
                    self.files_uploaded += 1
                    self.bytes_uploaded += size
                return digest, size
        why = "kept changing while it was being snapshotted; try again once it is written"
        raise TreeRefusedError(Refusal(name, why, CHANGED))


def snapshot_tree(
    store: ObjectStore,
    layout: BlobLayout,
    root: Path | OpenTree,
    *,
    include: Callable[[str], bool] | None = None,
    known: set[str] | None = None,
    workers: int = SNAPSHOT_WORKERS,
    digests: DigestCache | None = None,
    copy_from: Sequence[BlobLayout] = (),
    max_file_bytes: int | None = None,
    read_deadline: float | None = None,
    clock: Callable[[], float] = time.time,
    budget: UploadBudget | None = None,
) -> tuple[TreeManifest, SnapshotStats]:
    """Hash every regular file under `root` and upload the blobs the store does not have yet.

    `root` is a path (opened without following links and scanned leniently: links and special
    files are left out and listed in `stats.refused`) or an `OpenTree` the caller opened and
    scanned with its own policy (`strict`: any refused entry raises `TreeRefusedError`). Every
    file is opened relative to its parent directory's descriptor, checked to be the inode the
    scan saw, and hashed and uploaded from that one descriptor (`a2rl.store.safe_tree`).

    Idempotent and safe to retry: blobs are content-addressed and written atomically, and a blob
    key never holds anything but the content of its digest. `known` (optional) is a caller-held
    set of digests already stored, extended with every blob this call stores or finds. `digests`
    (optional) skips re-hashing files unchanged since an earlier snapshot. A blob that one of the
    `copy_from` layouts already holds (e.g. the model library) is copied inside the store instead
    of uploaded. Files that vanish while the snapshot runs are left out and listed in
    `stats.skipped`; files that grow past `max_file_bytes` while being read are left out and
    listed in `stats.excluded`. In a strict tree a file whose size differs from the scan's
    raises `TreeRefusedError` (kind `changed`).

    `read_deadline` (epoch seconds on `clock`): every read of the tree must finish before it,
    else `SnapshotDeadlineError`; an upload whose bytes no longer match the hash is then never
    re-hashed after the deadline (the bytes recorded are the bytes read before it). `budget`
    caps the bytes uploaded (`StoreBudgetError`). A sparse file (`safe_tree.SPARSE`, checked
    when opened and again after it was read) and, in a lenient tree, a file past the `budget`
    (kind `OVER_BUDGET`) are left out and listed in `stats.refused`; a strict tree raises.
    """
    t0 = time.monotonic()
    stats = SnapshotStats()
    tree, owned = _opened(root, include)
    uploader = _BlobUploader(store, layout, known, copy_from, budget)
    lock = threading.Lock()
    skipped: list[str] = []
    refused: list[Refusal] = []
    excluded: list[Refusal] = []

    def one(f: TreeFile) -> TreeEntry | None:
        name = tree.shown(f.rel)

        def check() -> None:
            if read_deadline is not None and clock() >= read_deadline:
                raise SnapshotDeadlineError(name)

        def changed() -> TreeRefusedError:
            why = "changed while it was being read; submit again once it is completely written"
            return TreeRefusedError(Refusal(name, why, CHANGED))

        limit = f.size if tree.strict else max_file_bytes

        def rehash() -> tuple[str, int]:
            try:
                digest, size = _hash_fd(fd, limit, check)
            except _TooLongError:
                raise changed() from None
            if tree.strict and size != f.size:
                raise changed()
            tree.check_not_sparse(fd, f)
            return digest, size

        try:
            fd = tree.open_file(f)
        except FileNotFoundError:
            with lock:
                skipped.append(f.rel)
            return None
        except TreeRefusedError as exc:
            if tree.strict:
                raise
            with lock:
                refused.append(exc.refusal)
            return None
        try:
            st = os.fstat(fd)
            cache_key = str(tree.path / f.rel)
            cached = digests.get(cache_key, st) if digests is not None else None
            if cached is not None:
                check()
                digest, size = cached, st.st_size
                if tree.strict and size != f.size:
                    raise changed()
            else:
                started = time.time_ns()
                try:
                    digest, size = _hash_fd(fd, limit, check)
                except _TooLongError:
                    if tree.strict:
                        raise changed() from None
                    why = f"grew past the limit of {limit} bytes while it was read"
                    with lock:
                        excluded.append(Refusal(name, why, "excluded"))
                    return None
                if tree.strict and size != f.size:
                    raise changed()
                # Holes punched (or `truncate -s` past the end) while the file was read.
                tree.check_not_sparse(fd, f)
                if digests is not None and size == st.st_size:
                    digests.put(cache_key, st, digest, started)
            digest, size = uploader.ensure(fd, name, digest, size, rehash)
            return TreeEntry(f.rel, digest, size, f.mode)
        except TreeRefusedError as exc:
            if tree.strict:
                raise
            with lock:
                refused.append(exc.refusal)
            return None
        except StoreBudgetError as exc:
            if tree.strict:
                raise
            with lock:
                refused.append(Refusal(name, f"was not stored: {exc.reason}", OVER_BUDGET))
            return None
        finally:
            os.close(fd)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(one, f) for f in tree.files]
            try:
                done = [future.result() for future in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
    finally:
        if owned:
            tree.close()
    entries = [e for e in done if e is not None]
    manifest = TreeManifest(tuple(sorted(entries, key=lambda e: e.path)))
    stats.files = len(manifest.entries)
    stats.bytes_total = manifest.total_bytes
    stats.files_uploaded = uploader.files_uploaded
    stats.bytes_uploaded = uploader.bytes_uploaded
    stats.files_copied = uploader.files_copied
    stats.bytes_copied = uploader.bytes_copied
    stats.skipped = sorted(skipped)
    stats.refused = [*tree.refused, *sorted(refused, key=lambda r: r.path)]
    stats.excluded = [*tree.excluded, *sorted(excluded, key=lambda r: r.path)]
    stats.seconds = round(time.monotonic() - t0, 3)
    return manifest, stats


def restore_tree(
    store: ObjectStore,
    layout: BlobLayout,
    manifest: TreeManifest,
    dest: Path,
    *,
    workers: int = SNAPSHOT_WORKERS,
) -> None:
    """Recreate the tree of `manifest` under `dest` from the run's blobs, verifying every sha256.

    Raises `NotFoundError` for a missing blob and `A2rlError` for a corrupt one or an entry path
    that would leave `dest`. File modes are restored (permission bits only).
    """

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for entry in manifest.entries:
        try:
            check_key(entry.path)
        except ValueError as exc:
            raise A2rlError(f"tree manifest has an unsafe path: {exc}") from exc

    def fetch(entry: TreeEntry) -> None:
        target = dest.joinpath(*entry.path.split("/"))
        tmp = target.with_name(f".{target.name}.restore-tmp")
        try:
            store.get_file(layout.blob(entry.sha256), tmp)
            digest, size = hash_file(tmp)
            if digest != entry.sha256 or size != entry.size:
                raise A2rlError(f"blob {entry.sha256} for {entry.path} is corrupt (got sha256 {digest})")
            os.chmod(tmp, entry.mode & 0o777)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for _ in pool.map(fetch, manifest.entries):
            pass
