"""A judge task's real eval process (`a2rl eval baseline`, alpacaeval, the tiny model) in the box
the runner gives it: its judge client reaches the loopback judge on the host through the box's
egress proxy, and the evaluation is scored as it is unboxed. The judge cache is read-only in the
box (`a2rl.eval_view`): replies are used, not kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from a2rl_grader.sandbox import baseline_box
from a2rl_tasks.alpacaeval import AlpacaEvalTask
from a2rl_tasks.artifacts import stage_artifacts

from a2rl.eval_sandbox import find_bwrap
from a2rl.launch import run_a2rl
from tests.support.judge_server import JudgeServer
from tests.support.task_data import make_alpaca_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap cannot create namespaces here"),
]
LIMIT = 2


def test_a_boxed_judge_task_is_scored_through_the_egress_proxy(tiny_model: Path, tmp_path: Path) -> None:
    src = make_alpaca_dir(tmp_path / "src", n_eval=4)
    heldout = stage_artifacts(AlpacaEvalTask(), source=str(src), root=tmp_path / "staged").heldout_dir
    store = tmp_path / "store"
    prefix = "local/e2e-egress-abc123def456"
    with JudgeServer() as judge:
        env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_JUDGE_")}
        env.update(judge.env(), A2RL_JUDGE_CACHE_DIR=str(tmp_path / "judge-cache"))
        box = baseline_box(
            task="alpacaeval", store_uri=store.as_uri(), run_prefix=prefix, model_dir=tiny_model,
            heldout=heldout, env=env,
        )  # fmt: skip
        with box:
            described = box.describe()
            done = run_a2rl(
                ["eval", "baseline", "--store", store.as_uri(), "--run-prefix", prefix,
                 "--task", "alpacaeval", "--model-dir", str(tiny_model), "--heldout", str(heldout),
                 "--backend", "transformers", "--limit", str(LIMIT)],
                env={**env, **box.env}, wrapper=box.prefix, preexec_fn=box.preexec, timeout_s=1200,
            )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(through a proxy)" in described
    result = json.loads((store / prefix / "submissions" / "00000" / "result.json").read_text())
    assert result["error"] is None, result
    assert result["n"] == LIMIT and 0.0 <= result["score"] <= 100.0
    assert judge.requests == result["metrics"]["judge_requests"] > 0
