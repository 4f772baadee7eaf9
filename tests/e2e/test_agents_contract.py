"""The reference agents keep to the agent contract: imports, reward, time plan, grading client, SIGTERM."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2rl_agents.contract import AgentEnv, ContractError, GradingClient
from a2rl_agents.gsm8k_format import gold_number, last_number
from a2rl_agents.rewards import answer_reward, exact_match_reward
from a2rl_agents.rounds import TimePlan, copy_code, loop_settings, plan_round
from a2rl_agents.scratchpad import column_completion, completion_pairs
from a2rl_agents.sft_train import cosine_factor
from a2rl_agents.trainer_rounds import RoundClock
from a2rl_recorder.app import serve
from a2rl_tasks.arith import data as arith_data
from a2rl_tasks.common.jsonl import write_jsonl
from a2rl_tasks.common.numbers import QUESTION_CUT, extract_last_number, numbers_equal, parse_gold

from a2rl.models.tiny import build_tokenizer
from a2rl.store.local import LocalStore
from tests.support.recorder_support import StoreBackedDispatcher, make_config, make_model, make_workspace
from tests.support.shared_fixtures import writable_copy

AGENTS_DIR = Path(__file__).resolve().parents[2] / "agents" / "a2rl_agents"
# The project's own packages; an agent may import only its own.
PROJECT_PACKAGES = ("a2rl", "a2rl_operator", "a2rl_recorder", "a2rl_grader", "a2rl_tasks")
ALLOWED_OWN = "a2rl_agents"


# --- the import rule --------------------------------------------------------------------------


def imported_modules(source: str, package: str = ALLOWED_OWN) -> set[str]:
    """Absolute names of every module a source file imports (relative imports resolved to `package`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package if node.level else ""
            module = node.module or ""
            names.add(f"{base}.{module}".strip(".") if base else module)
    return names


def forbidden_imports(source: str) -> set[str]:
    return {
        name
        for name in imported_modules(source)
        if name.split(".")[0] in PROJECT_PACKAGES
        or (name.startswith("a2rl") and name.split(".")[0] != ALLOWED_OWN)
    }


def test_import_checker_finds_project_imports() -> None:
    source = (
        "import os\nimport a2rl\nfrom a2rl.constants import ENV_TASK\nimport a2rl_tasks.arith as t\n"
        "def f():\n    from a2rl_grader.inference import base\n"
        "from . import rounds\nimport a2rl_agents.contract\n"
        "from a2rl_recorder import app\nimport a2rlx\n"
    )
    assert forbidden_imports(source) == {
        "a2rl",
        "a2rl.constants",
        "a2rl_tasks.arith",
        "a2rl_grader.inference",
        "a2rl_recorder",
        "a2rlx",
    }


def test_agents_import_nothing_from_a2rl() -> None:
    files = sorted(AGENTS_DIR.glob("*.py"))
    assert {p.name for p in files} >= {"sft_baseline.py", "grpo_baseline.py", "contract.py", "rewards.py"}
    offenders = {p.name: sorted(found) for p in files if (found := forbidden_imports(p.read_text()))}
    assert offenders == {}


def test_agents_load_with_a2rl_unimportable() -> None:
    """At run time too: with every project package blocked, both agents and their deps import."""
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {PROJECT_PACKAGES!r}:\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import a2rl_agents.sft_baseline, a2rl_agents.grpo_baseline, a2rl_agents.grpo_train\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", blocker], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


# --- the rule reward ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "gold", "reward"),
    [
        ("47 + 38 = 85\n#### 85", "85", 1.0),
        ("47 + 38 = 84\n#### 84", "85", 0.0),
        ("#### 85", "85", 1.0),
        ("85", "85", 1.0),
        ("the answer is 85.", "85", 1.0),
        ("#### 85.0", "85", 1.0),
        ("#### 1,000", "1000", 1.0),
        ("#### 1,000", "1,000", 1.0),
        ("#### -7", "-7", 1.0),
        ("#### 7", "-7", 0.0),
        ("", "85", 0.0),
        ("no number here", "85", 0.0),
        ("#### 85\nQuestion: What is 1 + 2?\nAnswer: 3", "85", 1.0),  # cut at the next question
        ("Question: What is 85 + 0?", "85", 0.0),  # nothing before the cut
        ("#### 85 and then 86", "85", 0.0),  # the last number counts, as in the evaluator
        ("#### 8 5", "85", 0.0),
        ("#### 850", "85", 0.0),
    ],
)
def test_answer_reward(completion: str, gold: str, reward: float) -> None:
    assert answer_reward(completion, gold.replace(",", "")) == reward


