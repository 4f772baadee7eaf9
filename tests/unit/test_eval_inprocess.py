"""Eval building blocks in-process: load errors become results; failed baselines are not cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_grader.baseline import baseline_cache_key, evaluate_baseline
from a2rl_grader.evaluate import EvalOptions, evaluate_model_dir
from a2rl_tasks import get_task
from a2rl_tasks.base import StagedData

from a2rl.errors import A2rlError
from a2rl.store.cas import hash_tree
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store

OPTIONS = EvalOptions(backend="transformers", limit=4)


@pytest.fixture(scope="module")
def heldout(staged_arith: StagedData) -> Path:
    return staged_arith.heldout_dir


def test_lora_adapter_is_reported_to_the_agent(tmp_path: Path, heldout: Path) -> None:
    (tmp_path / "adapter_config.json").write_text("{}")
    fields, details = evaluate_model_dir(get_task("arith"), tmp_path, heldout, OPTIONS)
    assert fields.score is None and details == []
    assert (fields.error or "").startswith("model could not be loaded: LoRA adapter detected")
    assert fields.finished_at is not None and fields.started_at is not None
    assert fields.finished_at >= fields.started_at


def test_failed_baseline_is_not_cached(tmp_path: Path, heldout: Path) -> None:
    model = tmp_path / "broken"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    store = open_store(str(tmp_path / "store"))
    layout = RunLayout("local", "r", "0123456789ab")
    task = get_task("arith")
    result = evaluate_baseline(store, layout, task, model, heldout, options=OPTIONS)
    assert result.cached is False and result.score is None and result.error
    assert not store.exists(baseline_cache_key(task, hash_tree(model).digest, OPTIONS.limit))
    assert store.get_json(layout.submission_result(0))["error"] == result.error


def test_missing_heldout_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(A2rlError, match="held-out data directory not found"):
        evaluate_baseline(
            open_store(str(tmp_path / "store")),
            RunLayout("local", "r", "0123456789ab"),
            get_task("arith"),
            tmp_path,
            tmp_path / "nope",
            options=OPTIONS,
        )
