"""gsm8k and humaneval end to end: the tiny model through `a2rl eval baseline` (the grader path),
under both evaluation protocols."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import stage_artifacts

from a2rl.launch import run_a2rl
from a2rl.store.open import open_store
from tests.support.task_data import make_gsm8k_dir

pytestmark = pytest.mark.slow
LIMIT = 2


def _heldout(task: str, root: Path) -> Path:
    source = str(make_gsm8k_dir(root / "src")) if task == "gsm8k" else None
    return stage_artifacts(get_task(task), source=source, root=root / "staged").heldout_dir


def _baseline(
    tmp_path: Path, task: str, model_dir: Path, heldout: Path, protocol: str = "reference"
) -> tuple[int, dict, Path]:
    store_uri = (tmp_path / "store").as_uri()
    prefix = f"local/e2e{task}-abc123def456"
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    proc = run_a2rl(
        ["eval", "baseline", "--store", store_uri, "--run-prefix", prefix, "--task", task,
         "--model-dir", str(model_dir), "--heldout", str(heldout), "--backend", "transformers",
         "--limit", str(LIMIT), "--protocol", protocol],
        env=env, timeout_s=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    sub = tmp_path / "store" / prefix / "submissions" / "00000"
    return proc.returncode, json.loads((sub / "result.json").read_text()), sub


@pytest.mark.parametrize("protocol", ["reference", "a2rl"])
@pytest.mark.parametrize("task", ["gsm8k", "humaneval"])
def test_tiny_model_end_to_end(task: str, protocol: str, tiny_model: Path, tmp_path: Path) -> None:
    heldout = _heldout(task, tmp_path / "data")
    _, result, sub = _baseline(tmp_path, task, tiny_model, heldout, protocol)
    assert result["error"] is None
    assert result["task"] == task and result["n"] == LIMIT
    assert result["evaluator_version"] == get_task(task, protocol=protocol).evaluator_version  # type: ignore[arg-type]
    assert result["evaluator_version"].endswith(f"+{protocol}")
    assert result["backend"] == "transformers"
    assert 0.0 <= result["score"] <= 100.0
    details = [json.loads(x) for x in (sub / "details.jsonl").read_text().splitlines()]
    assert len(details) == LIMIT
    # The tiny model has a chat template, so the chat form is used.
    assert all(d["mode"] == "chat" for d in details)
    if task == "humaneval":
        assert all(d["status"] in {"passed", "failed", "timeout", "exited_early"} for d in details)
    else:
        assert all("gold" in d and "prediction" in d for d in details)
    # Cached under the task, model and evaluator version (local mode adds the held-out digest
    # and the signing key's fingerprint: docs/local-mode.md).
    version = f"{get_task(task, protocol=protocol).evaluator_version}+limit{LIMIT}"  # type: ignore[arg-type]
    store = open_store((tmp_path / "store").as_uri())
    cached = list(store.list(f"baselines/{task}/{result['model_digest']}/"))
    assert [k.rsplit("/", 1)[1].startswith(version + "-data-") for k in cached] == [True], cached


def test_unloadable_model_is_an_error_result(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "vocab_size": "many"}')
    heldout = _heldout("humaneval", tmp_path / "data")
    _, result, _ = _baseline(tmp_path, "humaneval", broken, heldout)
    assert result["score"] is None
    assert result["error"] and "could not be loaded" in result["error"]
