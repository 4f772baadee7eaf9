"""No-follow access to a directory tree the agent can write (its `code/` and `output/<model>/`).

Everything is opened relative to an already-opened directory: the root with
`O_DIRECTORY | O_NOFOLLOW`, every subdirectory and file with `openat(…, O_NOFOLLOW | O_NONBLOCK)`
on its parent's descriptor. An opened descriptor is `fstat`ed and must be the same
(device, inode) the walk saw, and of the kind it saw (a regular file or a directory), so what is
read is what was checked, even when the agent swaps entries while a snapshot runs. Refused, with
the relative path and the reason: symlinks anywhere (the root included), FIFOs, sockets, devices,
and — unless the caller allows them — regular files with more than one hard link (the other link
may be outside the workspace, where the agent could not read it). A FIFO never blocks: nothing
is opened before its `lstat` says "regular file" or "directory", and opens are non-blocking.

Sparse files are refused too (kind `sparse`) when their holes add up to more than
`MAX_HOLE_BYTES`: a blob is stored dense, so `truncate -s 1G code/weights.bin` (4 KB on disk)
would otherwise cost the store 1 GiB. Holes are counted with `SEEK_DATA`/`SEEK_HOLE` on a
descriptor (a compressed file system's small `st_blocks` alone refuses nothing), once when the
scan sees a file whose allocated blocks fall short of its length, and again on the descriptor a
snapshot reads (`open_file`, and after the read: `check_not_sparse`), so a hole punched after the
scan is caught too.

`OpenTree.open(path)` opens a root, `OpenTree.open_under(base, rel)` a path below a trusted
directory (one component at a time); `scan()` walks it (stat only, no file is opened);
`open_file(entry)` opens one listed file for reading and `read_chunks` reads it from that
descriptor. `a2rl.store.cas.snapshot_tree` hashes and uploads from the same descriptor.

Not covered here: the directories above the root are trusted (the workspace's own location), and
a directory the agent moves into the tree from elsewhere on the same filesystem (`rename`) is
read like any other — it can only move what it can already write.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType

from a2rl.errors import A2rlError

OPEN_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
OPEN_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: Directories nested deeper than this are refused (the walk keeps one descriptor per level).
MAX_DEPTH = 128
READ_CHUNK = 1 << 20

# Refusal kinds (what the recorder maps to an HTTP status).
LINK = "link"  # a symlink
SPECIAL = "special"  # FIFO, socket, device, anything not a regular file or directory
HARD_LINK = "hard-link"  # a regular file with st_nlink > 1
CHANGED = "changed"  # swapped, retyped or rewritten while it was being read
MISSING = "missing"  # absent (only for the root or a component on the way to it)
NOT_DIR = "not-a-directory"
TOO_DEEP = "too-deep"
UNREADABLE = "unreadable"  # any other OSError (EACCES, ENAMETOOLONG, EIO, …)
SPARSE = "sparse"  # a regular file whose holes exceed MAX_HOLE_BYTES

#: A regular file whose holes (ranges never written, stored as nothing on disk) add up to more
#: than this is refused: its blob would be stored dense, at its full length.
MAX_HOLE_BYTES = 1 << 20


@dataclass(frozen=True)
class Refusal:
    """One entry left out of (or refusing) a snapshot: the path shown to the agent and why."""

    path: str
    reason: str
    kind: str

    @property
    def message(self) -> str:
        return f"{self.path} {self.reason}"


class TreeRefusedError(A2rlError):
    """A refused entry in a tree that must be taken whole (a submission)."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal
        super().__init__(refusal.message)


def kind_of(mode: int) -> str:
    """A human name for a file type: "a symlink", "a FIFO", …"""
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a special file"


ONLY_REGULAR = "only regular files and directories can be recorded"


def refusal_for(path: str, st: os.stat_result, *, allow_hard_links: bool) -> Refusal | None:
    """Why an entry with `lstat` result `st` cannot be recorded (None when it can)."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return None
    if stat.S_ISREG(mode):
        if not allow_hard_links and st.st_nlink > 1:
            return Refusal(
                path,
                f"has {st.st_nlink} hard links (another name for it may be outside the workspace); "
                "submit a copy (cp) instead of a link",
                HARD_LINK,
            )
        return None
    kind = LINK if stat.S_ISLNK(mode) else SPECIAL
    return Refusal(path, f"is {kind_of(mode)}; {ONLY_REGULAR}", kind)


def hole_bytes(fd: int, size: int) -> int:
    """Bytes of `fd`'s first `size` that are holes (`SEEK_DATA`/`SEEK_HOLE`; 0 where the file
    system does not report holes). Moves the descriptor's offset (reads here use `pread`)."""
    holes = 0
    pos = 0
    while pos < size:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after pos: the rest is a hole
                return holes + size - pos
            return holes  # SEEK_DATA unsupported (EINVAL): no holes known
        data = min(data, size)
        holes += data - pos
        if data >= size:
            break
        try:
            pos = os.lseek(fd, data, os.SEEK_HOLE)
        except OSError:
            return holes
    return holes


