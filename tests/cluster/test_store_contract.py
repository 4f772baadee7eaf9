"""One contract for every ObjectStore: the local directory and S3 (a real MinIO, never a fake)."""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from a2rl.errors import A2rlError, NotFoundError
from a2rl.store.base import ObjectStore
from a2rl.store.cas import (
    TreeManifest,
    _BlobUploader,
    _hash_fd,
    forget_known_blobs,
    hash_tree,
    restore_tree,
    snapshot_tree,
)
from a2rl.store.layout import RunLayout
from a2rl.store.local import TMP_SUFFIX, ContentChangedError, LocalStore

LAYOUT = RunLayout("local", "contract", "0123456789ab")


def _s3_store(request: pytest.FixtureRequest) -> ObjectStore:
    # The `minio` fixture builds MinIO when it is missing and fails (never skips) when it cannot.
    server = request.getfixturevalue("minio")
    from a2rl.store.open import parse_endpoint
    from a2rl.store.s3 import S3Store

    host, secure = parse_endpoint(server.endpoint)
    # A fresh prefix per test: tests never see each other's objects.
    return S3Store(
        host, server.access_key, server.secret_key, "a2rl-contract", f"t/{uuid.uuid4().hex}", secure=secure
    )


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.minio)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    forget_known_blobs()
    if request.param == "local":
        yield LocalStore(tmp_path / "store")
    else:
        yield _s3_store(request)
    forget_known_blobs()


