"""The run's own LLM judge (`spec.evaluation.judge`): validation, and how it reaches the local
evaluation processes (baseline and submissions) but never the agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from a2rl_cli import main
from a2rl_tasks import get_task

from a2rl.api.benchrun import BenchRun
from a2rl.api.docgen import EXAMPLE
from a2rl.constants import ENV_JUDGE_API_KEY, ENV_JUDGE_BASE_URL, ENV_JUDGE_MODEL
from a2rl.contracts.env import agent_env, eval_environ, recorder_env
from a2rl.protocols import ENV_EVAL_PROTOCOL
from a2rl.store.layout import RunLayout
from a2rl.workspace import Workspace

JUDGE = {"baseUrl": "http://127.0.0.1:8000/v1", "model": "judge-7b"}
RUNNER_ENV = {ENV_JUDGE_BASE_URL: "http://other:1/v1", ENV_JUDGE_MODEL: "other", ENV_JUDGE_API_KEY: "sk-1",
              "PATH": "/bin"}  # fmt: skip


def _run(**evaluation: object) -> BenchRun:
    spec = {
        "task": "alpacaeval",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"command": ["python", "-m", "agent"]},
        "budget": {"wallTimeSeconds": 300},
        "evaluation": evaluation,
    }
    return BenchRun.model_validate({"metadata": {"name": "demo"}, "spec": spec})


def test_validate_names_the_field_of_a_bad_judge_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(EXAMPLE + "  evaluation:\n    judge: {baseUrl: 'https://judge.llm/v1', model: m}\n")
    bad.write_text(EXAMPLE + "  evaluation:\n    judge: {baseUrl: 'judge.llm/v1', model: ''}\n")
    assert main(["validate", str(good)]) == 0
    capsys.readouterr()
    assert main(["validate", str(bad)]) == 1
    assert capsys.readouterr().out.splitlines()[1:] == [
        "  spec.evaluation.judge.baseUrl: must be an http(s) URL such as https://judge.example/v1 "
        "(got 'judge.llm/v1')",
        "  spec.evaluation.judge.model: must not be empty",
    ]


def test_the_runs_judge_reaches_local_evaluations_but_never_the_agent() -> None:
    run = _run(judge=JUDGE)
    ws = Workspace(root=Path("/ws/demo"), base_name="tiny")
    recorder = recorder_env(spec=run.spec, store_uri="file:///s", layout=RunLayout("local", "demo", "u"),
                            ws=ws, port=1, start_epoch=0, base_model_digest="d", heldout_dir=Path("/h"),
                            environ=RUNNER_ENV)  # fmt: skip
    # The recorder's eval processes inherit its environment: the run's judge over the runner's,
    # the key still from the runner's environment.
    assert recorder[ENV_JUDGE_BASE_URL] == JUDGE["baseUrl"] and recorder[ENV_JUDGE_MODEL] == "judge-7b"
    assert recorder[ENV_JUDGE_API_KEY] == "sk-1"
    baseline = eval_environ(run.spec, RUNNER_ENV)
    assert {k: baseline[k] for k in (ENV_JUDGE_BASE_URL, ENV_JUDGE_MODEL)} == {
        ENV_JUDGE_BASE_URL: JUDGE["baseUrl"],
        ENV_JUDGE_MODEL: "judge-7b",
    }
    # Its evaluator version (run.json, the baseline cache key) names the run's judge.
    assert get_task("alpacaeval", baseline).evaluator_version == "alpacaeval-2+reference+judge-judge-7b"
    # Without a judge in the spec the runner's environment is used, plus the run's protocol.
    assert eval_environ(_run().spec, RUNNER_ENV) == {**RUNNER_ENV, ENV_EVAL_PROTOCOL: "reference"}
    # The agent sees no judge setting, whatever environment the runner (or recorder) has.
    for environ in (RUNNER_ENV, recorder):
        env = agent_env(run.spec, ws, "http://127.0.0.1:1", environ)
        assert not any("JUDGE" in k for k in env) and "judge-7b" not in env.values()
