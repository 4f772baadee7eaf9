"""The object-store interface. Keys are `/`-separated strings relative to the store's root."""

from __future__ import annotations

import json
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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

    def copy(self, src: str, dst: str) -> None:
        """Copy the object at `src` to `dst` atomically; `NotFoundError` when `src` is absent.

        This default goes through a local temporary file; stores that can copy on the server
        side (S3) override it, so no byte leaves the store.
        """
        with tempfile.TemporaryDirectory(prefix="a2rl-copy-") as tmp:
            path = Path(tmp) / "object"
            self.get_file(src, path)
            self.put_file(dst, path)

    def url_for(self, key: str) -> str:
        """A URI naming `key` (for status fields and reports, not a presigned link)."""
        return f"{self.uri.rstrip('/')}/{key}"

    # JSON helpers shared by every implementation.
    def put_json(self, key: str, value: Any) -> None:
        self.put_bytes(key, json.dumps(value, indent=2, sort_keys=True, default=str).encode() + b"\n")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))