def may_be_sparse(st: os.stat_result) -> bool:
    """Whether `st`'s allocated blocks fall short of its length by more than `MAX_HOLE_BYTES`
    (a cheap filter: holes, or compression; `hole_bytes` tells which)."""
    return stat.S_ISREG(st.st_mode) and st.st_size - st.st_blocks * 512 > MAX_HOLE_BYTES


def sparse_refusal(path: str, fd: int, st: os.stat_result) -> Refusal | None:
    """A `SPARSE` refusal when the file open on `fd` (`fstat` result `st`) has more than
    `MAX_HOLE_BYTES` of holes; None otherwise."""
    if not may_be_sparse(st):
        return None
    holes = hole_bytes(fd, st.st_size)
    if holes <= MAX_HOLE_BYTES:
        return None
    return Refusal(
        path,
        f"is a sparse file ({st.st_size} bytes long, {holes} of them holes never written; "
        f"at most {MAX_HOLE_BYTES} bytes of holes are recorded): write its bytes out "
        "(cp --sparse=never) or leave it out",
        SPARSE,
    )


def _os_refusal(path: str, exc: OSError) -> Refusal:
    if exc.errno == errno.ENOENT:
        return Refusal(path, "does not exist", MISSING)
    if exc.errno == errno.ENOTDIR:
        return Refusal(path, "is not a directory", NOT_DIR)
    if exc.errno == errno.ELOOP:
        return Refusal(path, f"is a symlink; {ONLY_REGULAR}", LINK)
    return Refusal(path, f"cannot be read ({exc.strerror or exc})", UNREADABLE)


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


@dataclass(frozen=True)
class TreeFile:
    """A regular file found by `OpenTree.scan` (path relative to the tree's root)."""

    rel: str
    dev: int
    ino: int
    size: int
    mode: int
    mtime_ns: int
    ctime_ns: int


