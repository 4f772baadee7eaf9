"""Shared pieces of the recorder tests (no tests here): a workspace, model dirs, a test dispatcher.

`StoreBackedDispatcher` stands in for the grader's eval *process* (the real one is exercised in
test_recorder_e2e.py): like the real one it restores the submitted snapshot from the store
into a fresh directory and writes a real result.json; its "score" is read from a `score.txt`
file of the model, so tests choose scores by writing models.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from a2rl_recorder.config import RecorderConfig
from a2rl_recorder.service import Recorder

from a2rl.records.base import write_record
from a2rl.records.result import ResultRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import TreeManifest, restore_tree
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore

PREFIX = "local/test-run-0123456789ab"
LAYOUT = RunLayout.from_prefix(PREFIX)


def make_workspace(root: Path) -> Path:
    ws = root / "ws"
    for sub in ("code", "output", "models/tiny", "data"):
        (ws / sub).mkdir(parents=True)
    (ws / "run_meta.json").write_text(
        json.dumps({"start_time": 1, "timeout_s": 60, "last_submit_time": None})
    )
    return ws


def make_model(path: Path, score: float = 10.0, *, extra: bytes = b"") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (path / "model.safetensors").write_bytes(b"weights" + extra)
    (path / "score.txt").write_text(str(score))
    return path


def make_config(ws: Path, **overrides: Any) -> RecorderConfig:
    config = RecorderConfig(
        store_uri=None,
        run_prefix=PREFIX,
        workspace=ws,
        task="arith",
        run_start=time.time(),
        timeout_s=3600.0,
        port=0,
        code_poll_s=0.05,
        code_debounce_s=0.3,
        drain_timeout_s=10.0,
    )
    return replace(config, **overrides)


class StoreBackedDispatcher:
    """Evaluates by restoring the snapshot from the store and reading its `score.txt`."""

    def __init__(self, store: ObjectStore, layout: RunLayout = LAYOUT, *, delay_s: float = 0.0) -> None:
        self.store = store
        self.layout = layout
        self.delay_s = delay_s
        self.calls: list[int] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def evaluate(self, index: int) -> ResultRecord:
        with self._lock:
            self.calls.append(index)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.started.set()
        try:
            self.release.wait()
            time.sleep(self.delay_s)
            manifest = self.store.get_json(self.layout.submission_manifest(index))
            tmp = Path(tempfile.mkdtemp())
            try:
                restore_tree(self.store, self.layout, TreeManifest.from_json(manifest["model"]), tmp / "m")
                score = float((tmp / "m" / "score.txt").read_text())
            finally:
                shutil.rmtree(tmp)
            result = ResultRecord(
                index=index, task="arith", score=score, error=None, model_digest=manifest["model_digest"]
            )
            write_record(self.store, self.layout.submission_result(index), result)
            return result
        finally:
            with self._lock:
                self.active -= 1


def write_baseline(store: ObjectStore, score: float, digest: str = "b" * 64) -> None:
    store.put_json(
        LAYOUT.submission_manifest(0), {"index": 0, "model_digest": digest, "identical_to_base": True}
    )
    store.put_json(
        LAYOUT.submission_result(0),
        {"index": 0, "task": "arith", "score": score, "error": None, "model_digest": digest},
    )


def new_recorder(
    tmp_path: Path, **overrides: Any
) -> tuple[Recorder, LocalStore, StoreBackedDispatcher, Path]:
    ws = make_workspace(tmp_path)
    store = LocalStore(tmp_path / "store")
    dispatcher = StoreBackedDispatcher(store)
    return Recorder(make_config(ws, **overrides), store, dispatcher), store, dispatcher, ws


def submission_keys(store: ObjectStore) -> list[str]:
    return list(store.list(LAYOUT.submissions))
