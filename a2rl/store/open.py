"""`open_store(uri)`: the one way every component opens the object store from a URI.

None                      → the local default (`a2rl.paths.default_store_uri()`)
/some/dir, file:///dir    → LocalStore
s3://bucket[/prefix]      → S3Store; endpoint and credentials from AWS_ENDPOINT_URL,
                            AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (+ optional AWS_REGION)
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from a2rl.constants import ENV_S3_ACCESS_KEY, ENV_S3_ENDPOINT, ENV_S3_SECRET_KEY
from a2rl.errors import A2rlError
from a2rl.paths import default_store_uri
from a2rl.store.base import ObjectStore
from a2rl.store.local import LocalStore
from a2rl.store.s3 import S3Store

ENV_S3_REGION = "AWS_REGION"


def open_store(uri: str | None = None) -> ObjectStore:
    if uri is None or not uri.strip():
        uri = default_store_uri()
    uri = uri.strip()
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "" or (len(scheme) == 1 and uri[1:2] == ":"):  # a plain path (or a drive letter)
        return LocalStore(Path(uri))
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise A2rlError(f"file store URI must name a local path (file:///dir), got {uri!r}")
        return LocalStore(Path(unquote(parts.path)))
    if scheme == "s3":
        return _open_s3(uri, parts.netloc, parts.path)
    raise A2rlError(f"unsupported store URI {uri!r}: use a directory, file:///dir or s3://bucket/prefix")


def parse_endpoint(endpoint: str) -> tuple[str, bool]:
    """(host[:port], secure) from `http://host:port`, `https://host` or a bare `host:port`."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
        raise A2rlError(f"{ENV_S3_ENDPOINT} must look like http://host:port, got {endpoint!r}")
    return parts.netloc, parts.scheme == "https"


def _open_s3(uri: str, bucket: str, path: str) -> ObjectStore:
    if not bucket:
        raise A2rlError(f"store URI {uri!r} names no bucket (expected s3://bucket/prefix)")
    endpoint = os.environ.get(ENV_S3_ENDPOINT, "").strip()
    access_key = os.environ.get(ENV_S3_ACCESS_KEY, "")
    secret_key = os.environ.get(ENV_S3_SECRET_KEY, "")
    settings = {ENV_S3_ENDPOINT: endpoint, ENV_S3_ACCESS_KEY: access_key, ENV_S3_SECRET_KEY: secret_key}
    missing = [name for name, value in settings.items() if not value]
    if missing:
        raise A2rlError(f"store {uri} needs {', '.join(missing)} in the environment")
    host, secure = parse_endpoint(endpoint)

    try:
        return S3Store(
            host,
            access_key,
            secret_key,
            bucket,
            path.strip("/"),
            secure=secure,
            region=os.environ.get(ENV_S3_REGION) or None,
        )
    except ValueError as exc:  # bad bucket name or prefix
        raise A2rlError(f"invalid store URI {uri!r}: {exc}") from exc
