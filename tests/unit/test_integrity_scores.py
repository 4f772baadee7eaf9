"""Scores the runner can trust: results are sealed with the run's key and checked on every read.

A hostile agent (same user, `--no-sandbox`) rewrites the store; these tests do what it did, on a
real LocalStore, and read the scores the way GET /submissions (a real `a2rl recorder serve`
started through `RecorderProcess`, the key through its stdin), the runner's summary and the
report read them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
from a2rl_grader.report.write import REPORT_JSON, REPORT_MD, report_key, write_report
from a2rl_recorder.dispatch import LocalDispatcher
from a2rl_recorder.service import Recorder
from a2rl_runner.run import _final_scores, _Prepared, _report
from a2rl_runner.services import RecorderProcess, free_port
from a2rl_tasks.base import StagedData

from a2rl import integrity
from a2rl.records.base import write_record
from a2rl.records.result import TAMPERED_ERROR, ResultRecord, checked_result, seal_result
from a2rl.records.submission import SubmissionManifest
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from tests.support.recorder_support import LAYOUT, PREFIX, make_config, make_workspace
from tests.support.report_runs import RunWriter

SCORES = {0: 10.0, 1: 50.0, 2: 20.0, 3: 30.0, 4: 5.0}


def _record_run(store: ObjectStore, key: bytes, layout: RunLayout = LAYOUT) -> None:
    """What the trusted side writes: run.json, and a manifest, result.json and its seal per submission."""
    base_dir = Path(tempfile.mkdtemp(prefix="a2rl-test-base-"))
    RunWriter(cast(LocalStore, store), base_dir, name=layout.name, uid=layout.uid).run_json()
    shutil.rmtree(base_dir)
    for index, score in SCORES.items():
        write_record(
            store,
            layout.submission_manifest(index),
            SubmissionManifest(
                index=index, submitted_at=f"2026-01-01T00:00:0{index}Z", model_digest="d" * 64
            ),
        )
        result = ResultRecord(
            index=index, task="arith", score=score, error=None, n=10, correct=int(score / 10)
        )
        write_record(store, layout.submission_result(index), result)
        seal_result(store, layout, index, result, key)


def _tamper(store: ObjectStore, layout: RunLayout = LAYOUT) -> None:
    """The agent's three rewrites: 2 gets 100 with its seal kept; 3 loses its seal; 4 becomes a copy of 1."""
    doc = store.get_json(layout.submission_result(2))
    store.put_json(layout.submission_result(2), {**doc, "score": 100.0})
    store.delete(layout.submission_seal(3))
    store.put_bytes(layout.submission_result(4), store.get_bytes(layout.submission_result(1)))
    store.put_bytes(layout.submission_seal(4), store.get_bytes(layout.submission_seal(1)))


def test_sign_and_verify_bind_the_context() -> None:
    key = integrity.new_key()
    data = {"score": 50.0, "index": 1}
    mac = integrity.sign(key, ("result", PREFIX, "1"), data)
    assert integrity.verify(key, mac, ("result", PREFIX, "1"), data)
    assert not integrity.verify(key, mac, ("result", PREFIX, "2"), data)  # another index
    assert not integrity.verify(key, mac, ("result", PREFIX, "1"), {**data, "score": 100.0})
    assert not integrity.verify(integrity.new_key(), mac, ("result", PREFIX, "1"), data)
    assert not integrity.verify(key, None, ("result", PREFIX, "1"), data)
    assert integrity.parse_key_line(integrity.key_line(key)) == key


def test_checked_result_flags_each_tamper(tmp_path: Path) -> None:
    store, key = LocalStore(tmp_path / "store"), integrity.new_key()
    _record_run(store, key)
    _tamper(store)
    scores = {i: checked_result(store, LAYOUT, i, key) for i in SCORES}
    assert {i: r.score for i, r in scores.items() if r is not None} == {
        0: 10.0,
        1: 50.0,
        2: None,
        3: None,
        4: None,
    }
    assert [i for i, r in scores.items() if r is not None and r.error == TAMPERED_ERROR] == [2, 3, 4]
    # Without a key (cluster mode) results are read as stored.
    unchecked = checked_result(store, LAYOUT, 2, None)
    assert unchecked is not None and unchecked.score == 100.0