def test_reward_agrees_with_the_task_scorer() -> None:
    """The agent's rule (written from description.md) equals the evaluator's on varied outputs."""
    completions = [
        "47 + 38 = 85\n#### 85",
        "1,234 apples\n#### 1,234",
        "-3.50",
        "12, 13",
        "x 1,00 y",
        "#### 5 Question: 6",
        "",
        "Answer: 10.25.",
        "99 - 0 = 99\n#### 99<|endoftext|>",
    ]
    for text in completions:
        ours = last_number(text)
        theirs = extract_last_number(text, cut=QUESTION_CUT)
        assert (ours is None) == (theirs is None), text
        for gold in ("85", "1234", "-3.5", "13", "5", "10.25", "99", "100"):
            expected = 1.0 if numbers_equal(theirs, parse_gold(f"x\n#### {gold}")) else 0.0
            assert answer_reward(text, gold) == expected, (text, gold)


def test_exact_match_reward_trl_signature() -> None:
    assert exact_match_reward(
        ["#### 3", "#### 4", [{"role": "assistant", "content": "#### 4"}]], ["3", "3", "4"]
    ) == [
        1.0,
        0.0,
        1.0,
    ]
    with pytest.raises(ValueError, match="2 completions but 1"):
        exact_match_reward(["1", "2"], ["1"])


# --- the time plan --------------------------------------------------------------------------


def test_plan_round_keeps_time_for_saving_and_the_evaluation() -> None:
    plan = TimePlan(eval_s=30.0, overhead_s=5.0, margin_s=10.0)
    assert plan_round(plan, remaining_s=1000, wanted_s=200, min_s=20) == 200
    # 145 s left - 45 s of evaluation, saving and margin = 100 s of training
    assert plan_round(plan, remaining_s=145, wanted_s=500, min_s=20) == 100
    assert plan_round(plan, remaining_s=65, wanted_s=500, min_s=20) == 20
    assert plan_round(plan, remaining_s=64, wanted_s=500, min_s=20) == 0
    assert plan_round(plan, remaining_s=40, wanted_s=500, min_s=0) == 0


def test_plan_learns_the_slowest_evaluation_and_overhead() -> None:
    plan = TimePlan(eval_s=20.0, overhead_s=0.0, margin_s=0.0)
    plan.record_eval(40.0)
    plan.record_eval(25.0)
    plan.record_overhead(7.0)
    plan.record_overhead(3.0)
    assert (plan.eval_s, plan.overhead_s) == (40.0, 7.0)
    assert plan_round(plan, remaining_s=120, wanted_s=1000, min_s=1) == 73


def test_loop_settings_scale_with_the_budget_and_knobs_win() -> None:
    loop = loop_settings(300.0, environ={})
    assert (loop.first_round_s, loop.round_s, loop.min_round_s) == pytest.approx((120.0, 54.0, 18.0))
    assert loop.round_max_steps == 0
    loop = loop_settings(
        300.0, first_fraction=0.5, environ={"AGENT_FIRST_ROUND_S": "7", "AGENT_ROUND_MAX_STEPS": "9"}
    )
    assert (loop.first_round_s, loop.round_max_steps) == (7.0, 9)
    assert loop_settings(300.0, first_fraction=0.5, environ={}).first_round_s == 150.0
    with pytest.raises(ContractError, match="AGENT_ROUND_S must be a number"):
        loop_settings(300.0, environ={"AGENT_ROUND_S": "soon"})


