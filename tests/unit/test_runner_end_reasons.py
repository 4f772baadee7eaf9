"""End reasons, last words, `--fail-on-no-improvement`, the last store, `a2rl logs`, `--dry-run`.

The whole runs (Ctrl-C in each phase, a run without submissions) are in
tests/e2e/test_runner_end_reasons.py; these are the pieces, and the commands on a store made by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from a2rl_cli import main
from a2rl_operator.grading import decisions
from a2rl_runner import run as run_module
from a2rl_runner import supervisor
from a2rl_runner.run import (
    EXIT_INTERRUPTED,
    EXIT_NO_IMPROVEMENT,
    LAST_WORDS_LINE_CHARS,
    LAST_WORDS_LINES,
    RunOutcome,
    agent_last_words,
)

from a2rl import paths
from a2rl.api.benchrun import BenchRun
from a2rl.errors import A2rlError
from a2rl.launch import a2rl_argv
from a2rl.records.run import END_REASONS, INTERRUPTED, NO_SUBMISSION, RunRecord
from a2rl.runs import last_store, remember_store
from a2rl.scores import ScoreSummary
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from tests.support.run_support import arith_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh A2RL_HOME: no last store, an empty default store."""
    path = tmp_path / "home"
    monkeypatch.setenv("A2RL_HOME", str(path))
    return path


# --- one vocabulary ------------------------------------------------------------------------------
def test_one_end_reason_vocabulary() -> None:
    assert {INTERRUPTED, NO_SUBMISSION} <= set(END_REASONS)
    # The runner re-exports the records' constants; the operator maps onto the same words.
    assert supervisor.INTERRUPTED is INTERRUPTED and supervisor.NO_SUBMISSION is NO_SUBMISSION
    assert set(decisions.END_REASONS.values()) <= set(END_REASONS)
    assert decisions.end_reason([]) is None