def _recorder_env(ws: Path, store: Path, heldout: Path, port: int) -> dict[str, str]:
    return {
        "A2RL_RECORDER_PORT": str(port),
        **os.environ,
        "A2RL_STORE_URI": store.as_uri(),
        "A2RL_RUN_PREFIX": PREFIX,
        "WORKSPACE": str(ws),
        "TASK": "arith",
        "A2RL_RUN_START": str(time.time()),
        "A2RL_RUN_TIMEOUT": "600",
        "A2RL_HELDOUT_PATH": str(heldout),
        "A2RL_RECORDER_DRAIN_TIMEOUT": "5",
    }


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_get_submissions_of_a_real_recorder_never_scores_a_tamper(tmp_path: Path) -> None:
    """The key reaches `a2rl recorder serve` through its stdin only: not in /proc/<pid>/environ
    or its command line, and the recorder checks every result with it."""
    store_dir, key = tmp_path / "store", integrity.new_key()
    store = LocalStore(store_dir)
    _record_run(store, key)
    _tamper(store)
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    ws = make_workspace(tmp_path)
    port = free_port()
    recorder = RecorderProcess(
        _recorder_env(ws, store_dir, heldout, port), port, tmp_path / "recorder.log", run_key=key
    )
    recorder.start(health_timeout=30)
    try:
        assert recorder.pid is not None
        proc = Path(f"/proc/{recorder.pid}")
        for name in ("environ", "cmdline"):
            raw = (proc / name).read_bytes()
            assert key.hex().encode() not in raw and key not in raw, name
        entries = recorder.submissions()
    finally:
        recorder.stop(30)
    assert entries is not None
    by_id = {e["submission_id"]: e for e in entries}
    assert by_id[1]["score"] == 50.0 and by_id[1]["error"] is None
    for tampered in (2, 3, 4):
        assert by_id[tampered]["score"] is None and by_id[tampered]["error"] == TAMPERED_ERROR


def _prepared(store: ObjectStore, key: bytes) -> _Prepared:
    """The runner's state with what `_final_scores` and `_report` read (store, layout, key)."""
    none = cast(Any, None)
    return _Prepared(
        run=none,
        layout=LAYOUT,
        store=store,
        task_name="arith",
        evaluator_version="arith-1",
        model_dir=none,
        model_digest="d" * 64,
        heldout_dir=none,
        train_dir=none,
        argv=[],
        logs_dir=none,
        run_key=key,
    )


def test_runner_summary_and_report_never_score_a_tamper(tmp_path: Path) -> None:
    store, key = LocalStore(tmp_path / "store"), integrity.new_key()
    _record_run(store, key)
    _tamper(store)
    prep = _prepared(store, key)
    said: list[str] = []
    report, _uri = _report(prep, said.append)
    scores = _final_scores(prep)
    # The summary: best 50 (submission 1), never the rewritten 100; the tampered ones are named.
    assert scores.best_score == 50.0 and scores.best_submission == 1
    assert scores.valid_submissions == 1 and scores.submissions == 4
    for index in (2, 3, 4):
        assert f"[a2rl] warning: submission {index}: {TAMPERED_ERROR}" in said
    # The report: the same scores, and one line per tampered result.
    assert report is not None and report.best_score == 50.0
    doc = json.loads(store.get_bytes(report_key(LAYOUT, REPORT_JSON)))
    errors = {s["index"]: s["error"] for s in doc["submissions"]}
    assert errors == {1: None, 2: TAMPERED_ERROR, 3: TAMPERED_ERROR, 4: TAMPERED_ERROR}
    markdown = store.get_bytes(report_key(LAYOUT, REPORT_MD)).decode()
    assert f"submission 2: {TAMPERED_ERROR}" in markdown and "100.0" not in markdown


