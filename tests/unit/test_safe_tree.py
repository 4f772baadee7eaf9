"""`a2rl.store.safe_tree`: the no-follow walk and open, on real files (no filesystem mocks)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from a2rl.store.base import Reader
from a2rl.store.cas import hash_tree, snapshot_tree
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from a2rl.store.safe_tree import (
    CHANGED,
    HARD_LINK,
    LINK,
    SPARSE,
    SPECIAL,
    OpenTree,
    TreeRefusedError,
    hole_bytes,
)

LAYOUT = RunLayout.from_prefix("local/safe-0123456789ab")


def _tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    return root


def test_scan_refuses_links_specials_and_hard_links_naming_path_and_reason(tmp_path: Path) -> None:
    root = _tree(tmp_path / "m")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (root / "link.txt").symlink_to(outside)
    (root / "dirlink").symlink_to(tmp_path)
    os.mkfifo(root / "sub" / "pipe")
    os.link(outside, root / "hard.txt")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    try:
        with OpenTree.open(root, label="output/m") as tree:
            tree.scan(allow_hard_links=False)
            assert [f.rel for f in tree.files] == ["a.txt", "sub/b.txt"]
            got = {r.path: (r.kind, r.reason) for r in tree.refused}
    finally:
        sock.close()
    assert got["output/m/link.txt"][0] == LINK and "is a symlink" in got["output/m/link.txt"][1]
    assert got["output/m/dirlink"][0] == LINK
    assert got["output/m/sub/pipe"] == (
        SPECIAL,
        "is a FIFO; only regular files and directories can be recorded",
    )
    assert got["output/m/sock"][0] == SPECIAL and "is a socket" in got["output/m/sock"][1]
    assert got["output/m/hard.txt"][0] == HARD_LINK and "2 hard links" in got["output/m/hard.txt"][1]


def test_strict_scan_raises_on_the_first_refusal(tmp_path: Path) -> None:
    root = _tree(tmp_path / "m")
    os.mkfifo(root / "sub" / "weights.bin")
    with OpenTree.open(root, label="output/v1") as tree, pytest.raises(TreeRefusedError) as err:
        tree.scan(strict=True)
    assert (
        str(err.value)
        == "output/v1/sub/weights.bin is a FIFO; only regular files and directories can be recorded"
    )


def test_a_symlinked_root_is_refused(tmp_path: Path) -> None:
    real = _tree(tmp_path / "real")
    (tmp_path / "code").symlink_to(real)
    with pytest.raises(TreeRefusedError) as err:
        OpenTree.open(tmp_path / "code", label="code")
    assert err.value.refusal.kind == LINK and str(err.value).startswith("code is a symlink")
    with pytest.raises(TreeRefusedError) as err2:
        OpenTree.open_under(tmp_path, "code/sub")
    assert err2.value.refusal.kind == LINK and err2.value.refusal.path == "code"


def test_open_file_refuses_an_entry_swapped_after_the_scan(tmp_path: Path) -> None:
    root = _tree(tmp_path / "m")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    with OpenTree.open(root, label="m") as tree:
        tree.scan()
        by_rel = {f.rel: f for f in tree.files}
        (root / "a.txt").unlink()
        (root / "a.txt").symlink_to(secret)  # a file swapped for a link
        os.rename(root / "sub", root / "sub.old")
        (root / "sub").symlink_to(tmp_path)  # a directory swapped for a link
        with pytest.raises(TreeRefusedError) as err:
            tree.open_file(by_rel["a.txt"])
        assert err.value.refusal.kind == LINK
        with pytest.raises(TreeRefusedError) as err2:
            tree.open_file(by_rel["sub/b.txt"])
        assert err2.value.refusal.kind == CHANGED and err2.value.refusal.path == "m/sub"
        (root / "sub").unlink()
        (root / "sub").mkdir()  # a new directory (another inode) under the same name
        (root / "sub" / "b.txt").write_text("b")
        with pytest.raises(TreeRefusedError) as err3:
            tree.open_file(by_rel["sub/b.txt"])
        assert err3.value.refusal.kind == CHANGED


def _truncate(path: Path, size: str) -> None:
    subprocess.run(["truncate", "-s", size, str(path)], check=True)  # what an agent would type


def test_sparse_files_are_refused_and_small_holes_pass(tmp_path: Path) -> None:
    root = _tree(tmp_path / "m")
    _truncate(root / "weights.bin", "1G")
    assert os.stat(root / "weights.bin").st_blocks * 512 < (1 << 20)  # really sparse
    # A real file with a small hole (a 512 KiB gap before its last block) is recorded.
    with (root / "small-gap.bin").open("wb") as f:
        f.write(os.urandom(4096))
        f.seek(512 << 10, os.SEEK_CUR)
        f.write(os.urandom(4096))
    with OpenTree.open(root, label="code") as tree:
        tree.scan()
        assert [f.rel for f in tree.files] == ["a.txt", "small-gap.bin", "sub/b.txt"]
        [refusal] = tree.refused
    assert refusal.path == "code/weights.bin" and refusal.kind == SPARSE
    assert refusal.reason.startswith(f"is a sparse file ({1 << 30} bytes long,")
    with OpenTree.open(root, label="output/v1") as tree, pytest.raises(TreeRefusedError) as err:
        tree.scan(strict=True)
    assert err.value.refusal.kind == SPARSE
    with os.fdopen(os.open(root / "weights.bin", os.O_RDONLY), "rb") as f:
        assert hole_bytes(f.fileno(), 1 << 30) >= (1 << 30) - (1 << 20)


def test_dense_files_count_at_their_full_size(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    (root / "weights.bin").write_bytes(os.urandom(2 << 20))
    with OpenTree.open(root) as tree, pytest.raises(ValueError, match="too big"):
        tree.scan(max_total_bytes=1 << 20, on_too_large=lambda n: ValueError(f"too big: {n}"))


def test_a_file_made_sparse_after_the_scan_is_refused_when_read(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    (root / "weights.bin").write_bytes(os.urandom(4096))
    store = LocalStore(tmp_path / "store")
    with OpenTree.open(root, label="") as tree:
        tree.scan()
        assert "weights.bin" in list(tree.iter_paths())
        _truncate(root / "weights.bin", "1G")  # after the scan, before the read
        manifest, stats = snapshot_tree(store, LAYOUT, tree, max_file_bytes=2 << 30)
    assert [e.path for e in manifest.entries] == ["a.txt", "sub/b.txt"]
    assert [(r.path, r.kind) for r in stats.refused] == [("weights.bin", SPARSE)]
    assert sum(p.stat().st_size for p in (store.root / LAYOUT.blobs).rglob("*") if p.is_file()) < 1 << 20


def test_lenient_snapshot_leaves_refused_entries_out_and_lists_them(tmp_path: Path) -> None:
    root = _tree(tmp_path / "m")
    (root / "link").symlink_to(tmp_path / "nowhere")
    os.mkfifo(root / "pipe")
    store = LocalStore(tmp_path / "store")
    manifest, stats = snapshot_tree(store, LAYOUT, root)
    assert [e.path for e in manifest.entries] == ["a.txt", "sub/b.txt"]
    assert sorted(r.path for r in stats.refused) == ["link", "pipe"]
    assert hash_tree(root).digest == manifest.digest


def test_deeply_nested_directories_are_refused_not_a_recursion_error(tmp_path: Path) -> None:
    root = tmp_path / "m"
    deep = root.joinpath(*(["d"] * 140))
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    with OpenTree.open(root, label="m") as tree:
        tree.scan()
    assert tree.files == [] and tree.refused[0].kind == "too-deep"


def test_spooling_store_spools_an_fd_upload_while_the_store_is_down(tmp_path: Path) -> None:
    from a2rl_recorder.spool import SpoolingStore

    class Down(LocalStore):
        fail = True

        def put_fileobj_verified(
            self, key: str, f: Reader, sha256: str | None, *, size: int, name: str = ""
        ) -> None:
            if self.fail:
                f.read(3)  # a partial read before the connection broke: the spool starts over
                raise ConnectionError("store down")
            super().put_fileobj_verified(key, f, sha256, size=size, name=name)

        def put_file_verified(self, key: str, path: Path, sha256: str | None) -> None:  # the flusher's
            if self.fail:
                raise ConnectionError("store down")
            super().put_file_verified(key, path, sha256)

    inner = Down(tmp_path / "store")
    store = SpoolingStore(inner, tmp_path / "spool", min_backoff_s=0.01, max_backoff_s=0.05)
    root = _tree(tmp_path / "m")
    manifest, stats = snapshot_tree(store, LAYOUT, root)
    assert stats.files_uploaded == 2 and store.pending() == 2
    inner.fail = False
    assert store.close(5)
    for entry in manifest.entries:
        assert inner.get_bytes(LAYOUT.blob(entry.sha256)) == (root / entry.path).read_bytes()
