"""Pure parts of the runner: run.json, score summaries, agent environment and argv."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from a2rl_runner.printing import submissions_status, summarize

from a2rl.api.benchrun import BenchRun
from a2rl.constants import AGENT_CONTRACT_ENV, ENV_SEED
from a2rl.contracts.env import agent_cwd, agent_env, recorder_env, resolve_agent_argv
from a2rl.errors import A2rlError
from a2rl.records.run import run_record
from a2rl.store.layout import RunLayout
from a2rl.workspace import Workspace


def _run(**spec: object) -> BenchRun:
    base: dict[str, object] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {
            "command": ["python", "-m", "a2rl_agents.sft_baseline"],
            "env": [{"name": "LR", "value": "3"}],
        },
        "budget": {"wallTimeSeconds": 300, "maxSubmissions": 4},
        "seed": 7,
    }
    base.update(spec)
    return BenchRun.model_validate({"metadata": {"name": "demo"}, "spec": base})


LAYOUT = RunLayout(namespace="local", name="demo", uid="0123456789ab")
WS = Workspace(root=Path("/ws/demo-0123456789ab"), base_name="tiny")


def test_run_json_fields() -> None:
    doc = run_record(
        _run(), LAYOUT, base_model_digest="d" * 64, evaluator_version="arith-1", started_at=1_700_000_000.0
    ).to_json()
    assert doc["name"] == "demo" and doc["namespace"] == "local" and doc["uid"] == "0123456789ab"
    assert doc["base_model"] == {"name": "tiny", "source": "builtin:tiny", "digest": "d" * 64}
    assert doc["agent"]["command"] == ["python", "-m", "a2rl_agents.sft_baseline"]
    assert doc["budget"] == {"wall_time_seconds": 300, "max_submissions": 4}
    assert doc["started_at"] == "2023-11-14T22:13:20Z"
    assert doc["deadline"] == "2023-11-14T22:18:20Z"
    assert doc["ended_at"] is None and doc["end_reason"] is None and doc["agent_exit_code"] is None
    assert doc["mode"] == "local" and doc["driver"] is None
    assert doc["spec"]["budget"]["wallTimeSeconds"] == 300  # wire form (camelCase)


def test_summarize_best_of_budget() -> None:
    entries: list[dict[str, Any]] = [
        {"submission_id": 0, "score": 1.0},
        {"submission_id": 1, "score": 20.0},
        {"submission_id": 2, "score": None, "error": "bad model"},
        {"submission_id": 3, "score": 35.5},
        {"submission_id": 4, "score": 35.5},
        {"submission_id": 5, "score": 10.0},
    ]
    s = summarize(entries)
    assert s.baseline_score == 1.0
    assert s.best_score == 35.5 and s.best_submission == 3  # first wins ties
    assert s.last_score == 10.0
    assert s.submissions == 5 and s.valid_submissions == 4
    assert s.improvement == pytest.approx(34.5)


def test_summarize_accepts_result_documents_and_empty() -> None:
    s = summarize([{"index": 0, "score": 2.0}])
    assert (s.best_score, s.improvement, s.submissions) == (None, None, 0)
    text, _ = submissions_status([{"index": 0, "score": 2.0}], now=0.0)
    assert "submissions 0/0 valid" in text and "evaluating" not in text


def test_agent_env_contract_wins_and_secrets_stay_out() -> None:
    run = _run(agent={"command": ["python"], "env": [{"name": "LR", "value": "3"}]})
    environ = {
        "PATH": "/bin",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "A2RL_STORE_URI": "file:///store",
        "TASK": "spoofed",
    }
    env = agent_env(run.spec, WS, "http://127.0.0.1:5555", environ)
    assert set(AGENT_CONTRACT_ENV) <= set(env)
    assert env["TASK"] == "arith"
    assert env["BASE_MODEL"] == "tiny"
    assert env["MODEL_PATH"] == "/ws/demo-0123456789ab/models/tiny"
    assert env["DATA_PATH"] == "/ws/demo-0123456789ab/data"
    assert env["OUTPUT_DIR"] == "/ws/demo-0123456789ab/output"
    assert env["GRADING_SERVER_URL"] == "http://127.0.0.1:5555"
    assert env[ENV_SEED] == "7"
    assert env["LR"] == "3" and env["PATH"] == "/bin"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "A2RL_STORE_URI" not in env


def test_the_agent_inherits_an_allow_list_not_a_filtered_environment() -> None:
    """What a researcher's shell really holds: provider keys under their own names (the one
    `spec.driver.apiKeyEnv` names among them), hub and forge tokens, cloud and database secrets."""
    run = _run(agent={"command": ["python"], "env": [{"name": "WANDB_MODE", "value": "offline"}]})
    secrets = {
        "TOGETHER_API_KEY": "tgp_v1_Xb4kR9mQ2wLz7TnVc5Hs8JdYf1Ga6Ue3Po0iKqMrNt",
        "OPENAI_API_KEY": "sk-proj-9fKq2LmX7wRtZ4vB1nC8sD3eF6gH0jA5",
        "ANTHROPIC_API_KEY": "sk-ant-api03-Zx8Qw2Lm5Rt9Yv3Bn7Cs1Df4Gh6Jk0",
        "HF_TOKEN": "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",
        "GITHUB_TOKEN": "ghp_4fK9sLm2QxV7bN1cR8tY3wZ6pJ0hGdE5uAi",
        "WANDB_API_KEY": "0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e",
        "DATABASE_URL": "postgres://admin:hunter2@db.internal:5432/prod",
        "GOOGLE_APPLICATION_CREDENTIALS": "/root/.config/gcloud/sa.json",
        "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1234",
        "KUBECONFIG": "/root/.kube/config",
    }
    kept = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    env = agent_env(run.spec, WS, "http://127.0.0.1:5555", {**secrets, **kept})
    assert not set(secrets) & set(env)
    assert not any(value in "".join(env.values()) for value in secrets.values())
    assert {k: env[k] for k in kept} == kept
    assert env["WANDB_MODE"] == "offline"  # what the BenchRun asks for is the agent's


def test_recorder_env() -> None:
    run = _run(evaluation={"limit": 50})
    env = recorder_env(
        spec=run.spec,
        store_uri="file:///store",
        layout=LAYOUT,
        ws=WS,
        port=5555,
        start_epoch=1700000000.25,
        base_model_digest="abc",
        heldout_dir=Path("/cache/heldout"),
        environ={"A2RL_MAX_SUBMISSIONS": "99", "PATH": "/bin"},
    )
    assert env["A2RL_RUN_PREFIX"] == "local/demo-0123456789ab"
    assert env["A2RL_RECORDER_PORT"] == "5555"
    assert env["A2RL_RUN_START"] == "1700000000.250"
    assert env["A2RL_RUN_TIMEOUT"] == "300"
    assert env["A2RL_MAX_SUBMISSIONS"] == "4"
    assert env["A2RL_EVAL_LIMIT"] == "50"
    assert env["A2RL_HELDOUT_PATH"] == "/cache/heldout"
    assert env["WORKSPACE"] == str(WS.root) and env["TASK"] == "arith"
    unlimited = recorder_env(
        spec=_run(budget={"wallTimeSeconds": 5}).spec,
        store_uri="s",
        layout=LAYOUT,
        ws=WS,
        port=1,
        start_epoch=0,
        base_model_digest="",
        heldout_dir=Path("/h"),
        environ={"A2RL_MAX_SUBMISSIONS": "99"},
    )
    assert "A2RL_MAX_SUBMISSIONS" not in unlimited


def test_resolve_agent_argv(tmp_path: Path) -> None:
    assert resolve_agent_argv(["python", "-m", "x"], ["--fast"]) == [sys.executable, "-m", "x", "--fast"]
    assert resolve_agent_argv(["python3"], []) == [sys.executable]
    assert resolve_agent_argv(["bash", "-c", "true"], []) == ["bash", "-c", "true"]
    with pytest.raises(A2rlError, match="not found on PATH"):
        resolve_agent_argv(["no-such-binary-a2rl"], [])
    with pytest.raises(A2rlError, match="not found"):
        resolve_agent_argv([str(tmp_path / "missing.sh")], [])


def test_agent_cwd() -> None:
    assert agent_cwd(_run().spec, WS) == WS.root
    spec = _run(agent={"command": ["x"], "workingDir": "code"}).spec
    assert agent_cwd(spec, WS) == WS.root / "code"
