"""`a2rl run` end to end with the reference SFT agent on `arith` (short budget, real training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.run_support import run_example

pytestmark = pytest.mark.slow

EXAMPLE = "arith-sft.yaml"
BUDGET_S = 90
# Tiny settings for the agent (docs/agents.md): one short round on a slice of the data with a small
# batch, scored on 100 held-out items, so that a round and its evaluation fit the short budget.
AGENT_ENV = {
    "AGENT_TRAIN_LIMIT": "2000",
    "AGENT_SFT_BATCH": "8",
    "AGENT_EVAL_ESTIMATE_S": "15",
    "AGENT_MAX_ROUNDS": "1",
}
EVAL_LIMIT = 100


def test_sft_agent_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, out = run_example(
        EXAMPLE,
        tmp_path,
        capsys,
        name="e2e-sft",
        agent_env=AGENT_ENV,
        eval_limit=EVAL_LIMIT,
        budget_s=BUDGET_S,
    )
    assert run_dir.name.startswith("e2e-sft-")
    run = json.loads((run_dir / "run.json").read_text())
    assert run["end_reason"] in ("completed", "deadline_exceeded")
    assert run["ended_at"] is not None
    assert run["base_model"]["digest"]

    submissions = sorted(p for p in (run_dir / "submissions").iterdir() if p.name != "00000")
    assert submissions, "the agent made no submission"
    results = [
        json.loads((p / "result.json").read_text()) for p in submissions if (p / "result.json").exists()
    ]
    assert results, "no submission has a result"
    assert all(r["task"] == "arith" for r in results)
    assert any(r["score"] is not None for r in results), results
    baseline = json.loads((run_dir / "submissions" / "00000" / "result.json").read_text())
    assert baseline["score"] is not None

    assert list((run_dir / "revisions").glob("*.json")), "no code revision recorded"
    # The report says what the store says: every submission, the baseline, the best-of-budget.
    report = json.loads((run_dir / "report" / "report.json").read_text())
    assert report["run"]["task"] == "arith"
    assert report["total_submissions"] == len(submissions)
    assert [row["index"] for row in report["submissions"]] == [int(p.name) for p in submissions]
    assert report["baseline_score"] == pytest.approx(baseline["score"])
    scored = {r["index"]: r["score"] for r in results if r["score"] is not None}
    assert report["valid_submissions"] == len(scored)
    best = max(scored, key=lambda i: (scored[i], -i))
    assert report["best_submission"] == best
    assert report["best_score"] == pytest.approx(scored[best])
    assert report["improvement"] == pytest.approx(scored[best] - baseline["score"])
    assert "best" in out and f"submission {best}" in out  # the printed summary agrees
    agent_log = (run_dir / "logs" / "agent.log").read_text()
    # The agent submitted before the deadline; the recorder scored it (possibly after the deadline).
    assert "submitting v1" in agent_log, agent_log[-3000:]

    workspace = Path(out.split("workspace   ", 1)[1].split()[0])
    assert (workspace / "data").is_dir()
    assert not [p for p in workspace.rglob("*") if "heldout" in p.name]
    heldout_items = (run_dir / "submissions" / "00000" / "details.jsonl").read_text().splitlines()[:5]
    ids = [json.loads(line)["id"] for line in heldout_items]
    for file in workspace.rglob("*.jsonl"):
        text = file.read_text()
        assert not any(i in text for i in ids), f"held-out item found in {file}"
