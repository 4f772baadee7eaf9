"""alfworld end to end: the tiny model plays generated games through `a2rl eval baseline`.

The same grader path as a real submission (a fresh eval process, the transformers backend,
result + details in the store, the baseline cache), with 2 games and a 2-step limit
(`A2RL_ALFWORLD_MAX_STEPS`, which versions the result separately from the 50-step protocol).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import stage_artifacts

from a2rl.constants import ENV_ALFWORLD_MAX_STEPS
from a2rl.launch import run_a2rl
from a2rl.store.open import open_store

pytestmark = pytest.mark.slow
GAMES = 2
STEPS = 2


def test_tiny_model_plays_alfworld_through_the_grader(tmp_path: Path, tiny_model: Path) -> None:
    tiny = tiny_model
    staged = stage_artifacts(
        get_task("alfworld"), source=f"generated:train=1,heldout={GAMES}", root=tmp_path / "data"
    )
    store_uri = (tmp_path / "store").as_uri()
    prefix = "local/e2ealfworld-abc123def456"
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), **{ENV_ALFWORLD_MAX_STEPS: str(STEPS)})
    proc = run_a2rl(
        ["eval", "baseline", "--store", store_uri, "--run-prefix", prefix, "--task", "alfworld",
         "--model-dir", str(tiny), "--heldout", str(staged.heldout_dir), "--backend", "transformers",
         "--limit", str(GAMES)],
        env=env, timeout_s=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    sub = tmp_path / "store" / prefix / "submissions" / "00000"
    result = json.loads((sub / "result.json").read_text())
    assert result["error"] is None
    assert result["task"] == "alfworld" and result["n"] == GAMES and result["backend"] == "transformers"
    assert result["evaluator_version"] == f"alfworld-1+reference+steps{STEPS}"
    assert 0.0 <= result["score"] <= 100.0
    # Batched: both games share each generation call, so one call per step.
    assert result["metrics"]["generate_calls"] <= STEPS and result["metrics"]["max_steps"] == STEPS
    details = [json.loads(x) for x in (sub / "details.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (staged.heldout_dir / "heldout.jsonl").read_text().splitlines()]
    assert [d["id"] for d in details] == [h["id"] for h in held]
    for d, h in zip(details, held, strict=True):
        assert d["opening"] == h["observation"]
        assert d["steps"] == len(d["actions"]) == len(d["observations"]) <= STEPS
        assert d["won"] or d["steps"] == STEPS
        assert len(d["prediction"].split("\n")) == d["steps"]
    digest = result["model_digest"]
    version = f"alfworld-1+reference+steps{STEPS}+limit{GAMES}"
    cached = list(open_store(store_uri).list(f"baselines/alfworld/{digest}/"))
    assert [k.rsplit("/", 1)[1].startswith(version + "-data-") for k in cached] == [True], cached
