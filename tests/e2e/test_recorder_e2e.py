"""The real LocalDispatcher end to end: the recorder runs `a2rl eval submission` on the tiny model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from a2rl_recorder.dispatch import LocalDispatcher
from a2rl_recorder.service import Recorder
from a2rl_tasks.base import StagedData

from a2rl.store.cas import hash_tree
from a2rl.store.local import LocalStore
from tests.support.recorder_support import LAYOUT, make_config, make_workspace

pytestmark = pytest.mark.slow

LIMIT = 8


def test_local_dispatcher_runs_the_real_eval_process(
    tmp_path: Path, tiny_model: Path, staged_arith: StagedData
) -> None:
    tiny, staged = tiny_model, staged_arith
    ws = make_workspace(tmp_path)
    shutil.copytree(tiny, ws / "output" / "v1")
    broken = ws / "output" / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (broken / "model.safetensors").write_bytes(b"not weights")

    store = LocalStore(tmp_path / "store")
    dispatcher = LocalDispatcher(
        store,
        LAYOUT,
        task="arith",
        heldout=staged.heldout_dir,
        backend="transformers",
        limit=LIMIT,
        timeout_s=600,
    )
    recorder = Recorder(make_config(ws), store, dispatcher)

    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 200, reply
    assert isinstance(reply, dict) and reply["submission_id"] == 1 and "error" not in reply
    assert reply["score"] is not None and 0.0 <= reply["score"] <= 100.0
    result = store.get_json(LAYOUT.submission_result(1))
    assert result["n"] == LIMIT and result["model_digest"] == hash_tree(tiny).digest
    assert store.exists(LAYOUT.log("eval-00001"))

    # An unloadable model is a result with an error, and the recorder carries on.
    status, reply = recorder.submit({"model_path": "output/broken"})
    assert status == 200 and isinstance(reply, dict)
    assert reply["submission_id"] == 2 and reply["score"] is None and reply["error"]
    assert reply["best"]["submission_id"] == 1 and reply["total_submissions"] == 2
