"""webshop end to end: the tiny model through `a2rl eval baseline` (the grader path), then the
saved episode replies re-scored offline by replay give the same result."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from a2rl_cli import main
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import stage_artifacts

from a2rl.launch import run_a2rl

pytestmark = pytest.mark.slow
LIMIT = 2
MAX_STEPS = 2  # the protocol's 50 steps, shortened for a CPU test through the staged env.json


def test_tiny_model_webshop_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    tiny = tiny_model
    staged = stage_artifacts(get_task("webshop"), source=None, root=tmp_path / "staged")
    heldout = tmp_path / "heldout"
    shutil.copytree(staged.heldout_dir, heldout)
    (heldout / "env.json").write_text(json.dumps({"kind": "sim", "max_steps": MAX_STEPS}))

    store = tmp_path / "store"
    prefix = "local/e2ewebshop-abc123def456"
    (tmp_path / "tmp").mkdir()
    proc = run_a2rl(
        ["eval", "baseline", "--store", store.as_uri(), "--run-prefix", prefix, "--task", "webshop",
         "--model-dir", str(tiny), "--heldout", str(heldout), "--backend", "transformers",
         "--limit", str(LIMIT)],
        env=dict(os.environ, TMPDIR=str(tmp_path / "tmp")), timeout_s=1500,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    sub = store / prefix / "submissions" / "00000"
    result = json.loads((sub / "result.json").read_text())
    assert result["error"] is None and result["task"] == "webshop" and result["n"] == LIMIT
    assert result["evaluator_version"] == get_task("webshop").evaluator_version
    assert 0.0 <= result["score"] <= 100.0
    assert {"success_rate", "strict_success_rate", "mean_reward", "avg_steps"} <= set(result["metrics"])
    details = [json.loads(x) for x in (sub / "details.jsonl").read_text().splitlines()]
    assert [d["id"] for d in details] == ["webshop-test-0001", "webshop-test-0002"]
    for d in details:
        assert d["mode"] == "chat"  # the tiny model has a chat template
        assert 1 <= d["steps"] <= MAX_STEPS and len(d["replies"]) == d["steps"]
        assert d["ended"] in {"purchase", "step_limit"}
        assert d["success"] == (d["reward"] >= 0.5)

    # Offline replay of the saved replies reproduces the rewards.
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "".join(json.dumps({"id": d["id"], "prediction": "\n".join(d["replies"])}) + "\n" for d in details)
    )
    refs = tmp_path / "refs"
    refs.mkdir()
    shutil.copy(heldout / "catalogue.json", refs / "catalogue.json")
    goals = (heldout / "goals.jsonl").read_text().splitlines()[:LIMIT]
    (refs / "goals.jsonl").write_text("\n".join(goals) + "\n")
    assert (
        main(["tasks", "score", "webshop", "--predictions", str(preds), "--references", str(refs), "--json"])
        == 0
    )
    offline = json.loads(capsys.readouterr().out)
    assert offline["score"] == result["score"]
    assert offline["metrics"]["mean_reward"] == result["metrics"]["mean_reward"]
