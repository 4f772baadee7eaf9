"""The object-store interface. Keys are `/`-separated strings relative to the store's root."""

from __future__ import annotations

import hashlib
import json
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from a2rl.errors import A2rlError


class Reader(Protocol):
    """A readable, seekable binary file (an open file, or `a2rl.store.safe_tree.FdReader`)."""

    def read(self, n: int = -1, /) -> bytes: ...

    def seek(self, pos: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


class ContentChangedError(A2rlError):
    """A file's content no longer matches the digest it was uploaded under (it changed meanwhile)."""


class ObjectStore(ABC):
    """A flat key → bytes store. Implementations: `LocalStore` (directory) and `S3Store` (MinIO/S3)."""

    #: The URI this store was opened from (`file:///…` or `s3://bucket/prefix`).
    uri: str

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` at `key` atomically (readers never see a partial object)."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Upload the file at `path` to `key` atomically."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Read `key`; raises `a2rl.errors.NotFoundError` when absent."""

    @abstractmethod
    def get_file(self, key: str, dest: Path) -> None:
        """Download `key` into `dest` (parents created); raises `NotFoundError` when absent."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Every key under `prefix` (recursively), in lexicographic order."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove `key`; no error when absent."""

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key under the folder `prefix` (never `""`: the whole store); returns how
        many objects were removed. This default deletes key by key; `LocalStore` removes the
        folder, `S3Store` sends batched DeleteObjects requests."""
        if not prefix.strip("/"):
            raise ValueError("delete_prefix needs a non-empty prefix (it never empties the whole store)")
        count = 0
        for key in list(self.list(prefix)):
            self.delete(key)
            count += 1
        return count

    def sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size in bytes) of every key under `prefix`, in `list` order. This default reads
        each object; `LocalStore` and `S3Store` take the sizes from the listing."""
        for key in self.list(prefix):
            yield key, len(self.get_bytes(key))

    def modified_at(self, key: str) -> datetime | None:
        """When `key` was last written (aware, UTC), when the store can tell; None when absent
        or unknown."""
        return None

    def put_fileobj_verified(
        self, key: str, f: Reader, sha256: str | None, *, size: int, name: str = ""
    ) -> None:
        """Store the first `size` bytes of the open file `f` (read from its current position) at `key`.

        With `sha256`, refuse with `ContentChangedError` (nothing stored) when those bytes do not
        hash to it, or when `f` ends before `size` bytes; `name` is the path shown in that error.
        This is how snapshots upload from a descriptor opened without following links (never
        by reopening a path). This default copies through a local temporary file; `LocalStore`,
        `S3Store` and `SpoolingStore` stream instead.
        """
        with tempfile.TemporaryDirectory(prefix="a2rl-put-") as tmp:
            path = Path(tmp) / "object"
            with path.open("wb") as out:
                copy_verified(f, out, sha256, size=size, name=name)
            self.put_file(key, path)

    def copy(self, src: str, dst: str) -> None:
        """Copy the object at `src` to `dst` atomically; `NotFoundError` when `src` is absent.

        This default goes through a local temporary file; stores that can copy on the server
        side (S3) override it, so no byte leaves the store.
        """
        with tempfile.TemporaryDirectory(prefix="a2rl-copy-") as tmp:
            path = Path(tmp) / "object"
            self.get_file(src, path)
            self.put_file(dst, path)

    def free_bytes(self) -> int | None:
        """Bytes this store can still take, when it can tell (a local directory: its file
        system's space available to us); None when unknown (S3: the cap is the configured one)."""
        return None

    def url_for(self, key: str) -> str:
        """A URI naming `key` (for status fields and reports, not a presigned link)."""
        return f"{self.uri.rstrip('/')}/{key}"

    # JSON helpers shared by every implementation.
    def put_json(self, key: str, value: Any) -> None:
        self.put_bytes(key, json.dumps(value, indent=2, sort_keys=True, default=str).encode() + b"\n")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))


COPY_CHUNK = 1 << 20


def copy_verified(src: Reader, out: Writer, sha256: str | None, *, size: int, name: str) -> str:
    """Copy exactly `size` bytes of `src` to `out`; their sha256 must be `sha256` (when given).

    Raises `ContentChangedError` when `src` ends early or the digest differs. Returns the digest.
    """
    digest = hashlib.sha256()
    left = size
    while left > 0:
        chunk = src.read(min(COPY_CHUNK, left))
        if not chunk:
            raise ContentChangedError(f"{name} became shorter while it was being stored")
        digest.update(chunk)
        out.write(chunk)
        left -= len(chunk)
    if sha256 is not None and digest.hexdigest() != sha256:
        raise ContentChangedError(f"{name} changed while it was being stored")
    return digest.hexdigest()
