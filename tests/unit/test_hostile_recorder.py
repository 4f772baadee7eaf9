"""A hostile agent against a real `Recorder` (LocalStore in tmp_path): links, swaps, FIFOs, hard
links, sparse files, store flooding, a linked run_meta.json and post-deadline rewrites. Real
files, real races.

The promise every test checks: no byte of a file outside the workspace (`SECRET`) and no byte
written after the deadline ever lands in the store, and every attack gets a 4xx naming the path
(never a 500, never a blocked submit).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2rl_recorder.config import RecorderConfig
from a2rl_recorder.snapshots import CodeSnapshotter, CodeWatcher, Debounce
from a2rl_recorder.submit import SubmitRejectedError, snapshot_model, validate_model_path

from a2rl.constants import (
    ENV_HELDOUT_PATH,
    ENV_MAX_RUN_STORED_BYTES,
    ENV_RUN_PREFIX,
    ENV_RUN_TIMEOUT,
    ENV_TASK,
    ENV_WORKSPACE,
)
from a2rl.store.base import Reader
from a2rl.store.cas import FREE_SPACE_FRACTION, run_stored_cap
from a2rl.store.local import LocalStore
from tests.support.recorder_support import LAYOUT, make_model, new_recorder, submission_keys

SECRET = b"HELDOUT-GOLD-" + os.urandom(8).hex().encode()
FAST = 0.05


def _secret_dir(tmp_path: Path) -> Path:
    d = tmp_path / "heldout"
    d.mkdir(exist_ok=True)
    (d / "heldout.jsonl").write_bytes(SECRET * 64)
    (d / "config.json").write_bytes(b'{"leak": "' + SECRET + b'"}')
    return d


def _store_bytes(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path, path.read_bytes()


def _assert_no_secret(store: LocalStore) -> None:
    leaked = [p for p, data in _store_bytes(store.root) if SECRET in data]
    assert leaked == [], f"held-out bytes in the store: {leaked}"


# --- links ------------------------------------------------------------------------------------


def test_symlinked_output_and_code_record_nothing_from_outside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path)
    secret = _secret_dir(tmp_path)
    make_model(secret / "model")
    (ws / "output").rmdir()
    (ws / "output").symlink_to(secret)
    status, reply = recorder.submit({"model_path": "output/model"})
    assert status == 400 and "output is a symlink" in reply["error"]  # type: ignore[call-overload]
    (ws / "code").rmdir()
    (ws / "code").symlink_to(secret)
    with caplog.at_level(logging.WARNING):
        assert recorder.code.snapshot("change") is None
        assert recorder.code.signature() == ()
    assert "is a symlink" in caplog.text
    assert list(store.list(LAYOUT.revisions)) == [] and submission_keys(store) == []
    assert dispatcher.calls == []
    _assert_no_secret(store)


def test_links_fifos_and_caches_in_code_are_left_out_and_listed(tmp_path: Path) -> None:
    _, store, _, ws = new_recorder(tmp_path)
    secret = _secret_dir(tmp_path)
    code = ws / "code"
    (code / "train.py").write_text("print('hi')\n")
    (code / "data.jsonl").symlink_to(secret / "heldout.jsonl")
    (code / "ref").symlink_to(secret)
    os.mkfifo(code / "pipe")
    os.link(secret / "heldout.jsonl", code / "copy.jsonl")
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    (code / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"x")
    snap = CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1 << 20)
    rev = snap.snapshot("change")
    assert rev is not None
    doc = store.get_json(LAYOUT.revision(rev.index))
    assert [f["path"] for f in doc["tree"]["files"]] == ["train.py"]
    refused = {r["path"]: r["reason"] for r in doc["refused"]}
    assert set(refused) == {"copy.jsonl", "data.jsonl", "ref", "pipe"}
    assert refused["pipe"].startswith("is a FIFO") and refused["data.jsonl"].startswith("is a symlink")
    assert refused["copy.jsonl"].startswith("has 2 hard links")
    assert [r["path"] for r in doc["ignored"]] == ["pkg/__pycache__/"]
    _assert_no_secret(store)


def test_a_subdirectory_swapped_for_a_symlink_during_snapshots_never_leaks(tmp_path: Path) -> None:
    recorder, store, _, ws = new_recorder(tmp_path)
    secret = _secret_dir(tmp_path)
    model = make_model(ws / "output" / "v1")
    (model / "shards").mkdir()
    for i in range(40):
        (model / "shards" / f"s{i:02d}.bin").write_bytes(os.urandom(4096))
    parked = ws / "output"  # the agent's links wait outside the model, then are renamed in
    (parked / ".dirlink").symlink_to(secret)
    (parked / ".filelink").symlink_to(secret / "heldout.jsonl")
    stop = threading.Event()

    def swapper() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            name, link = (("shards", ".dirlink"), ("model.safetensors", ".filelink"))[n % 2]
            os.rename(model / name, parked / ".real")
            os.rename(parked / link, model / name)
            time.sleep(0.0005 * (n % 3))
            os.rename(model / name, parked / link)
            os.rename(parked / ".real", model / name)
            time.sleep(0.0005 * (n % 5))

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    statuses: list[int] = []
    t_end = time.monotonic() + 3.0
    try:
        while len(statuses) < 50 and time.monotonic() < t_end:
            status, reply = recorder.submit({"model_path": "output/v1"})
            statuses.append(status)
            assert status in (200, 400, 409), reply
            if status != 200:
                assert isinstance(reply, dict) and "output/v1/" in reply["error"]
    finally:
        stop.set()
        thread.join()
    assert len(statuses) >= 10
    _assert_no_secret(store)


# --- special files ----------------------------------------------------------------------------


def test_a_fifo_in_a_model_is_refused_at_once(tmp_path: Path) -> None:
    recorder, store, _, ws = new_recorder(tmp_path)
    model = make_model(ws / "output" / "v1")
    (model / "model.safetensors").unlink()
    os.mkfifo(model / "model.safetensors")
    t0 = time.monotonic()
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert time.monotonic() - t0 < 2.0
    assert status == 400
    assert reply["error"] == (  # type: ignore[call-overload]
        "output/v1/model.safetensors is a FIFO; only regular files and directories can be recorded"
    )
    assert submission_keys(store) == []


def test_a_fifo_swapped_in_during_snapshots_never_blocks_a_submit(tmp_path: Path) -> None:
    recorder, _, _, ws = new_recorder(tmp_path)
    model = make_model(ws / "output" / "v1")
    weights = model / "model.safetensors"
    stop = threading.Event()

    def swapper() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            tmp = model / f".swap{n}"
            if n % 2:
                os.mkfifo(tmp)
            else:
                tmp.write_bytes(b"weights")
            os.rename(tmp, weights)

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    t_end = time.monotonic() + 3.0
    count = 0
    try:
        while count < 50 and time.monotonic() < t_end:
            t0 = time.monotonic()
            status, reply = recorder.submit({"model_path": "output/v1"})
            assert time.monotonic() - t0 < 2.0, "a submit blocked"
            assert status in (200, 400, 409), reply
            count += 1
    finally:
        stop.set()
        thread.join()
    assert count >= 10


def test_a_hard_link_to_an_outside_file_is_refused(tmp_path: Path) -> None:
    recorder, store, _, ws = new_recorder(tmp_path)
    secret = _secret_dir(tmp_path)
    model = make_model(ws / "output" / "v1")
    os.link(secret / "heldout.jsonl", model / "extra.jsonl")
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 400 and reply["error"].startswith("output/v1/extra.jsonl has 2 hard links")  # type: ignore[call-overload]
    assert submission_keys(store) == []
    _assert_no_secret(store)


# --- sizes ------------------------------------------------------------------------------------


def _sparse(path: Path, size: int) -> None:
    """`truncate -s <size> <path>`: a file of `size` bytes that takes (almost) no disk."""
    subprocess.run(["truncate", "-s", str(size), str(path)], check=True)


def _blob_bytes(store: LocalStore) -> int:
    return sum(p.stat().st_size for p in (store.root / LAYOUT.blobs).rglob("*") if p.is_file())


def test_a_sparse_model_file_is_refused(tmp_path: Path) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path)
    model = make_model(ws / "output" / "v1")
    _sparse(model / "model-00002-of-00002.safetensors", 1 << 30)
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 400, reply
    assert reply["error"].startswith("output/v1/model-00002-of-00002.safetensors is a sparse file")  # type: ignore[call-overload]
    assert submission_keys(store) == [] and _blob_bytes(store) == 0 and dispatcher.calls == []


def test_a_hole_made_after_the_checks_is_caught_before_anything_is_stored(tmp_path: Path) -> None:
    # The model is dense when the submit checks it; the agent then grows its weights with
    # `truncate` (a 1 GiB hole) before the snapshot reads them.
    recorder, store, _, ws = new_recorder(tmp_path)
    model = make_model(ws / "output" / "v1")
    candidate = validate_model_path(ws, "output/v1", max_bytes=50 << 30)
    _sparse(model / "model.safetensors", 1 << 30)
    with candidate.tree, pytest.raises(SubmitRejectedError) as err:
        snapshot_model(
            store, LAYOUT, candidate, known=None, digests=None, read_deadline=None, clock=time.time,
            budget=recorder.upload_budget,
        )  # fmt: skip
    assert err.value.status == 400 and "output/v1/model.safetensors is a sparse file" in str(err.value)
    assert _blob_bytes(store) < (1 << 20)


def test_the_run_cap_on_stored_bytes_stops_distinct_large_submissions(tmp_path: Path) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path, max_run_stored_bytes=3 << 20)
    (make_model(ws / "output" / "v1") / "model.safetensors").write_bytes(os.urandom(2 << 20))
    assert recorder.submit({"model_path": "output/v1"})[0] == 200
    assert recorder.submit({"model_path": "output/v1"})[0] == 200  # the same bytes again: free
    (make_model(ws / "output" / "v2") / "model.safetensors").write_bytes(os.urandom(2 << 20))
    status, reply = recorder.submit({"model_path": "output/v2"})
    assert status == 413 and "past its limit" in reply["error"]  # type: ignore[call-overload]
    assert "output/v2/model.safetensors" in reply["error"]  # type: ignore[call-overload]
    assert dispatcher.calls == [1, 2] and not store.exists(LAYOUT.submission_manifest(3))


def test_the_run_cap_is_below_the_free_space_of_the_store(tmp_path: Path) -> None:
    free = LocalStore(tmp_path / "store").free_bytes()
    assert (
        free is not None
        and free == os.statvfs(tmp_path / "store").f_bavail * os.statvfs(tmp_path / "store").f_frsize
    )
    recorder, _, _, _ = new_recorder(tmp_path)  # the configured cap: the default 200 GiB
    limit = recorder.upload_budget.limit
    assert limit is not None
    # At most half the free space at run start (give or take what the test itself wrote since).
    assert limit <= min(200 << 30, free * FREE_SPACE_FRACTION + (16 << 20))
    assert limit >= min(200 << 30, free * FREE_SPACE_FRACTION - (16 << 20))
    assert run_stored_cap(None, 10 << 30) == 5 << 30 and run_stored_cap(1 << 30, 10 << 30) == 1 << 30
    assert run_stored_cap(None, None) is None and run_stored_cap(7, None) == 7


def test_a_sparse_gigabyte_in_code_is_refused_and_listed(tmp_path: Path) -> None:
    # Even where the per-file limit of code/ would let a 1 GiB file through.
    recorder, store, _, ws = new_recorder(tmp_path, code_max_file_bytes=4 << 30)
    (ws / "code" / "train.py").write_text("print('train')\n")
    _sparse(ws / "code" / "weights.bin", 1 << 30)
    rev = recorder.code.snapshot("change")
    assert rev is not None
    doc = store.get_json(LAYOUT.revision(rev.index))
    assert [f["path"] for f in doc["tree"]["files"]] == ["train.py"]
    refused = {r["path"]: r["reason"] for r in doc["refused"]}
    assert list(refused) == ["weights.bin"] and refused["weights.bin"].startswith("is a sparse file")
    assert _blob_bytes(store) < (1 << 20)


def test_code_revisions_count_against_the_run_cap(tmp_path: Path) -> None:
    recorder, store, _, ws = new_recorder(tmp_path, max_run_stored_bytes=3 << 20)
    code = ws / "code"
    (code / "ckpt-1.pt").write_bytes(os.urandom(2 << 20))
    (code / "ckpt-2.pt").write_bytes(os.urandom(2 << 20))
    rev = recorder.code.snapshot("change")
    assert rev is not None
    doc = store.get_json(LAYOUT.revision(rev.index))
    assert len(doc["tree"]["files"]) == 1
    [over] = doc["refused"]
    assert over["path"] in ("ckpt-1.pt", "ckpt-2.pt") and "past its limit" in over["reason"]
    assert _blob_bytes(store) <= 3 << 20
    # A submission cannot store past the cap either: the code used it.
    (make_model(ws / "output" / "v1") / "model.safetensors").write_bytes(os.urandom(2 << 20))
    assert recorder.submit({"model_path": "output/v1"})[0] == 413


def test_a_code_dir_of_only_refused_entries_still_writes_a_revision(tmp_path: Path) -> None:
    _, store, _, ws = new_recorder(tmp_path)
    secret = _secret_dir(tmp_path)
    code = ws / "code"
    os.link(secret / "heldout.jsonl", code / "train_extra.jsonl")
    (code / "server.key").symlink_to("/etc/ssl/private/ssl-cert-snakeoil.key")
    os.mkfifo(code / "progress.fifo")
    snap = CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1 << 20)
    rev = snap.snapshot("change")
    assert rev is not None and rev.index == 1
    doc = store.get_json(LAYOUT.revision(1))
    assert doc["tree"]["files"] == []
    refused = {r["path"]: r["reason"] for r in doc["refused"]}
    assert set(refused) == {"train_extra.jsonl", "server.key", "progress.fifo"}
    assert refused["train_extra.jsonl"].startswith("has 2 hard links")
    assert refused["server.key"].startswith("is a symlink")
    assert refused["progress.fifo"].startswith("is a FIFO")
    assert snap.snapshot("change") == rev  # nothing changed: no new revision
    # A new refused entry is a change of what the revision lists: a new revision, same (empty) tree.
    os.mkfifo(code / "stderr.fifo")
    rev2 = snap.snapshot("change")
    assert rev2 is not None and rev2.index == 2 and rev2.digest == rev.digest
    assert "stderr.fifo" in {r["path"] for r in store.get_json(LAYOUT.revision(2))["refused"]}
    # After a recorder restart, the listing is read back: still no new revision.
    assert CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1 << 20).snapshot("change") == rev2
    _assert_no_secret(store)


# --- run_meta.json ----------------------------------------------------------------------------


def test_a_symlinked_run_meta_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    recorder, _, _, ws = new_recorder(tmp_path)
    cache_entry = tmp_path / "baseline-cache.json"
    original = json.dumps({"gold_answers": SECRET.decode(), "score": 42.0})
    cache_entry.write_text(original)
    (ws / "run_meta.json").unlink()
    (ws / "run_meta.json").symlink_to(cache_entry)
    make_model(ws / "output" / "v1")
    assert recorder.submit({"model_path": "output/v1"})[0] == 200
    meta = ws / "run_meta.json"
    assert not meta.is_symlink() and meta.is_file()
    assert SECRET not in meta.read_bytes() and json.loads(meta.read_text())["last_submit_time"] is not None
    assert cache_entry.read_text() == original  # the link's target was never written
    # A FIFO there does not block the submit either.
    meta.unlink()
    os.mkfifo(meta)
    t0 = time.monotonic()
    assert recorder.submit({"model_path": "output/v1"})[0] == 200
    assert time.monotonic() - t0 < 2.0 and meta.is_file()


# --- the deadline -----------------------------------------------------------------------------


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_reading_that_does_not_finish_before_the_deadline_is_a_409(tmp_path: Path) -> None:
    start = time.time()
    clock = _Clock(start + 10)
    recorder, store, dispatcher, ws = new_recorder(tmp_path, run_start=start, timeout_s=60)
    recorder.clock = clock
    model = make_model(ws / "output" / "v1")
    (model / "model.safetensors").write_bytes(os.urandom(3 << 20))

    calls = 0

    def late() -> float:  # the clock passes the deadline while the weights are being hashed
        nonlocal calls
        calls += 1
        return start + (59 if calls < 3 else 62)

    recorder.clock = late
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 409, reply
    assert "could not be read completely before the deadline; submit earlier" in reply["error"]  # type: ignore[call-overload]
    assert submission_keys(store) == [] and dispatcher.calls == []


class _RewritingStore(LocalStore):
    """Rewrites a workspace file (same inode) and moves the clock past the deadline right when
    the first blob upload starts: the agent's rewrite at T+2 s during the SIGTERM grace."""

    def __init__(self, root: Path, target: Path, clock: _Clock, after: float) -> None:
        super().__init__(root)
        self.target, self.clock, self.after, self.fired = target, clock, after, False

    def put_fileobj_verified(
        self, key: str, f: Reader, sha256: str | None, *, size: int, name: str = ""
    ) -> None:
        if not self.fired and name.endswith("model.safetensors"):
            self.fired = True
            with self.target.open("r+b") as out:
                out.write(b"POST-DEADLINE-" + SECRET)
            self.clock.now = self.after
        super().put_fileobj_verified(key, f, sha256, size=size, name=name)