def _write(path: Path, data: bytes, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _tree(root: Path) -> Path:
    _write(root / "config.json", b'{"a": 1}\n')
    _write(root / "weights" / "model.bin", os.urandom(300_000))
    _write(root / "weights" / "copy.bin", b"same bytes")
    _write(root / "other" / "copy.bin", b"same bytes")
    _write(root / "empty.txt", b"")
    _write(root / "run.sh", b"#!/bin/sh\necho hi\n", mode=0o755)
    return root


# --- bytes, files, JSON --------------------------------------------------------------------


def test_copy_makes_an_independent_object_and_refuses_a_missing_source(store: ObjectStore) -> None:
    store.put_bytes("src/a.bin", b"payload")
    store.put_bytes("dst/a.bin", b"old")
    store.copy("src/a.bin", "dst/a.bin")
    assert store.get_bytes("dst/a.bin") == b"payload"
    store.put_bytes("src/a.bin", b"changed")  # the copy does not follow its source
    assert store.get_bytes("dst/a.bin") == b"payload"
    with pytest.raises(NotFoundError):
        store.copy("src/missing.bin", "dst/x.bin")
    assert not store.exists("dst/x.bin")


def test_snapshot_copies_blobs_another_layout_holds_instead_of_uploading(
    store: ObjectStore, tmp_path: Path
) -> None:
    from a2rl.models.library import ModelLayout

    tree = _tree(tmp_path / "model")
    library = ModelLayout("pushed")
    pushed, first = snapshot_tree(store, library, tree)
    assert first.files_uploaded == 5 and first.files_copied == 0  # two identical files share a blob
    snap, stats = snapshot_tree(store, LAYOUT, tree, copy_from=(library,))
    assert snap.digest == pushed.digest
    assert (stats.files_uploaded, stats.bytes_uploaded) == (0, 0)
    assert (stats.files_copied, stats.bytes_copied) == (5, first.bytes_uploaded)
    restore_tree(store, LAYOUT, snap, tmp_path / "restored")
    assert hash_tree(tmp_path / "restored").digest == snap.digest


def test_put_get_bytes_and_overwrite(store: ObjectStore) -> None:
    store.put_bytes("a/b/c.txt", b"one")
    assert store.get_bytes("a/b/c.txt") == b"one"
    store.put_bytes("a/b/c.txt", b"two")
    assert store.get_bytes("a/b/c.txt") == b"two"
    assert store.exists("a/b/c.txt")


def test_put_get_file_streams_large_files(store: ObjectStore, tmp_path: Path) -> None:
    # 6 MiB + 1: above the 5 MiB S3 part size, so S3 takes the multipart path.
    data = os.urandom(6 * (1 << 20) + 1)
    src = _write(tmp_path / "src.bin", data)
    store.put_file("files/big.bin", src)
    dest = tmp_path / "deep" / "er" / "out.bin"
    store.get_file("files/big.bin", dest)
    assert dest.read_bytes() == data


def test_json_helpers_round_trip(store: ObjectStore) -> None:
    value = {"index": 3, "score": 12.5, "nested": {"list": [1, 2, None]}, "text": "ünïcode"}
    store.put_json("x/result.json", value)
    assert store.get_json("x/result.json") == value
    assert store.get_bytes("x/result.json").endswith(b"\n")


def test_missing_objects_raise_not_found(store: ObjectStore, tmp_path: Path) -> None:
    assert not store.exists("nope/x")
    with pytest.raises(NotFoundError):
        store.get_bytes("nope/x")
    with pytest.raises(NotFoundError):
        store.get_file("nope/x", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put_bytes("d/k", b"v")
    store.delete("d/k")
    assert not store.exists("d/k")
    store.delete("d/k")
    store.delete("never/was")
    assert list(store.list("d")) == []


def test_delete_prefix_removes_one_folder_only_and_sizes_and_times_are_listed(store: ObjectStore) -> None:
    """What `a2rl runs rm` relies on: `delete_prefix` (S3: batched DeleteObjects), `sizes`, `modified_at`."""
    keys = [f"local/a-1/blobs/{i:04d}" for i in range(1005)] + ["local/a-1/run.json"]
    for k in keys:
        store.put_bytes(k, b"12345")
    store.put_bytes("local/a-10/run.json", b"{}")
    store.put_bytes("baselines/t/d/v.json", b"{}")
    sizes = dict(store.sizes("local/a-1"))
    assert sorted(sizes) == sorted(keys) and set(sizes.values()) == {5}
    written = store.modified_at("local/a-1/run.json")
    assert written is not None and abs(time.time() - written.timestamp()) < 600
    assert store.modified_at("local/a-1/missing") is None
    assert store.delete_prefix("local/a-1") == len(keys)
    assert list(store.list("")) == ["baselines/t/d/v.json", "local/a-10/run.json"]
    assert store.delete_prefix("local/a-1") == 0
    with pytest.raises(ValueError):
        store.delete_prefix("")


# --- atomicity -----------------------------------------------------------------------------


def test_failed_verified_write_leaves_old_object_and_no_partial(store: ObjectStore, tmp_path: Path) -> None:
    store.put_bytes("blob/k", b"old content")
    src = _write(tmp_path / "f", os.urandom(1 << 20))
    with pytest.raises(ContentChangedError):
        store.put_file_verified("blob/k", src, "0" * 64)  # type: ignore[attr-defined]
    assert store.get_bytes("blob/k") == b"old content"
    with pytest.raises(ContentChangedError):
        store.put_file_verified("blob/new", src, "0" * 64)  # type: ignore[attr-defined]
    assert not store.exists("blob/new")
    assert list(store.list("blob")) == ["blob/k"]


def test_local_store_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    store.put_bytes("a/x", b"1")
    store.put_file("a/y", _write(tmp_path / "f", b"2"))
    with pytest.raises(ContentChangedError):
        store.put_file_verified("a/z", tmp_path / "f", "0" * 64)
    leftovers = [p.name for p in (tmp_path / "s").rglob("*") if p.name.endswith(TMP_SUFFIX)]
    assert leftovers == []


# --- listing -------------------------------------------------------------------------------


def test_list_is_recursive_sorted_and_folder_scoped(store: ObjectStore) -> None:
    keys = ["r/s/00010/m.json", "r/s/00002/m.json", "r/s/00002/r.json", "r/b", "r/a/z", "rx/other", "r/sx/y"]
    for k in keys:
        store.put_bytes(k, b"x")
    assert list(store.list("r/s")) == ["r/s/00002/m.json", "r/s/00002/r.json", "r/s/00010/m.json"]
    assert list(store.list("r/s/")) == list(store.list("r/s"))
    assert list(store.list("r")) == sorted(k for k in keys if k.startswith("r/"))
    assert "rx/other" in list(store.list(""))
    assert list(store.list("r/missing")) == []


# --- key validation ------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "../x", "a/./b", "a/", "a\\b", "x\x00y"])
def test_invalid_keys_are_rejected(store: ObjectStore, key: str) -> None:
    with pytest.raises(ValueError):
        store.put_bytes(key, b"x")
    with pytest.raises(ValueError):
        store.get_bytes(key)
    with pytest.raises(ValueError):
        store.exists(key)
    with pytest.raises(ValueError):
        store.delete(key)


# --- content-addressed snapshots -----------------------------------------------------------


def test_snapshot_restore_round_trip(store: ObjectStore, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    manifest, stats = snapshot_tree(store, LAYOUT, src)
    assert manifest.digest == hash_tree(src).digest
    assert stats.files == 6 and stats.bytes_total == manifest.total_bytes
    # Two files share content: five distinct blobs.
    assert stats.files_uploaded == 5
    assert len(list(store.list(LAYOUT.blobs))) == 5

    dest = tmp_path / "restored"
    restore_tree(store, LAYOUT, TreeManifest.from_json(manifest.to_json()), dest)
    assert hash_tree(dest).digest == manifest.digest
    for entry in manifest.entries:
        restored = dest / entry.path
        assert restored.read_bytes() == (src / entry.path).read_bytes()
        assert stat.S_IMODE(restored.stat().st_mode) == entry.mode
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755


def test_second_snapshot_of_unchanged_tree_uploads_nothing(store: ObjectStore, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    first, s1 = snapshot_tree(store, LAYOUT, src)
    assert s1.bytes_uploaded > 0
    second, s2 = snapshot_tree(store, LAYOUT, src)
    assert (s2.files_uploaded, s2.bytes_uploaded) == (0, 0)
    # Also without the process cache (a new recorder process): `exists` finds the blobs.
    forget_known_blobs()
    third, s3 = snapshot_tree(store, LAYOUT, src, known=set())
    assert (s3.files_uploaded, s3.bytes_uploaded) == (0, 0)
    assert first.digest == second.digest == third.digest
    # One changed file: exactly that file is uploaded.
    _write(src / "config.json", b'{"a": 2}\n')
    known: set[str] = set()
    fourth, s4 = snapshot_tree(store, LAYOUT, src, known=known)
    assert fourth.digest != first.digest
    assert (s4.files_uploaded, s4.bytes_uploaded) == (1, len(b'{"a": 2}\n'))
    assert {e.sha256 for e in fourth.entries} <= known


def test_digest_cache_skips_unchanged_files_and_notices_rewrites(
    store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from a2rl.store import cas

    reads: list[int] = []  # one entry per file hashed (snapshots hash from no-follow descriptors)
    real_hash = cas._hash_fd

    def counting(fd: int, limit: int | None, check: Any) -> tuple[str, int]:
        reads.append(fd)
        return real_hash(fd, limit, check)

    monkeypatch.setattr(cas, "_hash_fd", counting)
    src = _tree(tmp_path / "src")
    digests = cas.DigestCache()
    # Files changed less than STABLE_AFTER_NS before the read are never cached (same-tick writes).
    first, _ = snapshot_tree(store, LAYOUT, src, digests=digests)
    assert len(digests) == 0 and len(reads) == 6
    monkeypatch.setattr(cas, "STABLE_AFTER_NS", 0)
    reads.clear()
    snapshot_tree(store, LAYOUT, src, digests=digests)
    assert len(reads) == 6 and len(digests) == 6
    reads.clear()
    again, stats = snapshot_tree(store, LAYOUT, src, digests=digests)
    assert reads == [] and again.digest == first.digest and stats.bytes_uploaded == 0
    # Same size, mtime put back: the ctime still changes, so the rewrite is noticed.
    time.sleep(0.05)
    target = src / "weights" / "model.bin"
    before = target.stat()
    target.write_bytes(os.urandom(before.st_size))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    changed, stats = snapshot_tree(store, LAYOUT, src, digests=digests)
    assert len(reads) == 1  # only model.bin
    assert changed.digest != first.digest and stats.files_uploaded == 1
    assert changed.digest == hash_tree(src).digest


def test_identical_trees_have_equal_digests(store: ObjectStore, tmp_path: Path) -> None:
    a = _tree(tmp_path / "a")
    b = tmp_path / "b"
    restore_tree(store, LAYOUT, snapshot_tree(store, LAYOUT, a)[0], b)
    os.utime(b / "config.json", (1, 1))  # times are not part of the digest
    assert snapshot_tree(store, LAYOUT, a)[0].digest == snapshot_tree(store, LAYOUT, b)[0].digest
    _write(b / "extra.txt", b"!")
    assert snapshot_tree(store, LAYOUT, a)[0].digest != snapshot_tree(store, LAYOUT, b)[0].digest


def test_file_changed_after_hashing_is_stored_under_its_new_digest(
    store: ObjectStore, tmp_path: Path
) -> None:
    path = _write(tmp_path / "f.txt", b"new content")
    stale_digest = "a" * 64  # what hashing saw before the file was rewritten
    uploader = _BlobUploader(store, LAYOUT, set())
    fd = os.open(path, os.O_RDONLY)
    try:
        digest, size = uploader.ensure(fd, "f.txt", stale_digest, 3, lambda: _hash_fd(fd, None, None))
    finally:
        os.close(fd)
    assert digest == hash_tree(tmp_path, lambda rel: rel == "f.txt").entries[0].sha256
    assert size == len(b"new content")
    assert not store.exists(LAYOUT.blob(stale_digest))
    assert store.get_bytes(LAYOUT.blob(digest)) == b"new content"


def test_restore_refuses_corrupt_blob(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _write(src / "a.txt", b"genuine")
    manifest, _ = snapshot_tree(store, LAYOUT, src)
    store.put_bytes(LAYOUT.blob(manifest.entries[0].sha256), b"tampered")
    with pytest.raises(A2rlError, match="corrupt"):
        restore_tree(store, LAYOUT, manifest, tmp_path / "out")
    assert not (tmp_path / "out" / "a.txt").exists()


def test_restore_refuses_missing_blob_and_unsafe_paths(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _write(src / "a.txt", b"x")
    manifest, _ = snapshot_tree(store, LAYOUT, src)
    store.delete(LAYOUT.blob(manifest.entries[0].sha256))
    with pytest.raises(NotFoundError):
        restore_tree(store, LAYOUT, manifest, tmp_path / "out")
    evil = TreeManifest.from_json(
        {"files": [{"path": "../escape.txt", "sha256": manifest.entries[0].sha256, "size": 1, "mode": 420}]}
    )
    with pytest.raises(A2rlError, match="unsafe path"):
        restore_tree(store, LAYOUT, evil, tmp_path / "out2")
    assert not (tmp_path / "escape.txt").exists()


def test_snapshot_skips_symlinks(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _write(src / "a.txt", b"x")
    secret = _write(tmp_path / "outside.txt", b"secret")
    (src / "link.txt").symlink_to(secret)
    manifest, _ = snapshot_tree(store, LAYOUT, src)
    assert [e.path for e in manifest.entries] == ["a.txt"]