def test_a_tampered_baseline_gives_no_baseline_score(tmp_path: Path) -> None:
    store, key = LocalStore(tmp_path / "store"), integrity.new_key()
    _record_run(store, key)
    doc = store.get_json(LAYOUT.submission_result(0))
    store.put_json(LAYOUT.submission_result(0), {**doc, "score": 0.0})  # makes every submission look better
    report = write_report(store, LAYOUT, run_key=key)
    assert report.baseline_score is None
    assert f"submission 0: {TAMPERED_ERROR}" in store.get_bytes(report_key(LAYOUT, REPORT_MD)).decode()
    assert _final_scores(_prepared(store, key)).baseline_score is None


def test_report_without_a_key_reads_results_as_stored(tmp_path: Path) -> None:
    """Cluster mode (no key): nothing is checked, nothing is flagged."""
    store, key = LocalStore(tmp_path / "store"), integrity.new_key()
    _record_run(store, key)
    shutil.rmtree(tmp_path / "store" / LAYOUT.submission_dir(3))  # a missing submission is not a tamper
    report = write_report(store, LAYOUT)
    assert report.best_score == 50.0
    assert TAMPERED_ERROR not in store.get_bytes(report_key(LAYOUT, REPORT_MD)).decode()


@pytest.mark.slow
def test_the_recorder_seals_what_its_eval_process_reported(
    tmp_path: Path, tiny_model: Path, staged_arith: StagedData
) -> None:
    """A real eval process (`a2rl eval submission`): the recorder seals the result the process
    printed on its stdout; a later rewrite of result.json is never scored."""
    store, key = LocalStore(tmp_path / "store"), integrity.new_key()
    ws = make_workspace(tmp_path)
    shutil.copytree(tiny_model, ws / "output" / "v1")
    dispatcher = LocalDispatcher(
        store, LAYOUT, task="arith", heldout=staged_arith.heldout_dir, backend="transformers", limit=2,
        timeout_s=300, key=key,
    )  # fmt: skip
    recorder = Recorder(make_config(ws, run_key=key), store, dispatcher)
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 200 and isinstance(reply, dict) and reply["score"] is not None, reply
    checked = checked_result(store, LAYOUT, 1, key)
    assert checked is not None and checked.score == reply["score"] and not checked.tampered
    assert not recorder.state.evaluating
    doc = store.get_json(LAYOUT.submission_result(1))
    store.put_json(LAYOUT.submission_result(1), {**doc, "score": 100.0})
    _, entries = recorder.submissions()
    assert isinstance(entries, list)
    assert entries[0]["score"] is None and entries[0]["error"] == TAMPERED_ERROR


class _SealingDispatcher:
    """Like the real one: result.json is in the store before the dispatcher seals it; `written`
    is set in between and the seal waits for `release`."""

    def __init__(self, store: ObjectStore, key: bytes) -> None:
        self.store, self.key = store, key
        self.written, self.release = threading.Event(), threading.Event()

    def evaluate(self, index: int) -> ResultRecord:
        result = ResultRecord(index=index, task="arith", score=60.0, error=None)
        write_record(self.store, LAYOUT.submission_result(index), result)
        self.written.set()
        self.release.wait(30)
        seal_result(self.store, LAYOUT, index, result, self.key)
        return result


def test_a_result_being_sealed_is_pending_not_tampered(tmp_path: Path) -> None:
    store, key = LocalStore(tmp_path / "store"), integrity.new_key()
    ws = make_workspace(tmp_path)
    (ws / "output" / "v1").mkdir()
    (ws / "output" / "v1" / "config.json").write_text("{}")
    dispatcher = _SealingDispatcher(store, key)
    recorder = Recorder(make_config(ws, run_key=key), store, dispatcher)
    replies: list[Any] = []
    thread = threading.Thread(target=lambda: replies.append(recorder.submit({"model_path": "output/v1"})))
    thread.start()
    try:
        assert dispatcher.written.wait(30)
        _, entries = recorder.submissions()
        assert isinstance(entries, list) and entries[0]["score"] is None and entries[0]["error"] is None
    finally:
        dispatcher.release.set()
        thread.join(30)
    assert replies[0][0] == 200 and replies[0][1]["score"] == 60.0
    _, entries = recorder.submissions()
    assert isinstance(entries, list) and entries[0]["score"] == 60.0
