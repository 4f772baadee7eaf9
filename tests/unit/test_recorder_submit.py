"""POST /submit semantics at the service level: rejections record nothing; good submits snapshot."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from a2rl_recorder.snapshots import CodeSnapshotter

from a2rl.store.cas import hash_tree
from tests.support.recorder_support import LAYOUT, make_model, new_recorder, submission_keys, write_baseline


def _lora(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    (path / "adapter_model.safetensors").write_bytes(b"lora")
    return path


def _setup_bad(case: str, ws: Path, outside: Path) -> str:
    """Create the situation of `case` in workspace `ws`; return the model_path to submit."""
    outside.mkdir(exist_ok=True)
    make_model(outside / "model")
    if case == "absolute-outside":
        return str(outside / "model")
    if case == "dotdot":
        return "output/../../outside/model"
    if case == "dotdot-inside":
        make_model(ws / "code" / "m")
        return "output/../code/m"
    if case == "not-under-output":
        make_model(ws / "code" / "m")
        return "code/m"
    if case == "symlink-dir-outside":
        (ws / "output" / "link").symlink_to(outside / "model")
        return "output/link"
    if case == "symlink-file-outside":
        model = make_model(ws / "output" / "v1")
        (model / "tokenizer.json").symlink_to(outside / "model" / "config.json")
        return "output/v1"
    if case == "symlink-file-inside":
        model = make_model(ws / "output" / "v1")
        (model / "extra.json").symlink_to(model / "config.json")
        return "output/v1"
    if case == "output-is-symlink":
        (ws / "output").rmdir()
        (ws / "output").symlink_to(outside)
        return "output/model"
    if case == "missing":
        return "output/nope"
    if case == "empty":
        (ws / "output" / "empty" / "sub").mkdir(parents=True)
        return "output/empty"
    if case == "not-a-model":
        (ws / "output" / "v1").mkdir()
        (ws / "output" / "v1" / "notes.txt").write_text("hi")
        return "output/v1"
    if case == "lora":
        _lora(ws / "output" / "lora")
        return "output/lora"
    if case == "file":
        (ws / "output" / "f.bin").write_bytes(b"x")
        return "output/f.bin"
    if case == "nul":
        return "output/v\x001"
    raise AssertionError(case)


BAD_CASES = {
    "absolute-outside": (400, "inside the workspace's output/"),
    "dotdot": (400, "must not contain '..'"),
    "dotdot-inside": (400, "must not contain '..'"),
    "not-under-output": (400, "inside the workspace's output/"),
    "symlink-dir-outside": (400, "symlink pointing outside the workspace"),
    "symlink-file-outside": (400, "output/v1/tokenizer.json is a symlink pointing outside the workspace"),
    "symlink-file-inside": (400, "output/v1/extra.json is a symlink; snapshots store regular files only"),
    "output-is-symlink": (400, "output is a symlink pointing outside the workspace"),
    "missing": (404, "model directory not found: output/nope"),
    "empty": (400, "model directory is empty"),
    "not-a-model": (400, "not a model directory (no config.json)"),
    "lora": (400, "LoRA adapter"),
    "file": (400, "not a directory"),
    "nul": (400, "NUL byte"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_model_paths_are_rejected_and_record_nothing(case: str, tmp_path: Path) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path)
    model_path = _setup_bad(case, ws, tmp_path / "outside")
    status, body = recorder.submit({"model_path": model_path})
    want_status, want_text = BAD_CASES[case]
    assert status == want_status, body
    assert isinstance(body, dict) and want_text in body["error"]
    assert "\n" not in body["error"]
    assert submission_keys(store) == []
    assert list(store.list(LAYOUT.blobs)) == []
    assert dispatcher.calls == []


@pytest.mark.parametrize(
    ("body", "text"),
    [({}, "Missing model_path"), ({"model_path": ""}, "Missing model_path"),
     ({"model_path": 3}, "model_path must be a string"), ({"model_path": None}, "Missing model_path"),
     ([1, 2], "JSON object"), ("output/v1", "JSON object")],
)  # fmt: skip
def test_malformed_requests(body: object, text: str, tmp_path: Path) -> None:
    recorder, store, _, _ = new_recorder(tmp_path)
    status, reply = recorder.submit(body)
    assert status == 400 and isinstance(reply, dict) and text in reply["error"]
    assert submission_keys(store) == []


def test_size_limit(tmp_path: Path) -> None:
    recorder, store, _, ws = new_recorder(tmp_path, max_model_bytes=100)
    make_model(ws / "output" / "big", extra=b"x" * 200)
    status, reply = recorder.submit({"model_path": "output/big"})
    assert status == 413 and "larger than the limit" in reply["error"]  # type: ignore[call-overload]
    assert submission_keys(store) == []


def test_max_submissions(tmp_path: Path) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path, max_submissions=2)
    make_model(ws / "output" / "v1")
    assert recorder.submit({"model_path": "output/v1"})[0] == 200
    assert recorder.submit({"model_path": "output/v1"})[0] == 200
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 429 and "maximum number of submissions reached (2)" in reply["error"]  # type: ignore[call-overload]
    assert dispatcher.calls == [1, 2]
    assert not store.exists(LAYOUT.submission_manifest(3))


def test_deadline_passed(tmp_path: Path) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path, run_start=time.time() - 100, timeout_s=50)
    make_model(ws / "output" / "v1")
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 403 and "time budget is used up" in reply["error"]  # type: ignore[call-overload]
    assert submission_keys(store) == [] and dispatcher.calls == []


def test_good_submit_snapshots_model_and_code(tmp_path: Path) -> None:
    recorder, store, _dispatcher, ws = new_recorder(tmp_path, base_model_digest="c" * 64)
    write_baseline(store, 5.0)
    (ws / "code" / "train.py").write_text("print('train')\n")
    make_model(ws / "output" / "v1", score=42.5)
    status, reply = recorder.submit({"model_path": str(ws / "output" / "v1")})  # absolute inside: fine
    assert status == 200, reply
    assert isinstance(reply, dict)
    assert reply["submission_id"] == 1 and reply["score"] == 42.5
    assert reply["baseline_score"] == 5.0 and reply["improvement"] == 37.5
    assert reply["best"] == {"submission_id": 1, "score": 42.5}
    assert reply["total_submissions"] == 1 and "error" not in reply
    assert reply["elapsed_seconds"] >= 0

    manifest = store.get_json(LAYOUT.submission_manifest(1))
    assert manifest["model_path"] == "output/v1"
    assert manifest["model_digest"] == hash_tree(ws / "output" / "v1").digest == manifest["model"]["digest"]
    assert manifest["identical_to_base"] is False and manifest["base_model_digest"] == "c" * 64
    assert manifest["request"] == {"model_path": str(ws / "output" / "v1")}
    assert manifest["code_revision"] == 1
    revision = store.get_json(LAYOUT.revision(1))
    assert revision["reason"] == "submit"
    assert revision["digest"] == manifest["code_digest"] == hash_tree(ws / "code").digest
    assert store.get_json(LAYOUT.submission_result(1))["score"] == 42.5
    assert json.loads((ws / "run_meta.json").read_text())["last_submit_time"] >= int(time.time()) - 5

    # A second, worse submission with unchanged code: best stays, code revision is reused.
    make_model(ws / "output" / "v2", score=12.0)
    status, reply = recorder.submit({"model_path": "output/v2"})
    assert isinstance(reply, dict)
    assert reply["submission_id"] == 2 and reply["best"] == {"submission_id": 1, "score": 42.5}
    assert reply["total_submissions"] == 2 and reply["improvement"] == 7.0
    assert store.get_json(LAYOUT.submission_manifest(2))["code_revision"] == 1
    assert list(store.list(LAYOUT.revisions)) == [LAYOUT.revision(1)]


def test_best_comes_from_the_store_not_the_workspace(tmp_path: Path) -> None:
    recorder, _store, _, ws = new_recorder(tmp_path)
    make_model(ws / "output" / "v1", score=20.0)
    recorder.submit({"model_path": "output/v1"})
    (ws / "scores.json").write_text(json.dumps([{"submission_id": 1, "score": 100.0}]))
    (ws / "run_meta.json").write_text("not json")
    make_model(ws / "output" / "v2", score=3.0)
    _, reply = recorder.submit({"model_path": "output/v2"})
    assert isinstance(reply, dict) and reply["best"] == {"submission_id": 1, "score": 20.0}
    _status, listing = recorder.submissions()
    assert [(s["submission_id"], s["score"]) for s in listing] == [(1, 20.0), (2, 3.0)]  # type: ignore[index]
    assert json.loads((ws / "run_meta.json").read_text())["last_submit_time"] is not None


def test_identical_to_base_copies_the_baseline_result(tmp_path: Path) -> None:
    base = make_model(tmp_path / "base", score=99.0)
    recorder, store, dispatcher, ws = new_recorder(tmp_path, base_model_digest=hash_tree(base).digest)
    write_baseline(store, 1.5, hash_tree(base).digest)
    make_model(ws / "output" / "copy", score=99.0)
    status, reply = recorder.submit({"model_path": "output/copy"})
    assert status == 200 and isinstance(reply, dict)
    assert reply["score"] == 1.5 and reply["improvement"] == 0.0
    assert dispatcher.calls == []
    result = store.get_json(LAYOUT.submission_result(1))
    assert result["copied_from_baseline"] is True and result["index"] == 1
    assert store.get_json(LAYOUT.submission_manifest(1))["identical_to_base"] is True


def test_concurrent_submits_get_distinct_numbers_and_one_eval_at_a_time(tmp_path: Path) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path)
    dispatcher.delay_s = 0.02
    for i in range(6):
        make_model(ws / "output" / f"v{i}", score=float(i))
    replies: list[dict[str, object]] = []
    lock = threading.Lock()

    def go(i: int) -> None:
        status, reply = recorder.submit({"model_path": f"output/v{i}"})
        assert status == 200
        with lock:
            replies.append(reply)  # type: ignore[arg-type]

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["submission_id"] for r in replies) == [1, 2, 3, 4, 5, 6]  # type: ignore[type-var]
    assert sorted(dispatcher.calls) == [1, 2, 3, 4, 5, 6]
    assert dispatcher.max_active == 1
    scores = {store.get_json(LAYOUT.submission_manifest(i))["model_path"] for i in range(1, 7)}
    assert scores == {f"output/v{i}" for i in range(6)}


def test_numbering_continues_after_a_restart(tmp_path: Path) -> None:
    recorder, store, dispatcher, ws = new_recorder(tmp_path)
    make_model(ws / "output" / "v1")
    recorder.submit({"model_path": "output/v1"})
    from a2rl_recorder.service import Recorder

    again = Recorder(recorder.config, store, dispatcher)
    _, reply = again.submit({"model_path": "output/v1"})
    assert isinstance(reply, dict) and reply["submission_id"] == 2 and reply["total_submissions"] == 2


def test_failing_dispatcher_is_a_result_with_an_error(tmp_path: Path) -> None:
    recorder, _store, dispatcher, ws = new_recorder(tmp_path)

    def boom(index: int) -> dict[str, object]:
        raise RuntimeError("eval infrastructure down")

    dispatcher.evaluate = boom  # type: ignore[method-assign]
    make_model(ws / "output" / "v1")
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 200 and isinstance(reply, dict)
    assert reply["score"] is None and "evaluation failed" in reply["error"]
    assert reply["best"] is None and reply["total_submissions"] == 1
    listing = recorder.submissions()[1]
    assert listing[0]["error"] == reply["error"]  # type: ignore[index]


def test_code_snapshot_skips_caches_and_huge_files(tmp_path: Path) -> None:
    _, store, _, ws = new_recorder(tmp_path)
    code = ws / "code"
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    (code / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"x")
    (code / "pkg" / "m.py").write_text("x = 1\n")
    (code / "ckpt.bin").write_bytes(os.urandom(2048))
    snap = CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1024)
    rev = snap.snapshot("change")
    assert rev is not None and rev.index == 1
    data = store.get_json(LAYOUT.revision(1))
    assert [f["path"] for f in data["tree"]["files"]] == ["pkg/m.py"]
    assert data["skipped"] == ["ckpt.bin"]
    assert snap.snapshot("change") == rev  # unchanged: no new revision
    assert CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1024).latest == rev
