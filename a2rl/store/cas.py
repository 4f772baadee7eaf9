"""Content-addressed snapshots of directory trees.

A tree is described by a `TreeManifest`: every regular file's relative path, sha256, size and
mode, plus a digest of that list. File contents are stored once as blobs keyed by sha256, so an
unchanged file is never uploaded twice and two identical trees have the same digest (that is
how a submission identical to the base model is detected).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from a2rl.errors import A2rlError
from a2rl.store.base import ObjectStore
from a2rl.store.local import ContentChangedError, check_key


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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def iter_files(root: Path, include: Callable[[str], bool] | None = None) -> list[tuple[str, Path]]:
    """Regular files under `root` as sorted (relative posix path, path) pairs.

    Symlinks are never followed (a link out of the workspace must not leak into a snapshot);
    they are skipped, like sockets and other special files.
    """
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for fname in filenames:
            path = Path(dirpath) / fname
            rel = path.relative_to(root).as_posix()
            if include is not None and not include(rel):
                continue
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                found.append((rel, path))
    found.sort()
    return found


def hash_tree(root: Path, include: Callable[[str], bool] | None = None) -> TreeManifest:
    entries = []
    for rel, path in iter_files(root, include):
        st = path.lstat()
        entries.append(TreeEntry(rel, sha256_file(path), st.st_size, stat.S_IMODE(st.st_mode)))
    return TreeManifest(tuple(entries))


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
    """(sha256 hex, bytes read), streaming in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


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

    def get(self, path: Path, st: os.stat_result) -> str | None:
        with self._lock:
            found = self._entries.get(str(path))
        return found[1] if found is not None and found[0] == self._stamp(st) else None

    def put(self, path: Path, st: os.stat_result, digest: str, read_started_ns: int) -> None:
        if max(st.st_ctime_ns, st.st_mtime_ns) > read_started_ns - STABLE_AFTER_NS:
            return
        with self._lock:
            self._entries[str(path)] = (self._stamp(st), digest)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def _put_verified(store: ObjectStore, key: str, path: Path, sha256: str) -> None:
    put = getattr(store, "put_file_verified", None)
    if put is not None:
        put(key, path, sha256)
    else:  # an ObjectStore without verification: upload, then check nothing changed meanwhile
        store.put_file(key, path)
        if hash_file(path)[0] != sha256:
            store.delete(key)

            raise ContentChangedError(f"{path} changed while it was being stored")


class _BlobUploader:
    """Uploads blobs at most once per process and store, counting what was actually sent."""

    def __init__(
        self,
        store: ObjectStore,
        layout: BlobLayout,
        known: set[str] | None,
        copy_from: Sequence[BlobLayout] = (),
    ) -> None:
        self.store = store
        self.layout = layout
        self.known = known
        self.copy_from = tuple(copy_from)
        self.lock = threading.Lock()
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

    def ensure(self, path: Path, digest: str, size: int) -> tuple[str, int]:
        """Make sure the blob for `path` is stored; returns the (digest, size) actually stored.

        When the file changes between hashing and uploading, it is re-hashed and stored under its
        new digest (the snapshot then records the newer content).
        """

        for _ in range(CHANGE_RETRIES):
            if self.is_known(digest):
                return digest, size
            key = self.layout.blob(digest)
            if self.store.exists(key) or self._copy_in_store(digest, key, size):
                self.remember(digest)
                return digest, size
            try:
                _put_verified(self.store, key, path, digest)
            except ContentChangedError:
                digest, size = hash_file(path)
                continue
            self.remember(digest)
            with self.lock:
                self.files_uploaded += 1
                self.bytes_uploaded += size
            return digest, size
        raise A2rlError(f"{path} kept changing while it was being snapshotted; try again")


def snapshot_tree(
    store: ObjectStore,
    layout: BlobLayout,
    root: Path,
    *,
    include: Callable[[str], bool] | None = None,
    known: set[str] | None = None,
    workers: int = SNAPSHOT_WORKERS,
    digests: DigestCache | None = None,
    copy_from: Sequence[BlobLayout] = (),
) -> tuple[TreeManifest, SnapshotStats]:
    """Hash every regular file under `root` and upload the blobs the store does not have yet.

    Idempotent and safe to retry: blobs are content-addressed and written atomically, and a blob
    key never holds anything but the content of its digest. `known` (optional) is a caller-held
    set of digests already stored, extended with every blob this call stores or finds. `digests`
    (optional) skips re-hashing files unchanged since an earlier snapshot. A blob that one of the
    `copy_from` layouts already holds (e.g. the model library) is copied inside the store instead
    of uploaded. Files that vanish while the snapshot runs are left out and listed in
    `stats.skipped`.
    """
    t0 = time.monotonic()
    stats = SnapshotStats()
    files = iter_files(root, include)
    uploader = _BlobUploader(store, layout, known, copy_from)

    def hash_one(item: tuple[str, Path]) -> TreeEntry | None:
        rel, path = item
        try:
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            cached = digests.get(path, st) if digests is not None else None
            if cached is not None:
                return TreeEntry(rel, cached, st.st_size, mode)
            started = time.time_ns()
            digest, size = hash_file(path)
        except FileNotFoundError:
            return None
        if digests is not None and size == st.st_size:
            digests.put(path, st, digest, started)
        return TreeEntry(rel, digest, size, mode)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        hashed = list(pool.map(hash_one, files))
        entries: dict[str, TreeEntry] = {}
        for (rel, _path), entry in zip(files, hashed, strict=True):
            if entry is None:
                stats.skipped.append(rel)
            else:
                entries[rel] = entry
        # One upload per distinct digest: identical files share a blob.
        first_path: dict[str, str] = {}
        for rel, entry in entries.items():
            first_path.setdefault(entry.sha256, rel)
        paths = dict(files)

        def store_one(rel: str) -> tuple[str, TreeEntry | None]:
            entry = entries[rel]
            try:
                digest, size = uploader.ensure(paths[rel], entry.sha256, entry.size)
            except FileNotFoundError:
                return rel, None
            return rel, TreeEntry(rel, digest, size, entry.mode)

        for rel, stored in pool.map(store_one, sorted(first_path.values())):
            if stored is None:
                stats.skipped.append(rel)
                del entries[rel]
            else:
                entries[rel] = stored

    manifest = TreeManifest(tuple(entries[rel] for rel in sorted(entries)))
    stats.files = len(manifest.entries)
    stats.bytes_total = manifest.total_bytes
    stats.files_uploaded = uploader.files_uploaded
    stats.bytes_uploaded = uploader.bytes_uploaded
    stats.files_copied = uploader.files_copied
    stats.bytes_copied = uploader.bytes_copied
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
