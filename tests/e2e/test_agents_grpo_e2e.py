"""`a2rl run` end to end with the reference GRPO agent on `arith` (tiny budget, real GRPO steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.run_support import run_example

pytestmark = pytest.mark.slow

EXAMPLE = "arith-grpo.yaml"
BUDGET_S = 120
# No SFT warm-up (the GRPO path itself is under test), 2 prompts x 2 completions per step, one
# round of at most 3 steps; scored on 50 held-out items (docs/agents.md lists the knobs).
AGENT_ENV = {
    "AGENT_FIRST_ROUND_S": "0",
    "AGENT_TRAIN_LIMIT": "500",
    "AGENT_GRPO_MAX_STEPS": "3",
    "AGENT_GRPO_PROMPTS": "2",
    "AGENT_GRPO_GENERATIONS": "2",
    "AGENT_MIN_ROUND_S": "1",
    "AGENT_EVAL_ESTIMATE_S": "15",
    "AGENT_MAX_ROUNDS": "1",
}
EVAL_LIMIT = 50


def test_grpo_agent_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, _ = run_example(
        EXAMPLE,
        tmp_path,
        capsys,
        name="e2e-grpo",
        agent_env=AGENT_ENV,
        eval_limit=EVAL_LIMIT,
        budget_s=BUDGET_S,
    )
    agent_log = (run_dir / "logs" / "agent.log").read_text()
    assert "GRPO round 1: " in agent_log, agent_log[-3000:]
    assert "submitting v1" in agent_log, agent_log[-3000:]

    manifest = json.loads((run_dir / "submissions" / "00001" / "manifest.json").read_text())
    result = json.loads((run_dir / "submissions" / "00001" / "result.json").read_text())
    assert result["error"] is None
    assert result["score"] is not None
    assert 0.0 <= result["score"] <= 100.0
    assert not manifest["identical_to_base"], "GRPO steps did not change the model"

    # The submission is traceable to the agent's GRPO code.
    revisions = [json.loads(p.read_text()) for p in (run_dir / "revisions").glob("*.json")]
    paths = {f["path"] for r in revisions for f in r["tree"]["files"]}
    assert {"a2rl_agents/grpo_baseline.py", "a2rl_agents/grpo_train.py", "settings.json"} <= paths
