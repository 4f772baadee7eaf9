"""`run_benchrun` end to end with a scripted agent (no training): the plumbing of local mode.

Real recorder, real eval processes, real report; the agent submits a copy of the base model, so
nothing is trained. Marked slow because it evaluates a model on CPU.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2rl_runner import procs
from a2rl_runner.run import run_benchrun

from a2rl.api.benchrun import BenchRun
from a2rl.constants import ENV_AGENT_SESSION
from a2rl.launch import a2rl_argv
from tests.support.run_support import SUBMIT_BASE_COPY, arith_spec, benchrun_doc

pytestmark = pytest.mark.slow

AGENT = (
    textwrap.dedent(
        """
        import json, os, shutil, subprocess, sys, time, urllib.request
        ws = os.environ["WORKSPACE"]
        assert os.getcwd() == ws, os.getcwd()
        print("agent: task", os.environ["TASK"], "seed", os.environ["SEED"], "extra", os.environ["EXTRA"])
        print("agent: session=" + os.environ["A2RL_AGENT_SESSION"])
        """
    )
    + SUBMIT_BASE_COPY
    + textwrap.dedent(
        """
        subprocess.Popen(["sleep", "1000"], start_new_session=True)  # a detached leftover
        print("agent: outside the workspace:", sorted(os.listdir(os.path.dirname(ws))), flush=True)
        time.sleep(1000)
        """
    )
)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for the module: the baseline is evaluated once, then served from the cache."""
    return tmp_path_factory.mktemp("store")


def test_local_run_records_everything(
    tmp_path: Path, store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    spec = arith_spec(agent, wall_s=45, grace_s=2, seed=3)
    spec["agent"]["env"] = [{"name": "EXTRA", "value": "x1"}]
    run = BenchRun.model_validate({"metadata": {"name": "plumbing"}, "spec": spec})
    outcome = run_benchrun(run, store_uri=str(store_dir), progress=True)
    out = capsys.readouterr().out

    assert outcome.end_reason == "deadline_exceeded"
    assert outcome.exit_status == 0
    run_dir = store_dir / outcome.prefix
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["end_reason"] == "deadline_exceeded"
    assert doc["agent_exit_code"] == outcome.agent_exit_code is not None
    assert doc["started_at"] and doc["ended_at"] and doc["deadline"]
    assert doc["mode"] == "local" and doc["task"] == "arith" and doc["uid"] == outcome.uid
    assert len(outcome.uid) == 12 and int(outcome.uid, 16) >= 0

    # Submission 0 (baseline) and 1 (the agent's), each with a result written by the eval process.
    for n in (0, 1):
        assert (run_dir / f"submissions/{n:05d}/manifest.json").is_file()
        result = json.loads((run_dir / f"submissions/{n:05d}/result.json").read_text())
        assert result["index"] == n
    manifest = json.loads((run_dir / "submissions/00001/manifest.json").read_text())
    assert manifest["model_path"] == "output/v1"
    assert manifest["identical_to_base"] is True
    assert list((run_dir / "revisions").glob("*.json")), "no code revision recorded"
    assert (run_dir / "report" / "report.json").is_file()
    for component in ("agent", "recorder", "baseline"):
        assert (run_dir / "logs" / f"{component}.log").is_file()
    agent_log = (run_dir / "logs" / "agent.log").read_text()
    assert "agent: task arith seed 3 extra x1" in agent_log
    assert "secrets visible: []" in agent_log
    assert '"submission_id": 1' in agent_log

    # The workspace: inputs present, held-out data absent.
    ws = outcome.workspace
    assert (ws / "data" / "train.jsonl").is_file()
    assert (ws / "models" / "tiny" / "config.json").is_file()
    assert not [p for p in ws.rglob("*") if "heldout" in p.name]
    meta = json.loads((ws / "run_meta.json").read_text())
    assert meta["timeout_s"] == 45 and meta["end_time"] is not None and meta["start_time"] is not None

    # The agent ran in the sandbox: of the workspaces' directory it saw its own workspace only.
    assert doc["sandbox"].startswith("bubblewrap")
    assert f"agent: outside the workspace: ['{ws.name}']" in agent_log
    # Nothing of the agent survives: the detached sleep (it carries the marker) and every marked
    # process are gone.
    session = agent_log.split("agent: session=", 1)[1].split()[0]
    assert procs.marked(ENV_AGENT_SESSION, session, procs.snapshot()) == set()
    assert "agent | agent: submit ->" in out
    assert "improvement" in out and outcome.prefix in out


INTERRUPT_AGENT = textwrap.dedent(
    """
    import signal, sys, time
    def bye(*_):
        print("agent: got SIGTERM", flush=True)
        sys.exit(5)
    signal.signal(signal.SIGTERM, bye)
    print("agent: started", flush=True)
    time.sleep(1000)
    """
)


@contextlib.contextmanager
def _sigint_as_from_a_terminal() -> Iterator[None]:
    """Children started here get Ctrl-C's SIGINT at its default, as a terminal's shell starts a
    command (a handled signal is reset by exec; an ignored one stays ignored). `make test` run as
    a background job of a script (`make test &`, `nohup … &`) inherits SIGINT ignored, as POSIX
    shells start such jobs, and Python leaves it ignored: `a2rl run` would (rightly) not stop."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_agent_and_still_records(tmp_path: Path, store_dir: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(INTERRUPT_AGENT)
    spec = benchrun_doc("interrupted", arith_spec(agent, wall_s=600, grace_s=5))
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(spec))
    with _sigint_as_from_a_terminal():
        proc = subprocess.Popen(
            a2rl_argv("run", str(path), "--store", str(store_dir)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if "agent | agent: started" in line:
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=300)
    output = "".join(lines) + rest
    assert proc.returncode == 130, output[-2000:]
    assert "agent | agent: got SIGTERM" in output
    run_dir = next((store_dir / "local").glob("interrupted-*"))
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["end_reason"] == "interrupted"
    assert doc["agent_exit_code"] == 5
    assert doc["ended_at"] is not None
    assert (run_dir / "logs" / "agent.log").is_file()
    assert (run_dir / "report" / "report.json").is_file()
    assert (run_dir / "submissions" / "00000" / "result.json").is_file()