# --- last words ----------------------------------------------------------------------------------
def test_last_words_are_the_last_non_empty_lines_bounded(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    lines = [f"line {i}" for i in range(20)] + ["", "   ", "x" * 5000, "giving up: no GPU", ""]
    log.write_text("\n".join(lines) + "\n")
    words = agent_last_words(log)
    assert len(words) == LAST_WORDS_LINES
    assert words[-1] == "giving up: no GPU"
    assert words[-2] == "x" * LAST_WORDS_LINE_CHARS
    assert words[0] == "line 17"
    assert agent_last_words(tmp_path / "missing.log") == []


def test_last_words_of_a_huge_log_read_only_its_tail(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_bytes(b"y" * (10 * 2**20) + b"\nthe end\n")
    assert agent_last_words(log) == ["the end"]


def test_run_json_keeps_the_last_words() -> None:
    record = RunRecord.from_json({"end_reason": "no_submission", "agent_last_words": ["a", "b"]})
    assert record.agent_last_words == ["a", "b"]


# --- exit codes ----------------------------------------------------------------------------------
def _outcome(end_reason: str, *, baseline: float | None, best: float | None, valid: int) -> RunOutcome:
    scores = ScoreSummary(
        baseline_score=baseline,
        best_score=best,
        best_submission=1 if best is not None else None,
        last_score=best,
        submissions=valid,
        valid_submissions=valid,
    )
    return RunOutcome(
        name="r", uid="0" * 12, prefix="local/r-000000000000", store_uri="file:///s", workspace=Path("/w"),
        end_reason=end_reason, agent_exit_code=0, duration_s=1.0, interrupted=False, scores=scores,
        report=None, report_uri=None,
    )  # fmt: skip


def test_exit_status_and_improvement() -> None:
    assert _outcome(INTERRUPTED, baseline=1, best=None, valid=0).exit_status == EXIT_INTERRUPTED
    assert _outcome(NO_SUBMISSION, baseline=1, best=None, valid=0).exit_status == 0
    assert _outcome("failed", baseline=1, best=None, valid=0).exit_status == 1
    assert _outcome("completed", baseline=1, best=2, valid=1).improved
    assert not _outcome("completed", baseline=2, best=2, valid=1).improved  # equal is no improvement
    assert not _outcome("completed", baseline=3, best=2, valid=1).improved
    assert not _outcome("completed", baseline=None, best=2, valid=1).improved
    assert not _outcome(NO_SUBMISSION, baseline=1, best=None, valid=0).improved
    assert EXIT_NO_IMPROVEMENT not in (0, 1, 2, EXIT_INTERRUPTED)


# --- the last store ------------------------------------------------------------------------------
def test_report_points_at_the_store_of_the_last_run(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert last_store() is None
    assert main(["report", "--latest"]) == 2
    assert "the last run used" not in capsys.readouterr().err  # nothing to point at yet
    other = LocalStore(tmp_path / "elsewhere")
    remember_store(other.uri)
    assert last_store() == other.uri
    assert main(["report", "--latest"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"a2rl: error: no runs in store {paths.default_store_uri()}")
    assert f"the last run used --store {other.uri}: a2rl report --store {other.uri} --latest" in err
    # `logs` hints at itself; the store the last run used gets no hint about itself.
    assert main(["logs", "--latest"]) == 2
    assert f"a2rl logs --store {other.uri} --latest" in capsys.readouterr().err
    assert main(["report", "--latest", "--store", other.uri]) == 2
    assert "the last run used" not in capsys.readouterr().err


# --- a2rl logs -----------------------------------------------------------------------------------
def _live_run(store_root: Path, name: str = "live") -> tuple[LocalStore, RunLayout]:
    store = LocalStore(store_root)
    layout = RunLayout(namespace="local", name=name, uid="abcdef012345")
    _write_run_json(store, layout, ended=False)
    return store, layout


def _write_run_json(store: LocalStore, layout: RunLayout, *, ended: bool) -> None:
    doc = {
        "name": layout.name,
        "namespace": layout.namespace,
        "uid": layout.uid,
        "started_at": "2026-01-01T00:00:00+00:00",
    }
    if ended:
        doc |= {"ended_at": "2026-01-01T00:01:00+00:00", "end_reason": "completed"}
    store.put_bytes(layout.run_json, json.dumps(doc).encode())


def test_logs_of_a_finished_run_from_the_store(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, layout = _live_run(tmp_path / "store")
    _write_run_json(store, layout, ended=True)
    store.put_bytes(layout.log("agent"), b"agent says hi\n")
    store.put_bytes(layout.log("recorder"), b"recorder line\n")
    store.put_bytes(layout.log("eval-00001"), b"evaluated 1\n")
    assert main(["logs", "live", "--store", store.uri, "-c", "agent"]) == 0
    out = capsys.readouterr().out
    assert "agent says hi" in out and "recorder line" not in out
    assert main(["logs", "--latest", "--store", store.uri, "--component", "eval"]) == 0
    out = capsys.readouterr().out
    assert "==> eval-00001 <==" in out and "evaluated 1" in out and "agent says hi" not in out
    assert main(["logs", "--store", store.uri]) == 0
    out = capsys.readouterr().out
    assert "==> agent <==" in out and "==> recorder <==" in out and "==> eval-00001 <==" in out


def test_logs_follow_a_live_run_until_it_ends(home: Path, tmp_path: Path) -> None:
    store, layout = _live_run(tmp_path / "store")
    local = paths.run_logs_dir(f"{layout.name}-{layout.uid}")
    local.mkdir(parents=True)
    agent_log = local / "agent.log"
    agent_log.write_text("first line\n")
    env = {**os.environ, "A2RL_HOME": str(home)}
    proc = subprocess.Popen(
        a2rl_argv("logs", "--latest", "-f", "--store", store.uri, "-c", "agent"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "==> agent <==\n"
        assert proc.stdout.readline() == "first line\n"
        with agent_log.open("a") as f:
            f.write("second line\n")
        assert proc.stdout.readline() == "second line\n"
        time.sleep(1.5)
        assert proc.poll() is None, "logs -f ended while the run is live"
        with agent_log.open("a") as f:
            f.write("last line\n")
        _write_run_json(store, layout, ended=True)  # the run ends: what it wrote last still comes
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert rest == "last line\n"


def test_logs_follow_ends_quietly_on_ctrl_c(home: Path, tmp_path: Path) -> None:
    store, _ = _live_run(tmp_path / "store")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal
    try:
        proc = subprocess.Popen(
            a2rl_argv("logs", "--latest", "-f", "--store", store.uri),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "A2RL_HOME": str(home)},
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    time.sleep(3)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "interrupted" not in err


# --- a2rl run --dry-run --------------------------------------------------------------------------
def _tree(root: Path) -> dict[str, float]:
    if not root.exists():
        return {}
    return {str(p): p.lstat().st_mtime for p in root.rglob("*")}


def test_dry_run_prints_the_plan_and_stages_nothing(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    watched = [paths.models_cache(), paths.data_cache(), paths.cache_dir() / "keys"]
    before = [_tree(p) for p in watched]
    code = main(["run", "--dry-run", str(REPO / "examples" / "arith-sft.yaml"), "--store", str(store)])
    out = capsys.readouterr().out
    assert code == 0, out
    heads = [line.split(None, 1)[0] for line in out.splitlines()]
    parts = ("plan", "model", "data", "agent", "sandbox", "limits", "store", "baseline", "driver", "wall")
    assert set(parts) <= set(heads), out
    assert "builtin:tiny" in out and "task arith, seed 0" in out and "protocol reference" in out
    assert "budget 900 s (+15 s grace)" in out and "memory 4.0 GiB" in out
    assert "driver      none" in out
    assert "about 15m15s" in out  # the agent's budget and grace
    # Nothing staged, built, written: no store, no run state, the caches as they were.
    assert not store.exists()
    assert not (home / "logs").exists() and not (home / "workspaces").exists()
    assert [_tree(p) for p in watched] == before


def test_dry_run_prices_the_driver(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "stacked"},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": {"stack": "claude-code"},
            "driver": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
            "budget": {"wallTimeSeconds": 600, "driverTokens": 1_000_000},
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(doc))
    assert main(["run", "--dry-run", str(path), "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    driver = next(line for line in out.splitlines() if line.startswith("driver"))
    assert "1000000 tokens x at most $" in driver and "worst case $" in driver, driver
    assert "stack claude-code" in out
    assert not (tmp_path / "store").exists()


def test_validate_plan(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--plan", str(REPO / "examples" / "arith-sft.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid (BenchRun arith-sft" in out and "  baseline    " in out


# --- Ctrl-C or a mistake while the data are staged -----------------------------------------------
def _arith_run(tmp_path: Path) -> BenchRun:
    agent = tmp_path / "agent.py"
    agent.write_text("print('never runs')\n")
    return BenchRun.model_validate(
        {"metadata": {"name": "staging"}, "spec": arith_spec(agent, wall_s=60, grace_s=1)}
    )


def test_ctrl_c_while_staging_the_data_is_recorded(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "stage_cached", interrupted)
    store = tmp_path / "store"
    run = _arith_run(tmp_path)
    outcome = run_module.run_benchrun(run, store_uri=str(store), progress=False, sandbox=False)
    assert outcome.end_reason == INTERRUPTED and outcome.exit_status == EXIT_INTERRUPTED
    doc = json.loads((store / outcome.prefix / "run.json").read_text())
    assert doc["end_reason"] == INTERRUPTED and doc["ended_at"] and doc.get("started_at") is None
    assert (store / outcome.prefix / "report" / "report.json").is_file()


def test_a_mistake_while_staging_the_data_leaves_nothing_recorded(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unstaged(*_: object, **__: object) -> None:
        raise A2rlError("task arith needs a data source: a2rl data stage arith --source DIR")

    monkeypatch.setattr(run_module, "stage_cached", unstaged)
    store = tmp_path / "store"
    with pytest.raises(A2rlError, match="needs a data source"):
        run_module.run_benchrun(_arith_run(tmp_path), store_uri=str(store), progress=False, sandbox=False)
    assert not list(store.rglob("run.json"))