def test_round_progress_and_learning_rate_schedule() -> None:
    clock = RoundClock(seconds=1000.0, max_steps=50)
    assert clock.progress(0) == 0.0  # not started: no time has passed
    assert clock.progress(25) == 0.5
    assert clock.progress(80) == 1.0
    clock.start()
    assert clock.progress(0) < 0.01
    assert RoundClock(seconds=0.0).progress(0) == 0.0  # never started
    assert cosine_factor(0.0, warmup_ratio=0.1, min_ratio=0.05) == 0.01
    assert cosine_factor(0.05, warmup_ratio=0.1, min_ratio=0.05) == pytest.approx(0.5)
    assert cosine_factor(0.1, warmup_ratio=0.1, min_ratio=0.05) == pytest.approx(1.0)
    assert cosine_factor(0.55, warmup_ratio=0.1, min_ratio=0.05) == pytest.approx(0.525)
    assert cosine_factor(1.0, warmup_ratio=0.1, min_ratio=0.05) == pytest.approx(0.05)
    values = [cosine_factor(p / 100, 0.1, 0.05) for p in range(10, 101)]
    assert values == sorted(values, reverse=True)


# --- the column completions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "columns"),
    [
        ("47 + 38 = 85\n#### 85", "7+8=15 4+3+1=8 #### 85"),
        ("99 + 99 = 198\n#### 198", "9+9=18 9+9+1=19 #### 198"),
        ("63 - 28 = 35\n#### 35", "13-8=5 6-1-2=3 #### 35"),
        ("5 + 3 = 8\n#### 8", "5+3=8 0+0=0 #### 8"),
        ("50 - 50 = 0\n#### 0", "0-0=0 5-5=0 #### 0"),
        ("12 - 9 = 3\n#### 3", "12-9=3 1-1-0=0 #### 3"),
        ("40 + 60 = 100\n#### 100", "0+0=0 4+6=10 #### 100"),
        ("47 + 38 = 84\n#### 84", None),  # a wrong reference is not rewritten
        ("3 - 5 = -2\n#### -2", None),
        ("147 + 3 = 150\n#### 150", None),
        ("Tom has 3 apples. 3 + 4 = 7\n#### 7", None),  # GSM8K-style solutions stay as they are
    ],
)
def test_column_completion(answer: str, columns: str | None) -> None:
    assert column_completion(answer) == columns


def test_column_completions_keep_the_answer_for_every_training_item() -> None:
    """On the real data: the last number is the gold answer, and it fits the evaluator's 24 tokens."""
    train, _ = arith_data.generate(0, n_train=3000, n_heldout=10)
    for row in train:
        text = column_completion(row["answer"])
        assert text is not None, row
        assert answer_reward(text, gold_number(row["answer"])) == 1.0
    tokenizer = build_tokenizer()
    longest = max(len(tokenizer(column_completion(r["answer"]))["input_ids"]) for r in train)
    assert longest + 1 <= 24  # + the end-of-sequence token


def test_completion_pairs_styles() -> None:
    rows = [{"question": "What is 47 + 38?", "answer": "47 + 38 = 85\n#### 85"}]
    gsm = [*rows, {"question": "Tom?", "answer": "Tom has 3. 3 + 4 = 7\n#### 7"}]
    pairs, style = completion_pairs(rows)
    assert style == "columns"
    assert pairs == [
        {"prompt": "Question: What is 47 + 38?\nAnswer: ", "completion": "7+8=15 4+3+1=8 #### 85"}
    ]
    assert completion_pairs(gsm)[1] == "reference"
    assert [p["completion"] for p in completion_pairs(gsm)[0]] == [r["answer"] for r in gsm]
    forced, _ = completion_pairs(gsm, "columns")
    assert [p["completion"] for p in forced] == ["7+8=15 4+3+1=8 #### 85", gsm[1]["answer"]]
    assert completion_pairs(rows, "reference")[0][0]["completion"] == rows[0]["answer"]
    with pytest.raises(ValueError, match="unknown completion style"):
        completion_pairs(rows, "reversed")


# --- the environment and the grading API ------------------------------------------------------


def contract_env(ws: Path, url: str) -> dict[str, str]:
    return {
        "TASK": "arith",
        "BASE_MODEL": "tiny",
        "WORKSPACE": str(ws),
        "MODEL_PATH": str(ws / "models" / "tiny"),
        "DATA_PATH": str(ws / "data"),
        "OUTPUT_DIR": str(ws / "output"),
        "GRADING_SERVER_URL": url,
        "SEED": "3",
    }


