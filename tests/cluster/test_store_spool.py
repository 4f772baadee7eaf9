"""The recorder's spool against a real MinIO that is stopped and started again (never a fake).

While MinIO is down, writes land in the spool directory and reads see them; once it is back the
flusher uploads everything, in order, and the spool directory ends up empty. A spool left by one
process is uploaded by the next one.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from a2rl_recorder.spool import SpoolingStore, is_transient

from a2rl.errors import NotFoundError
from a2rl.store.local import ContentChangedError, LocalStore
from a2rl.store.open import parse_endpoint
from a2rl.store.s3 import S3Store

pytestmark = pytest.mark.minio


def s3(minio: Any, prefix: str) -> S3Store:
    host, secure = parse_endpoint(minio.endpoint)
    return S3Store(host, minio.access_key, minio.secret_key, "a2rl-spool", prefix, secure=secure)


@pytest.fixture
def prefix() -> str:
    return f"t/{uuid.uuid4().hex}"


@contextmanager
def outage(minio: Any) -> Iterator[None]:
    """MinIO stopped inside the block; always started again afterwards."""
    minio.stop()
    try:
        yield
    finally:
        if not minio.is_up():
            minio.start()


def spool_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def test_writes_pass_straight_through_while_the_store_is_up(minio: Any, prefix: str, tmp_path: Path) -> None:
    store = SpoolingStore(s3(minio, prefix), tmp_path / "spool")
    store.put_bytes("a/b.json", b"{}")
    src = tmp_path / "blob"
    src.write_bytes(os.urandom(1000))
    store.put_file_verified("blobs/x", src, hashlib.sha256(src.read_bytes()).hexdigest())
    assert store.spooled_total == 0 and store.pending() == 0
    assert not (tmp_path / "spool").exists()
    direct = s3(minio, prefix)
    assert direct.get_bytes("a/b.json") == b"{}"
    assert direct.get_bytes("blobs/x") == src.read_bytes()
    # A changed file is refused, not spooled: the caller re-hashes it.
    with pytest.raises(ContentChangedError):
        store.put_file_verified("blobs/y", src, "0" * 64)
    assert store.pending() == 0


def test_outage_spools_writes_and_flushes_them_when_the_store_returns(
    minio: Any, prefix: str, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    store = SpoolingStore(s3(minio, prefix), spool_dir, min_backoff_s=0.2, max_backoff_s=1.0)
    store.put_bytes("before.txt", b"written while up")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(6 * (1 << 20) + 3))  # multipart-sized
    big_sha = hashlib.sha256(big.read_bytes()).hexdigest()
    with outage(minio):
        store.put_file_verified(f"blobs/{big_sha}", big, big_sha)
        store.put_bytes("run/manifest.json", b'{"n": 1}')
        store.put_bytes("before.txt", b"rewritten while down")
        store.delete("gone.txt")
        mark = store.mark()
        assert store.store_down and store.pending() == 4
        assert len([f for f in spool_files(spool_dir) if f.endswith(".json")]) == 4
        # Read-your-writes while the store is unreachable.
        assert store.get_bytes("run/manifest.json") == b'{"n": 1}'
        assert store.get_bytes("before.txt") == b"rewritten while down"
        assert store.exists(f"blobs/{big_sha}")
        with pytest.raises(NotFoundError):
            store.get_bytes("gone.txt")
        out = tmp_path / "restored.bin"
        store.get_file(f"blobs/{big_sha}", out)
        assert out.read_bytes() == big.read_bytes()
        # The source may change after spooling: the spool holds the bytes of the write.
        big.write_bytes(b"changed later")
        assert not store.wait_flushed(mark, 2.0)
        time.sleep(1.0)
        assert store.pending() == 4, "nothing can be uploaded while MinIO is down"
    t0 = time.monotonic()
    assert store.wait_flushed(mark, 60)
    assert time.monotonic() - t0 < 10, "the backoff is bounded: the flush follows the restart quickly"
    assert store.pending() == 0 and not store.store_down
    assert spool_files(spool_dir) == []
    direct = s3(minio, prefix)
    assert hashlib.sha256(direct.get_bytes(f"blobs/{big_sha}")).hexdigest() == big_sha
    assert direct.get_bytes("run/manifest.json") == b'{"n": 1}'
    assert direct.get_bytes("before.txt") == b"rewritten while down"
    assert store.close(5)


def test_a_spool_left_behind_is_uploaded_by_the_next_process(minio: Any, prefix: str, tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    first = SpoolingStore(s3(minio, prefix), spool_dir, min_backoff_s=0.2, max_backoff_s=1.0)
    second_inner = s3(minio, prefix)
    with outage(minio):
        for i in range(3):
            first.put_bytes(f"revisions/{i:05d}.json", f'{{"index": {i}}}'.encode())
        assert not first.close(0.5), "still down: close reports the spool as not flushed"
        assert len(spool_files(spool_dir)) == 6  # 3 entries + 3 data files stay on disk
        (spool_dir / "000000000099.data.tmp").write_bytes(b"half-written")  # a crash mid-write
        second = SpoolingStore(second_inner, spool_dir, min_backoff_s=0.2, max_backoff_s=1.0)
        assert second.pending() == 3
        assert second.get_bytes("revisions/00001.json") == b'{"index": 1}'
    assert second.wait_flushed(second.mark(), 60)
    assert spool_files(spool_dir) == []
    assert list(s3(minio, prefix).list("revisions")) == [f"revisions/{i:05d}.json" for i in range(3)]
    # New writes after a recovered spool continue the sequence and go straight through again.
    second.put_bytes("revisions/00003.json", b"{}")
    assert s3(minio, prefix).exists("revisions/00003.json")
    assert second.close(5)


def test_local_store_errors_are_not_spooled(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = SpoolingStore(LocalStore(root), tmp_path / "spool")
    with pytest.raises(ValueError):
        store.put_bytes("../escape", b"x")
    missing = tmp_path / "nope.bin"
    with pytest.raises(FileNotFoundError):
        store.put_file("k", missing)  # a vanished source file is the caller's business
    assert store.pending() == 0
    assert not is_transient(FileNotFoundError("x")) and is_transient(ConnectionRefusedError())