@dataclass
class OpenTree:
    """A directory opened without following links, and (after `scan`) what it holds."""

    fd: int
    #: How paths are shown to the agent: `label/rel` (e.g. "output/v1/config.json").
    label: str
    #: The root's path as the recorder sees it (for caches and logs; never reopened).
    path: Path
    allow_hard_links: bool = True
    files: list[TreeFile] = field(default_factory=list)
    #: (device, inode) of every directory the scan entered, by relative path ("" = the root).
    dirs: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Links, special files, hard links, changed entries: left out (or, with `strict`, raised).
    refused: list[Refusal] = field(default_factory=list)
    #: Entries the caller's `exclude` left out (caches, over-size files), with its reason.
    excluded: list[Refusal] = field(default_factory=list)
    strict: bool = False

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, label: str | None = None) -> OpenTree:
        """Open the directory `path`; its last component must not be a symlink.

        The components above it are trusted (the workspace's own location). Raises
        `TreeRefusedError` for a symlink, a missing path, a non-directory or another OSError.
        """
        shown = label if label is not None else Path(path).name
        try:
            fd = os.open(path, OPEN_DIR_FLAGS)
        except OSError as exc:
            raise TreeRefusedError(_classify_open_error(None, str(path), shown, exc)) from exc
        return cls._checked(fd, shown, Path(path))

    @classmethod
    def open_under(cls, base: Path, rel: str) -> OpenTree:
        """Open `base/rel` one component at a time, refusing a symlink at any of them.

        `base` (the workspace) is trusted; `rel` is what the agent controls. Paths in errors are
        the components of `rel` walked so far (e.g. "output/v1").
        """
        parts = [p for p in PurePosixPath(rel).parts if p not in ("", ".")]
        try:
            fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise TreeRefusedError(_os_refusal(str(base), exc)) from exc
        shown = ""
        for part in parts:
            shown = _join(shown, part)
            try:
                sub = os.open(part, OPEN_DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                refusal = _classify_open_error(fd, part, shown, exc)
                os.close(fd)
                raise TreeRefusedError(refusal) from exc
            os.close(fd)
            fd = sub
        return cls._checked(fd, shown or ".", Path(base).joinpath(*parts))

    @classmethod
    def _checked(cls, fd: int, shown: str, path: Path) -> OpenTree:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):  # pragma: no cover - O_DIRECTORY guarantees it
            os.close(fd)
            raise TreeRefusedError(Refusal(shown, "is not a directory", NOT_DIR))
        tree = cls(fd=fd, label=shown, path=path)
        tree.dirs[""] = (st.st_dev, st.st_ino)
        return tree

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OpenTree:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def shown(self, rel: str) -> str:
        return _join(self.label, rel) if self.label not in ("", ".") else rel

    # --- walking ------------------------------------------------------------------------------

    def scan(
        self,
        *,
        strict: bool = False,
        allow_hard_links: bool = True,
        include: Callable[[str], bool] | None = None,
        exclude: Callable[[str, os.stat_result], str | None] | None = None,
        max_total_bytes: int | None = None,
        on_too_large: Callable[[int], BaseException] | None = None,
    ) -> OpenTree:
        """Walk the tree (`lstat` only) and fill `files`, `dirs`, `refused`, `excluded`.

        `strict`: the first refused entry raises `TreeRefusedError` (a submission is all or
        nothing); otherwise refused entries are listed and left out. `include(rel)` silently
        leaves files out; `exclude(rel, st)` returns a reason to leave a file or directory out
        (listed in `excluded`; an excluded directory is not entered). Sizes are apparent sizes
        (`st_size`: a sparse file counts at its full length); past `max_total_bytes` the scan
        raises `on_too_large(total)`.
        """
        self.strict = strict
        self.allow_hard_links = allow_hard_links
        self.files, self.refused, self.excluded = [], [], []
        self.dirs = {"": self.dirs[""]}
        total = 0

        def refuse(refusal: Refusal) -> None:
            if strict:
                raise TreeRefusedError(refusal)
            self.refused.append(refusal)

        def walk(fd: int, rel_dir: str, depth: int) -> None:
            nonlocal total
            try:
                with os.scandir(fd) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                refuse(_os_refusal(self.shown(rel_dir) or ".", exc))
                return
            for entry in entries:
                rel = _join(rel_dir, entry.name)
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # vanished meanwhile
                except OSError as exc:
                    refuse(_os_refusal(self.shown(rel), exc))
                    continue
                refusal = refusal_for(self.shown(rel), st, allow_hard_links=allow_hard_links)
                if refusal is None and may_be_sparse(st):
                    refusal = self._sparse_at_scan(fd, entry.name, rel, st)
                if refusal is not None:
                    refuse(refusal)
                    continue
                is_dir = stat.S_ISDIR(st.st_mode)
                if not is_dir and include is not None and not include(rel):
                    continue
                reason = exclude(rel, st) if exclude is not None else None
                if reason is not None:
                    self.excluded.append(
                        Refusal(self.shown(rel) + ("/" if is_dir else ""), reason, "excluded")
                    )
                    continue
                if not is_dir:
                    total += st.st_size
                    if max_total_bytes is not None and total > max_total_bytes:
                        raise (
                            on_too_large(total) if on_too_large else A2rlError(f"{self.label} is too large")
                        )
                    self.files.append(
                        TreeFile(
                            rel,
                            st.st_dev,
                            st.st_ino,
                            st.st_size,
                            stat.S_IMODE(st.st_mode),
                            st.st_mtime_ns,
                            st.st_ctime_ns,
                        )
                    )
                    continue
                if depth >= MAX_DEPTH:
                    refuse(
                        Refusal(
                            self.shown(rel), f"is nested more than {MAX_DEPTH} directories deep", TOO_DEEP
                        )
                    )
                    continue
                try:
                    sub = self._open_dir(fd, entry.name, rel, (st.st_dev, st.st_ino))
                except FileNotFoundError:
                    continue
                except TreeRefusedError as exc:
                    refuse(exc.refusal)
                    continue
                try:
                    self.dirs[rel] = (st.st_dev, st.st_ino)
                    walk(sub, rel, depth + 1)
                finally:
                    os.close(sub)

        walk(self.fd, "", 0)
        self.files.sort(key=lambda f: f.rel)
        return self

    def _open_dir(self, parent_fd: int, name: str, rel: str, expect: tuple[int, int]) -> int:
        """Open the subdirectory `name` of `parent_fd`; it must still be the (dev, ino) `expect`."""
        try:
            fd = os.open(name, OPEN_DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise TreeRefusedError(
                    Refusal(
                        self.shown(rel),
                        "was replaced while it was being read (it is no longer "
                        "the directory it was); " + ONLY_REGULAR,
                        CHANGED,
                    )
                ) from exc
            raise TreeRefusedError(_os_refusal(self.shown(rel), exc)) from exc
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != expect or not stat.S_ISDIR(st.st_mode):
            os.close(fd)
            raise TreeRefusedError(Refusal(self.shown(rel), "was replaced while it was being read", CHANGED))
        return fd

    def _sparse_at_scan(self, dir_fd: int, name: str, rel: str, st: os.stat_result) -> Refusal | None:
        """The `SPARSE` refusal of a file the scan found (opened no-follow, checked to be the inode
        `lstat` saw); None when it is not sparse or is gone (the read will tell)."""
        try:
            fd = os.open(name, OPEN_FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None  # vanished or swapped: `open_file` refuses or skips it
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
                return None
            return sparse_refusal(self.shown(rel), fd, now)
        finally:
            os.close(fd)

    def check_not_sparse(self, fd: int, entry: TreeFile) -> None:
        """Raise `TreeRefusedError` (kind `SPARSE`) when the file open on `fd` has too many holes."""
        refusal = sparse_refusal(self.shown(entry.rel), fd, os.fstat(fd))
        if refusal is not None:
            raise TreeRefusedError(refusal)

    def iter_paths(self) -> Iterator[str]:
        return (f.rel for f in self.files)

    # --- reading ------------------------------------------------------------------------------

    def open_file(self, entry: TreeFile) -> int:
        """A read-only descriptor of `entry`, reached through the directories the scan entered.

        Every directory on the way and the file itself must be the (device, inode) the scan saw;
        otherwise `TreeRefusedError` (kind `CHANGED`); a sparse file is refused (kind `SPARSE`).
        `FileNotFoundError` when it vanished.
        """
        parts = entry.rel.split("/")
        fd = self.fd
        rel = ""
        try:
            for part in parts[:-1]:
                rel = _join(rel, part)
                sub = self._open_dir(fd, part, rel, self.dirs[rel])
                if fd != self.fd:
                    os.close(fd)
                fd = sub
            try:
                file_fd = os.open(parts[-1], OPEN_FILE_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise TreeRefusedError(
                        Refusal(self.shown(entry.rel), f"was replaced by a symlink; {ONLY_REGULAR}", LINK)
                    ) from exc
                raise TreeRefusedError(_os_refusal(self.shown(entry.rel), exc)) from exc
        finally:
            if fd != self.fd:
                os.close(fd)
        try:
            st = os.fstat(file_fd)
            refusal = refusal_for(self.shown(entry.rel), st, allow_hard_links=self.allow_hard_links)
            if refusal is None and (st.st_dev, st.st_ino) != (entry.dev, entry.ino):
                refusal = Refusal(self.shown(entry.rel), "was replaced while it was being read", CHANGED)
            if refusal is None:
                refusal = sparse_refusal(self.shown(entry.rel), file_fd, st)
            if refusal is not None:
                raise TreeRefusedError(refusal)
        except BaseException:
            os.close(file_fd)
            raise
        return file_fd


def _classify_open_error(dir_fd: int | None, name: str, shown: str, exc: OSError) -> Refusal:
    """Why opening the directory `name` failed: look at it without following it."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return _os_refusal(shown, exc)
    if stat.S_ISLNK(st.st_mode):
        return Refusal(shown, f"is a symlink; {ONLY_REGULAR}", LINK)
    if not stat.S_ISDIR(st.st_mode):
        if stat.S_ISREG(st.st_mode):
            return Refusal(shown, "is not a directory", NOT_DIR)
        return Refusal(shown, f"is {kind_of(st.st_mode)}; {ONLY_REGULAR}", SPECIAL)
    return _os_refusal(shown, exc)


def read_chunks(
    fd: int,
    *,
    limit: int | None = None,
    check: Callable[[], None] | None = None,
    chunk: int = READ_CHUNK,
) -> Iterator[bytes]:
    """The bytes of `fd` from offset 0 (`pread`: the descriptor's offset is not used).

    Stops after `limit + 1` bytes (the caller sees more than `limit` and refuses). `check` runs
    after every read (the read deadline), so a read that finishes late raises there.
    """
    offset = 0
    while True:
        want = chunk if limit is None else min(chunk, limit + 1 - offset)
        if want <= 0:
            return
        data = os.pread(fd, want, offset)
        if check is not None:
            check()
        if not data:
            return
        offset += len(data)
        yield data


class FdReader:
    """A read-only, seekable file object over a descriptor (no `close` of the descriptor)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = max(0, self.size - self._pos)
        data = os.pread(self.fd, n, self._pos) if n else b""
        self._pos += len(data)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = base + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True