def test_agent_env_reads_the_contract(tmp_path: Path) -> None:
    env = AgentEnv.from_environ(contract_env(tmp_path, "http://127.0.0.1:1234/"))
    assert env.grading_url == "http://127.0.0.1:1234"
    assert env.code_dir == tmp_path / "code"
    assert env.seed == 3
    partial = contract_env(tmp_path, "http://x")
    del partial["DATA_PATH"], partial["OUTPUT_DIR"]
    with pytest.raises(ContractError, match="DATA_PATH, OUTPUT_DIR"):
        AgentEnv.from_environ(partial)
    with pytest.raises(ContractError, match="SEED"):
        AgentEnv.from_environ({**contract_env(tmp_path, "http://x"), "SEED": "x"})


def test_copy_code_records_the_agent_source(tmp_path: Path) -> None:
    written = copy_code(tmp_path / "code", {"settings.json": "{}\n"})
    copied = tmp_path / "code" / "a2rl_agents"
    assert (copied / "sft_baseline.py").read_text() == (AGENTS_DIR / "sft_baseline.py").read_text()
    assert (copied / "grpo_train.py").is_file()
    assert (tmp_path / "code" / "settings.json").read_text() == "{}\n"
    assert len(written) == len(list(AGENTS_DIR.glob("*.py"))) + 1


class Recorder:
    """The real recorder's HTTP server in a thread (evaluation by the test dispatcher)."""

    def __init__(self, root: Path, **overrides: Any) -> None:
        self.ws = make_workspace(root)
        self.store = LocalStore(root / "store")
        self.config = make_config(self.ws, **overrides)
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def on_ready(port: int) -> None:
            self.port = port
            self.ready.set()

        serve(
            self.config,
            store=self.store,
            dispatcher=StoreBackedDispatcher(self.store),
            stop=self.stop,
            on_ready=on_ready,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    rec = Recorder(tmp_path, timeout_s=600.0)
    rec.thread.start()
    assert rec.ready.wait(10)
    yield rec
    rec.stop.set()
    rec.thread.join(30)


def test_grading_client_against_the_recorder(recorder: Recorder) -> None:
    client = GradingClient(recorder.url)
    assert client.health().body["status"] == "ok"
    assert 500 < client.remaining_s() <= 600
    missing = client.submit("output/nope", timeout_s=30)
    assert missing.status == 404
    assert missing.error
    make_model(recorder.ws / "output" / "v1", score=42.0)
    resp = client.submit(recorder.ws / "output" / "v1", timeout_s=60)
    assert resp.ok, resp.body
    assert resp.body["submission_id"] == 1
    assert resp.body["score"] == 42.0


# --- SIGTERM ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_sft_agent_stops_cleanly_on_sigterm(recorder: Recorder, tiny_model: Path) -> None:
    ws = recorder.ws
    writable_copy(tiny_model, ws / "models" / "tiny")
    train, _ = arith_data.generate(0, n_train=300, n_heldout=10)
    write_jsonl(ws / "data" / "train.jsonl", train)
    env = {
        **os.environ,
        **contract_env(ws, recorder.url),
        "PYTHONUNBUFFERED": "1",
        # One round as long as the budget allows: it is still training when SIGTERM comes.
        "AGENT_FIRST_ROUND_S": "100000",
        "AGENT_EVAL_ESTIMATE_S": "1",
        "AGENT_OVERHEAD_ESTIMATE_S": "0",
        "AGENT_MARGIN_S": "0",
        "AGENT_SFT_BATCH": "4",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "a2rl_agents.sft_baseline"],
        cwd=ws,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 240
        for line in proc.stdout:
            lines.append(line)
            if "round 1:" in line:
                break
            assert time.monotonic() < deadline, "".join(lines)
        time.sleep(3)  # inside the trainer's step loop
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out[-3000:]
    assert "received SIGTERM: stopping" in out
    assert "finished after 0 round(s)" in out
    assert not list((ws / "output").iterdir()), "a model was saved after SIGTERM"
    assert (ws / "code" / "a2rl_agents" / "sft_train.py").is_file()
    settings = json.loads((ws / "code" / "settings.json").read_text())
    assert settings["sft"]["seed"] == 3
    assert settings["sft"]["batch_size"] == 4