def test_bytes_rewritten_after_the_deadline_are_never_recorded(tmp_path: Path) -> None:
    start = time.time()
    recorder, _, dispatcher, ws = new_recorder(tmp_path, run_start=start, timeout_s=60)
    model = make_model(ws / "output" / "v1")
    weights = model / "model.safetensors"
    weights.write_bytes(os.urandom(1 << 20))
    clock = _Clock(start + 59)
    store = _RewritingStore(tmp_path / "store2", weights, clock, start + 62)
    recorder.store = store
    recorder.code.store = store
    recorder.clock = clock
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 409, reply
    # The file named is the first one read past the deadline (the rewritten weights, or a file
    # read after them): either way nothing of the submission is recorded.
    assert re.search(  # type: ignore[call-overload]
        r"output/v1/\S+ could not be read completely before the deadline", reply["error"]
    ), reply
    assert store.fired and submission_keys(store) == [] and dispatcher.calls == []
    assert not any(b"POST-DEADLINE" in data for _, data in _store_bytes(store.root))


# --- bad model_path input ---------------------------------------------------------------------


@pytest.mark.parametrize("case", ["loop", "long-name", "long-path", "file-in-path", "not-a-string", "eacces"])
def test_bad_model_paths_are_a_4xx_naming_the_path(case: str, tmp_path: Path) -> None:
    recorder, store, _, ws = new_recorder(tmp_path)
    out = ws / "output"
    body: dict[str, object]
    if case == "loop":
        (out / "loop").symlink_to(out / "loop")
        body, want = {"model_path": "output/loop"}, "output/loop is a symlink"
    elif case == "long-name":
        body, want = {"model_path": "output/" + "x" * 300}, "cannot be read (File name too long)"
    elif case == "long-path":
        body, want = {"model_path": "output/" + "/".join(["y" * 200] * 30)}, "model directory not found"
    elif case == "file-in-path":
        (out / "f").write_text("x")
        body, want = {"model_path": "output/f/v1"}, "not a directory: output/f"
    elif case == "not-a-string":
        body, want = {"model_path": 123}, "model_path must be a string"
    else:
        if os.geteuid() == 0:
            pytest.skip("root ignores permissions")
        make_model(out / "v1")
        (out / "v1").chmod(0)
        body, want = {"model_path": "output/v1"}, "output/v1 cannot be read (Permission denied)"
    try:
        status, reply = recorder.submit(body)
    finally:
        if case == "eacces":
            (out / "v1").chmod(0o755)
    assert 400 <= status < 500 and isinstance(reply, dict), reply
    assert want in reply["error"] and len(reply["error"]) < 400
    assert submission_keys(store) == []


