"""deepsearchqa end to end: the tiny model through `a2rl eval baseline` (the grader path), with the
loopback judge and a local search corpus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from a2rl_tasks.artifacts import stage_artifacts
from a2rl_tasks.deepsearchqa import DeepSearchQATask

from a2rl.launch import run_a2rl
from tests.support.judge_server import JudgeServer
from tests.support.task_data import make_corpus, make_dsqa_file

pytestmark = pytest.mark.slow
LIMIT = 2


def test_tiny_model_end_to_end(tmp_path: Path, tiny_model: Path) -> None:
    tiny = tiny_model
    src = make_dsqa_file(tmp_path / "src", n=12)
    heldout = stage_artifacts(DeepSearchQATask(), source=str(src), root=tmp_path / "staged").heldout_dir
    corpus = make_corpus(tmp_path / "corpus.jsonl")
    store_uri = (tmp_path / "store").as_uri()
    prefix = "local/e2e-deepsearchqa-abc123def456"
    (tmp_path / "tmp").mkdir()
    with JudgeServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("A2RL_JUDGE_", "A2RL_SEARCH_"))}
        env.update(
            server.env(),
            A2RL_JUDGE_CACHE_DIR=str(tmp_path / "judge-cache"),
            A2RL_SEARCH_CORPUS=str(corpus),
            TMPDIR=str(tmp_path / "tmp"),
        )
        proc = run_a2rl(
            ["eval", "baseline", "--store", store_uri, "--run-prefix", prefix, "--task", "deepsearchqa",
             "--model-dir", str(tiny), "--heldout", str(heldout), "--backend", "transformers",
             "--limit", str(LIMIT)],
            env=env, timeout_s=1200,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        sub = tmp_path / "store" / prefix / "submissions" / "00000"
        result = json.loads((sub / "result.json").read_text())
        details = [json.loads(x) for x in (sub / "details.jsonl").read_text().splitlines()]
        judged = sum(1 for d in details if d["judged"])
        assert server.requests == judged == result["metrics"]["judge_requests"]
    assert result["error"] is None, result
    assert result["task"] == "deepsearchqa" and result["n"] == LIMIT
    assert result["evaluator_version"].startswith(
        "deepsearchqa-1+reference+judge-loopback-judge+search-corpus-"
    )
    assert 0.0 <= result["score"] <= 100.0
    assert result["score"] == pytest.approx(100.0 * result["correct"] / LIMIT)
    assert len(details) == LIMIT
    for d in details:
        assert 1 <= d["steps"] <= 6 and isinstance(d["predicted"], str) and d["trace"]
        assert d["answer_type"] in ("Single Answer", "Set Answer") and d["gold"]
