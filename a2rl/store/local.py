"""`LocalStore`: the object store as a plain directory (the default in local mode).

Every write goes to a temporary file in the destination directory and is moved into place with
`os.replace`, so a reader sees either the old object or the complete new one, never a partial
one. Temporary files carry the `TMP_SUFFIX` suffix, are never listed, and no key may end with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from a2rl.errors import A2rlError, NotFoundError
from a2rl.store.base import ContentChangedError, ObjectStore, Reader, copy_verified

__all__ = ["ContentChangedError", "LocalStore", "check_key", "check_prefix"]

TMP_SUFFIX = ".a2rl-tmp"
#: Temporary files are named `.<name>.<pid>-<n><TMP_SUFFIX>` and created exclusively (no symlink
#: followed): cheaper than `tempfile.mkstemp`'s random names, which cost the gateway's writer
#: thread a tenth of its time at a few thousand records a second.
_TMP_SEQ = itertools.count()
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
COPY_CHUNK = 1 << 20


def check_key(key: str) -> str:
    """Return `key` if it is a valid relative `/`-separated key, else raise `ValueError`.

    Rejected: empty keys, absolute keys, empty segments (`a//b`, trailing `/`), `.` and `..`
    segments, backslashes and NUL bytes, and the temporary-file suffix.
    """
    if not isinstance(key, str) or not key:
        raise ValueError("store key must be a non-empty string")
    if "\\" in key or "\x00" in key:
        raise ValueError(f"store key {key!r} contains a backslash or NUL byte")
    if key.startswith("/"):
        raise ValueError(f"store key {key!r} must be relative")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"store key {key!r} has an empty, '.' or '..' segment")
    if key.endswith(TMP_SUFFIX):
        raise ValueError(f"store key {key!r} ends with the reserved suffix {TMP_SUFFIX}")
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: `""` (everything) or a key naming a folder (a trailing `/` is allowed)."""
    stripped = prefix.rstrip("/")
    return check_key(stripped) if stripped else ""


class LocalStore(ObjectStore):
    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().absolute()
        if self.root.exists() and not self.root.is_dir():
            raise A2rlError(f"store path is not a directory: {self.root}")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise A2rlError(f"cannot create store directory {self.root}: {exc.strerror or exc}") from exc
        if not self.root.is_dir():
            raise A2rlError(f"store path is not a directory: {self.root}")
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise A2rlError(f"store directory is not writable: {self.root}")
        self.uri = self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def free_bytes(self) -> int | None:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _tmp_for(self, dest: Path) -> tuple[int, str]:
        """A new temporary file beside `dest` (its folders made when missing), opened to write."""
        while True:
            tmp = f"{dest.parent}/.{dest.name}.{os.getpid()}-{next(_TMP_SEQ)}{TMP_SUFFIX}"
            try:
                return os.open(tmp, _TMP_FLAGS, 0o600), tmp
            except FileExistsError:
                continue  # left by an earlier process with this pid
            except FileNotFoundError:
                dest.parent.mkdir(parents=True, exist_ok=True)
                return os.open(tmp, _TMP_FLAGS, 0o600), tmp

    def put_bytes(self, key: str, data: bytes) -> None:
        dest = self._path(key)
        fd, tmp = self._tmp_for(dest)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, dest)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def put_file(self, key: str, path: Path) -> None:
        self.put_file_verified(key, path, None)

    def put_file_verified(self, key: str, path: Path, sha256: str | None) -> None:
        """`put_file`, refusing (with `ContentChangedError`) when the copied bytes do not hash to `sha256`.

        The check happens before the object becomes visible, so a blob key never holds content
        other than its digest even when the source file is being rewritten during the copy.
        """
        dest = self._path(key)
        fd, tmp = self._tmp_for(dest)
        digest = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out, Path(path).open("rb") as src:
                while chunk := src.read(COPY_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise ContentChangedError(f"{path} changed while it was being stored")
            os.replace(tmp, dest)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def put_fileobj_verified(
        self, key: str, f: Reader, sha256: str | None, *, size: int, name: str = ""
    ) -> None:
        dest = self._path(key)
        fd, tmp = self._tmp_for(dest)
        try:
            with os.fdopen(fd, "wb") as out:
                copy_verified(f, out, sha256, size=size, name=name or key)
            os.replace(tmp, dest)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise NotFoundError(f"object not found: {self.url_for(key)}") from exc

    def get_file(self, key: str, dest: Path) -> None:
        src = self._path(key)
        dest = Path(dest)
        fd, tmp = self._tmp_for(dest)
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    with src.open("rb") as f:
                        shutil.copyfileobj(f, out, COPY_CHUNK)
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
                    raise NotFoundError(f"object not found: {self.url_for(key)}") from exc
            os.replace(tmp, dest)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> Iterator[str]:
        """Keys under the folder `prefix` (`""` = all), sorted; `list("a/b")` never yields `a/bc`."""
        prefix = check_prefix(prefix)
        base = self.root.joinpath(*prefix.split("/")) if prefix else self.root
        if not base.is_dir():
            return iter(())
        keys: list[str] = []
        for dirpath, _dirnames, filenames in os.walk(base):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.endswith(TMP_SUFFIX):
                    continue
                keys.append(name if rel_dir == "." else f"{rel_dir}/{name}")
        keys.sort()
        return iter(keys)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        self._prune_empty(path.parent)

    def delete_prefix(self, prefix: str) -> int:
        """Remove the folder `prefix` (its temporary files too); links in it are removed, never
        followed."""
        folder = check_prefix(prefix)
        if not folder:
            raise ValueError("delete_prefix needs a non-empty prefix (it never empties the whole store)")
        base = self.root.joinpath(*folder.split("/"))
        if base.is_symlink() or not base.is_dir():
            return 0
        count = sum(1 for _ in self.list(folder))
        shutil.rmtree(base)
        self._prune_empty(base.parent)
        return count

    def sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        for key in self.list(prefix):
            try:
                yield key, self._path(key).lstat().st_size
            except FileNotFoundError:
                continue

    def modified_at(self, key: str) -> datetime | None:
        try:
            return datetime.fromtimestamp(self._path(key).stat().st_mtime, UTC)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _prune_empty(self, parent: Path) -> None:
        # Prune folders left empty so listings and disk stay tidy (never the root itself).
        while parent != self.root and self.root in parent.parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