# --- the code watcher's max wait --------------------------------------------------------------


def test_debounce_max_wait_snapshots_while_the_tree_keeps_changing() -> None:
    debounce, due = Debounce(2.0, max_wait_s=10.0), []
    for t in range(30):
        signature = ((f"f{t}", t, t),)  # a different tree at every poll
        if debounce.due(signature, float(t)):
            due.append(t)
            debounce.recorded(signature)
    assert due == [10, 21]  # 10 s after the first change not yet recorded (at 11)


def test_a_file_living_12_s_in_a_busy_code_dir_is_recorded(tmp_path: Path) -> None:
    _, store, _, ws = new_recorder(tmp_path)
    code = ws / "code"
    clock = _Clock(0.0)
    snap = CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1 << 20)
    watcher = CodeWatcher(snap, poll_s=1.0, debounce_s=2.0, max_wait_s=10.0, clock=clock)
    (code / "short.py").write_text("lived 12 s\n")
    for t in range(20):
        clock.now = float(t)
        (code / "busy.py").write_text(f"step = {t}\n" * (t + 1))  # changes at every poll
        if t == 12:
            (code / "short.py").unlink()
        watcher.poll()
    paths = {f["path"] for k in store.list(LAYOUT.revisions) for f in store.get_json(k)["tree"]["files"]}
    assert "short.py" in paths


def test_the_run_cap_on_stored_bytes_is_read_from_the_environment() -> None:
    env = {ENV_RUN_PREFIX: "local/r-1", ENV_WORKSPACE: "/ws", ENV_TASK: "arith", ENV_RUN_TIMEOUT: "60"}
    env[ENV_HELDOUT_PATH] = "/heldout"  # local mode
    assert RecorderConfig.from_env({**env, ENV_MAX_RUN_STORED_BYTES: "123"}).max_run_stored_bytes == 123
    assert RecorderConfig.from_env(env).max_run_stored_bytes == 200 * (1 << 30)
