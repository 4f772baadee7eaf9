"""`S3Store`: the object store in an S3-compatible bucket (MinIO in a cluster and in tests).

Objects live under `<bucket>/<prefix>/<key>`. S3 writes are atomic per object, so no temporary
keys are needed. Files are streamed (the `minio` client switches to multipart uploads for large
files), never read whole into memory.
"""

from __future__ import annotations

import hashlib
import io
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import S3Error

from a2rl.errors import A2rlError, NotFoundError
from a2rl.store.base import ObjectStore, Reader
from a2rl.store.local import ContentChangedError, check_key, check_prefix

#: S3's limit for one CopyObject request.
MAX_SINGLE_COPY_BYTES = 5 * (1 << 30)

#: S3's limit of keys in one DeleteObjects request.
DELETE_BATCH = 1000

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0
_MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "NoSuchObject"})


class S3Store(ObjectStore):
    def __init__(
        self,
        endpoint: str,
        access_key: str,
        secret_key: str,
        bucket: str,
        prefix: str = "",
        *,
        secure: bool = False,
        region: str | None = None,
        create_bucket: bool = True,
    ) -> None:
        self.bucket = bucket
        self.prefix = check_prefix(prefix)
        self.client = Minio(
            endpoint,
            access_key=access_key,
            secret_key=secret_key,
            secure=secure,
            region=region,
            http_client=_http_client(endpoint, secure),
        )
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        if create_bucket:
            self._ensure_bucket(endpoint)

    def _ensure_bucket(self, endpoint: str) -> None:
        try:
            if not self.client.bucket_exists(self.bucket):
                try:
                    self.client.make_bucket(self.bucket)
                except S3Error as exc:
                    if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        raise
        except S3Error as exc:
            detail = f"{exc.code}: {exc.message}"
            raise A2rlError(f"cannot use bucket {self.bucket!r} at {endpoint}: {detail}") from exc
        except Exception as exc:  # urllib3 connection errors have many types
            detail = f"{type(exc).__name__}: {exc}"
            raise A2rlError(f"object store at {endpoint} is unreachable: {detail}") from exc

    def _name(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(self.bucket, self._name(key), io.BytesIO(data), len(data))

    def put_file(self, key: str, path: Path) -> None:
        self.put_file_verified(key, path, None)

    def put_file_verified(self, key: str, path: Path, sha256: str | None) -> None:
        """Stream `path` to `key`; with `sha256`, abort (nothing written) when the bytes differ."""
        name = self._name(key)
        size = Path(path).stat().st_size
        with Path(path).open("rb") as f:
            reader = _HashingReader(f, size, sha256, path)
            self.client.put_object(self.bucket, name, reader, size)  # type: ignore[arg-type]

    def put_fileobj_verified(
        self, key: str, f: Reader, sha256: str | None, *, size: int, name: str = ""
    ) -> None:
        """Stream `size` bytes of `f` to `key`; abort (nothing written) when they differ from `sha256`."""
        reader = _HashingReader(f, size, sha256, name or key)
        self.client.put_object(self.bucket, self._name(key), reader, size)  # type: ignore[arg-type]

    def get_bytes(self, key: str) -> bytes:
        name = self._name(key)
        try:
            response = self.client.get_object(self.bucket, name)
        except S3Error as exc:
            raise self._translate(exc, key) from exc
        try:
            return bytes(response.read())
        finally:
            response.close()
            response.release_conn()

    def get_file(self, key: str, dest: Path) -> None:
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            # fget_object downloads to `<dest>.part.minio` and renames it: atomic for readers.
            self.client.fget_object(self.bucket, self._name(key), str(dest))
        except S3Error as exc:
            raise self._translate(exc, key) from exc

    def exists(self, key: str) -> bool:
        try:
            self.client.stat_object(self.bucket, self._name(key))
        except S3Error as exc:
            if exc.code in _MISSING_CODES:
                return False
            raise
        return True

    def _listed(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of each object under the folder `prefix`, in lexicographic order."""
        folder = check_prefix(prefix)
        full = "/".join(p for p in (self.prefix, folder) if p)
        strip = len(self.prefix) + 1 if self.prefix else 0
        for obj in self.client.list_objects(self.bucket, prefix=f"{full}/" if full else None, recursive=True):
            name = obj.object_name
            if name is not None and not name.endswith("/"):
                yield name[strip:], obj.size or 0

    def list(self, prefix: str) -> Iterator[str]:
        """Keys under the folder `prefix` (`""` = all), in lexicographic order (S3 lists in that order)."""
        for key, _ in self._listed(prefix):
            yield key

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy (a single CopyObject: objects up to 5 GiB; larger ones go through the
        default download + upload)."""
        from minio.commonconfig import CopySource

        try:
            size = self.client.stat_object(self.bucket, self._name(src)).size or 0
            if size > MAX_SINGLE_COPY_BYTES:
                super().copy(src, dst)
                return
            self.client.copy_object(self.bucket, self._name(dst), CopySource(self.bucket, self._name(src)))
        except S3Error as exc:
            raise self._translate(exc, src) from None

    def delete(self, key: str) -> None:
        # S3 DELETE of an absent key succeeds.
        self.client.remove_object(self.bucket, self._name(key))

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key under `prefix` with DeleteObjects requests of up to `DELETE_BATCH` keys;
        an object S3 refuses to delete raises `A2rlError` naming it (after the whole batch)."""
        folder = check_prefix(prefix)
        if not folder:
            raise ValueError("delete_prefix needs a non-empty prefix (it never empties the whole store)")
        keys = list(self.list(folder))
        for start in range(0, len(keys), DELETE_BATCH):
            batch = [DeleteObject(self._name(key)) for key in keys[start : start + DELETE_BATCH]]
            # The client sends the request lazily: the errors must be consumed.
            errors = list(self.client.remove_objects(self.bucket, batch))
            if errors:
                first = errors[0]
                raise A2rlError(
                    f"could not delete {len(errors)} object(s) under {self.url_for(folder)}: "
                    f"{first.name}: {first.code} {first.message or ''}".rstrip()
                )
        return len(keys)

    def sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        return self._listed(prefix)

    def modified_at(self, key: str) -> datetime | None:
        try:
            stat = self.client.stat_object(self.bucket, self._name(key))
        except S3Error as exc:
            if exc.code in _MISSING_CODES:
                return None
            raise
        when = stat.last_modified
        if when is None:
            return None
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)

    def _translate(self, exc: S3Error, key: str) -> Exception:
        if exc.code in _MISSING_CODES:
            return NotFoundError(f"object not found: {self.url_for(key)}")
        return exc


def _http_client(endpoint: str, secure: bool) -> urllib3.PoolManager:
    # minio's default waits 5 minutes to connect; an unreachable store should fail in seconds.
    retry = urllib3.Retry(total=3, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504])
    timeout = urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
    return http_client(endpoint, secure, timeout=timeout, maxsize=16, retries=retry)


def http_client(endpoint: str, secure: bool, **pool: Any) -> urllib3.PoolManager:
    """A connection pool for the store at `endpoint` (``host:port``): through the proxy the
    environment names for its scheme unless ``NO_PROXY`` exempts it (read as urllib reads them;
    the eval box's way out, `a2rl.egress_proxy`), else direct. minio's own default ignores them."""
    proxy = urllib.request.getproxies().get("https" if secure else "http")
    if proxy and not urllib.request.proxy_bypass(endpoint):
        return urllib3.ProxyManager(proxy, **pool)
    return urllib3.PoolManager(**pool)


class _HashingReader:
    """A read-only stream over the first `size` bytes of `f` that checks their sha256 at the end.

    Raising from `read` makes the minio client abort the upload (a multipart upload is aborted),
    so no object with mismatching content is ever committed.
    """

    def __init__(self, f: Reader, size: int, sha256: str | None, path: Path | str) -> None:
        self._f = f
        self._left = size
        self._sha256 = sha256
        self._digest = hashlib.sha256()
        self._path = path

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        want = self._left if n is None or n < 0 else min(n, self._left)
        data = self._f.read(want)
        if not data:  # the file ended early: it was truncated meanwhile
            raise ContentChangedError(f"{self._path} became shorter while it was being stored")
        self._digest.update(data)
        self._left -= len(data)
        if self._left == 0 and self._sha256 is not None and self._digest.hexdigest() != self._sha256:
            raise ContentChangedError(f"{self._path} changed while it was being stored")
        return data
