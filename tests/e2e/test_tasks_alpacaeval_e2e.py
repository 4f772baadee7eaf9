"""alpacaeval end to end: the tiny model through `a2rl eval baseline` (the grader path) with the
loopback judge; re-scoring the same outputs in another process asks the judge nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from a2rl_tasks.alpacaeval import AlpacaEvalTask
from a2rl_tasks.artifacts import stage_artifacts

from a2rl.launch import a2rl_argv, run_a2rl
from tests.support.judge_server import JudgeServer
from tests.support.task_data import make_alpaca_dir

pytestmark = pytest.mark.slow
LIMIT = 2


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("alpaca-data")
    src = make_alpaca_dir(root / "src", n_eval=4)
    return stage_artifacts(AlpacaEvalTask(), source=str(src), root=root / "staged").heldout_dir


def _baseline(
    tmp_path: Path, name: str, model_dir: Path, heldout: Path, extra_env: dict[str, str]
) -> tuple[Any, Path]:
    store_uri = (tmp_path / name / "store").as_uri()
    prefix = f"local/e2e-alpacaeval-{name}-abc123def456"
    (tmp_path / name / "tmp").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_JUDGE_")}
    env.update(TMPDIR=str(tmp_path / name / "tmp"), **extra_env)
    proc = run_a2rl(
        ["eval", "baseline", "--store", store_uri, "--run-prefix", prefix, "--task", "alpacaeval",
         "--model-dir", str(model_dir), "--heldout", str(heldout), "--backend", "transformers",
         "--limit", str(LIMIT)],
        env=env, timeout_s=1200,
    )  # fmt: skip
    return proc, tmp_path / name / "store" / prefix / "submissions" / "00000"


def test_tiny_model_end_to_end_with_judge_cache(tiny_model: Path, heldout: Path, tmp_path: Path) -> None:
    with JudgeServer() as server:
        env = server.env() | {"A2RL_JUDGE_CACHE_DIR": str(tmp_path / "judge-cache")}
        proc, sub = _baseline(tmp_path, "first", tiny_model, heldout, env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads((sub / "result.json").read_text())
        assert result["error"] is None, result
        assert result["task"] == "alpacaeval" and result["n"] == LIMIT
        assert result["evaluator_version"] == "alpacaeval-2+reference+judge-loopback-judge"
        assert result["backend"] == "transformers"
        assert 0.0 <= result["score"] <= 100.0
        details = [json.loads(x) for x in (sub / "details.jsonl").read_text().splitlines()]
        assert len(details) == LIMIT
        assert all(d["mode"] == "chat" and d["preference"] in (1.0, 1.5, 2.0) for d in details)
        asked = sum(1 for d in details if d["judge_reply"] is not None)
        assert server.requests == asked == result["metrics"]["judge_requests"]
        # The loopback judge prefers the longer output.
        for d in details:
            if d["judge_reply"] is not None:
                assert d["model_preferred"] == (d["length"] > d["reference_length"])

        # Re-scoring the same outputs in another process (`a2rl tasks score`) with the same judge
        # cache asks the judge nothing and gives the same score.
        refs = tmp_path / "refs.jsonl"
        refs.write_text(
            "".join(line + "\n" for line in (heldout / "heldout.jsonl").read_text().splitlines()[:LIMIT])
        )
        preds = tmp_path / "preds.jsonl"
        preds.write_text(
            "".join(json.dumps({"id": d["id"], "prediction": d["output"]}) + "\n" for d in details)
        )
        env2 = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_JUDGE_")} | env
        score = subprocess.run(
            a2rl_argv("tasks", "score", "alpacaeval",
             "--predictions", str(preds), "--references", str(refs), "--json"),
            env=env2, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert score.returncode == 0, score.stderr[-2000:]
        again = json.loads(score.stdout)
        assert server.requests == asked
        assert again["score"] == pytest.approx(result["score"], abs=1e-3)
        assert again["metrics"]["judge_cache_hits"] == asked and again["metrics"]["judge_requests"] == 0


def test_missing_judge_configuration_fails_the_evaluation_clearly(
    tiny_model: Path, heldout: Path, tmp_path: Path
) -> None:
    proc, sub = _baseline(tmp_path, "nojudge", tiny_model, heldout, {})
    assert proc.returncode == 2
    assert "a2rl: error: task alpacaeval is scored by an LLM judge" in proc.stderr
    assert not (sub / "result.json").exists()  # no score at all, certainly not a zero
