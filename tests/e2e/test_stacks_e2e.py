"""`a2rl run` of a BenchRun whose agent is a real LLM agent stack, in the sandbox, driven by the
scripted driver server through the run's gateway (issue 11's end-to-end test).

The "model" plays: write `code/train.py` (SFT of the tiny model on `arith`), dump the agent's
environment into `code/env.txt`, run the training, submit `output/v1` with curl, stop. The run
must end with a scored submission; the tokens the gateway metered must
equal the usage the driver sent; the stack's event stream is the run's trajectory in the store;
the upstream key (a marker) is in no agent-visible environment nor anywhere in the store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_runner.run import run_benchrun

from a2rl.api.benchrun import BenchRun
from a2rl.stacks import STACK_NAMES, stack_def
from tests.support.driver_server import SUBMIT_COMMAND, DriverServer, Script, write_file_command

pytestmark = pytest.mark.slow

KEY_ENV = "A2RL_TEST_DRIVER_KEY"
UPSTREAM_KEY = "sk-upstream-marker-5f1c2b9e7d"  # stands for a real provider key
#: SFT steps of the scripted training (batch 32, lr 2e-3: the reference agent's settings). Measured
#: on 2 cores (2026-11-25): 300 steps ≈ 85 s, mean loss 0.98, 11/100 held-out items right (the
#: untrained tiny model: 0); 150 steps at 5e-3 scored 0.
TRAIN_STEPS = 300

TRAIN_PY = f"""\
import json, os
from pathlib import Path

from a2rl_agents.scratchpad import completion_pairs
from a2rl_agents.sft_train import SFTSession, SFTSettings

rows = [json.loads(line) for line in open(os.path.join(os.environ["DATA_PATH"], "train.jsonl"))][:4000]
pairs, _ = completion_pairs(rows)
settings = SFTSettings(batch_size=32, learning_rate=2e-3)
session = SFTSession(
    Path(os.environ["MODEL_PATH"]), pairs, settings, work_dir=Path("/tmp/sft"), log=print
)
stats = session.train_round(600, {TRAIN_STEPS})
print("trained", stats.steps, "steps, loss", round(stats.loss, 4), flush=True)
session.save(Path(os.environ["OUTPUT_DIR"]) / "v1")
"""


def _script() -> Script:
    return Script.of(
        [
            write_file_command("code/train.py", TRAIN_PY),
            "env | sort > code/env.txt",
            "python3 code/train.py",
            SUBMIT_COMMAND,
        ]
    )


def _benchrun(stack: str, driver_url: str, **budget: int) -> BenchRun:
    provider = stack_def(stack).providers[0]
    base_url = driver_url + ("/v1" if provider.startswith("openai") else "")
    spec = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"stack": stack},
        "driver": {"provider": provider, "model": "scripted-1", "baseUrl": base_url, "apiKeyEnv": KEY_ENV},
        "budget": {"wallTimeSeconds": 900, "graceSeconds": 5, **budget},
        "evaluation": {"backend": "transformers", "limit": 100},
    }
    return BenchRun.model_validate({"metadata": {"name": f"stack-{stack}"}, "spec": spec})


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_a_stack_trains_and_submits_through_the_gateway(
    stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    store = tmp_path / "store"
    with DriverServer(_script(), api_key=UPSTREAM_KEY) as driver:
        outcome = run_benchrun(_benchrun(stack, driver.url), store_uri=str(store), progress=True)
        sent = driver.usage_total()
        assert driver.finished(), driver.steps_played()
    out = capsys.readouterr().out
    assert outcome.end_reason == "completed", out[-4000:]
    run_dir = store / outcome.prefix

    # A scored submission of the model the stack trained, better than the untrained base model.
    scores = outcome.scores
    assert scores.valid_submissions == 1 and scores.best_score is not None, out[-3000:]
    assert scores.baseline_score is not None and scores.best_score > scores.baseline_score, scores
    assert "trained" in (run_dir / "logs" / "agent.log").read_text()

    # The gateway metered exactly what the driver sent.
    summary = json.loads((run_dir / "driver" / "summary.json").read_text())
    assert (summary["input_tokens"] + summary["cached_tokens"], summary["output_tokens"]) == (
        sent.input,
        sent.output,
    ) or (summary["input_tokens"], summary["output_tokens"]) == (sent.input, sent.output), (summary, sent)
    assert summary["calls"] >= 4

    # The trajectory is in the store, and the report: the script's training launch and submission
    # among the stack's tool calls, each placed on the timeline (Codex's stream has no times: its
    # calls get the times of the driver answers that asked for them).
    trajectory = (run_dir / "agent" / "trajectory.jsonl").read_bytes().splitlines()
    assert trajectory and all(isinstance(json.loads(line), dict) for line in trajectory)
    report = json.loads((run_dir / "report" / "report.json").read_text())
    kinds = report["trajectory"]["kinds"]
    assert kinds.get("training", 0) >= 1 and kinds.get("submission", 0) >= 1, kinds
    assert all(call["at"] for call in report["trajectory"]["calls"]), report["trajectory"]["calls"]
    run_json = json.loads((run_dir / "run.json").read_text())
    assert report["driver"]["total_tokens"] == run_json["driver_tokens"] == summary["total_tokens"]

    # The upstream key: not in the agent's environment, nowhere in the store.
    env_txt = (outcome.workspace / "code" / "env.txt").read_text()
    assert UPSTREAM_KEY not in env_txt and KEY_ENV not in env_txt
    for obj in store.rglob("*"):
        if obj.is_file():
            assert UPSTREAM_KEY.encode() not in obj.read_bytes(), obj


def test_a_spent_driver_budget_ends_the_run_after_the_agent_saw_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    store = tmp_path / "store"
    with DriverServer(_script(), api_key=UPSTREAM_KEY) as driver:
        run = _benchrun("claude-code", driver.url, driverTokens=1000)  # spent by the first call
        outcome = run_benchrun(run, store_uri=str(store), progress=True)
        calls_upstream = len(driver.model_calls())
    out = capsys.readouterr().out
    assert outcome.end_reason == "driver_budget_exhausted", out[-3000:]
    assert calls_upstream == 1  # the refused calls never reached the upstream
    run_dir = store / outcome.prefix
    assert "driver budget" in (run_dir / "logs" / "agent.log").read_text()  # the stack saw the error
    summary = json.loads((run_dir / "driver" / "summary.json").read_text())
    assert summary["budget"]["exhausted"] is True and summary["budget"]["refused_calls"] >= 1
    assert json.loads((run_dir / "run.json").read_text())["end_reason"] == "driver_budget_exhausted"
    driver = json.loads((run_dir / "report" / "report.json").read_text())["driver"]
    assert driver["budget"]["exhausted"] and driver["refused"].get("budget_exhausted", 0) >= 1, driver
