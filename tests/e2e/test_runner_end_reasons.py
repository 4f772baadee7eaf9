"""How a real `a2rl run` ends: Ctrl-C during the baseline, SIGTERM during the agent, the terminal
closing, an agent that gives up without a submission (`no_submission`, its last words,
`--fail-on-no-improvement`), and what a user does next (`a2rl logs -f` on the live run,
`a2rl report --latest` from another store).

Each run is an `a2rl run` subprocess started with SIGINT at its default, as from a terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2rl.launch import a2rl_argv
from tests.support.run_support import SUBMIT_BASE_COPY, arith_spec, benchrun_doc

pytestmark = pytest.mark.slow

GIVES_UP = textwrap.dedent(
    """
    import time
    for i in range(3):
        print(f"agent: thinking {i}", flush=True)
        time.sleep(1)
    print("agent: no GPU here, giving up", flush=True)
    """
)
#: Submits the base model and exits at once: its evaluation is still in flight at the wrap-up.
SUBMITS_AND_EXITS = "import json, os, shutil, urllib.request\n" + SUBMIT_BASE_COPY
WAITS = textwrap.dedent(
    """
    import time
    print("agent: started", flush=True)
    time.sleep(1000)
    """
)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for the module's whole runs: the baseline is evaluated once, then cached."""
    return tmp_path_factory.mktemp("store")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A fresh A2RL_HOME (no last store, an empty default store) for every command of a test."""
    return {**os.environ, "A2RL_HOME": str(tmp_path / "home")}


@contextlib.contextmanager
def _sigint_as_from_a_terminal() -> Iterator[None]:
    """The signal dispositions a command started from a terminal has, whatever ours are: SIGINT
    handled, SIGHUP not ignored (under `nohup` the tests would otherwise start the runner with
    SIGHUP ignored, as nohup's children are, and the hang-up test would wait forever)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    hangup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGHUP, hangup)


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    with _sigint_as_from_a_terminal():
        return subprocess.Popen(
            a2rl_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )


def _spec_file(tmp_path: Path, name: str, agent_code: str, **spec: object) -> Path:
    agent = tmp_path / "agent.py"
    agent.write_text(agent_code)
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(benchrun_doc(name, arith_spec(agent, **spec))))  # type: ignore[arg-type]
    return path


def _signal_at(proc: subprocess.Popen[str], marker: str, sig: int) -> str:
    """Send `sig` once `marker` is printed; return everything printed until the process ends."""
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if marker in line:
            proc.send_signal(sig)
            break
    rest, _ = proc.communicate(timeout=600)
    return "".join(lines) + rest


def _run_dir(store: Path, name: str) -> Path:
    (found,) = (store / "local").glob(f"{name}-*")
    return found


def test_ctrl_c_during_the_baseline_is_recorded_as_interrupted(tmp_path: Path, env: dict[str, str]) -> None:
    store = tmp_path / "store"  # a store of its own: its baseline is not cached, it is evaluated
    path = _spec_file(tmp_path, "cut-baseline", WAITS, wall_s=600, grace_s=5, limit=200)
    proc = _start(env, "run", str(path), "--store", str(store))
    output = _signal_at(proc, "[a2rl] scoring the base model", signal.SIGINT)
    assert proc.returncode == 130, output[-3000:]
    assert "agent: started" not in output
    run_dir = _run_dir(store, "cut-baseline")
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["end_reason"] == "interrupted", doc
    assert doc["ended_at"] is not None and doc.get("started_at") is None
    assert (run_dir / "report" / "report.json").is_file(), output[-3000:]
    assert not (run_dir / "submissions" / "00000" / "result.json").exists()
    assert "[a2rl] interrupted: recording the run" in output


def test_sigterm_during_the_agent_is_recorded_as_interrupted(
    tmp_path: Path, store_dir: Path, env: dict[str, str]
) -> None:
    path = _spec_file(tmp_path, "terminated", WAITS, wall_s=600, grace_s=5)
    proc = _start(env, "run", str(path), "--store", str(store_dir))
    output = _signal_at(proc, "agent | agent: started", signal.SIGTERM)
    assert proc.returncode == 130, output[-3000:]
    doc = json.loads((_run_dir(store_dir, "terminated") / "run.json").read_text())
    assert doc["end_reason"] == "interrupted" and doc["ended_at"] and doc["started_at"]
    assert "agent_last_words" not in doc  # an interrupted agent did not give up
    assert (_run_dir(store_dir, "terminated") / "report" / "report.json").is_file()


def test_an_agent_that_gives_up(tmp_path: Path, store_dir: Path, env: dict[str, str]) -> None:
    """No submission: `no_submission` with the agent's last words, exit 3 with
    --fail-on-no-improvement; `a2rl logs -f` follows the run to its end; `a2rl report --latest`
    in the default store points at the store the run used."""
    path = _spec_file(tmp_path, "gives-up", GIVES_UP, wall_s=120, grace_s=5)
    proc = _start(env, "run", str(path), "--store", str(store_dir), "--fail-on-no-improvement")
    assert proc.stdout is not None
    lines: list[str] = []
    follower: subprocess.Popen[str] | None = None
    try:
        for line in proc.stdout:
            lines.append(line)
            if "[a2rl] starting the agent" in line:
                follower = _start(env, "logs", "--latest", "-f", "-c", "agent", "--store", str(store_dir))
                break
        rest, _ = proc.communicate(timeout=600)
        assert follower is not None
        followed, _ = follower.communicate(timeout=60)  # it ends by itself when the run does
    finally:
        for p in (proc, follower):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    output = "".join(lines) + rest
    assert proc.returncode == 3, output[-3000:]
    assert "a2rl: no improvement over the baseline (no_submission" in output
    assert "[a2rl]   agent: no GPU here, giving up" in output
    doc = json.loads((_run_dir(store_dir, "gives-up") / "run.json").read_text())
    assert doc["end_reason"] == "no_submission"
    assert doc["agent_exit_code"] == 0
    assert doc["agent_last_words"][-1] == "agent: no GPU here, giving up"
    assert "agent: thinking 2" in doc["agent_last_words"]

    assert follower.returncode == 0, followed
    assert "agent: thinking 0" in followed and followed.rstrip().endswith("agent: no GPU here, giving up")

    report = subprocess.run(
        a2rl_argv("report", "--latest"), check=False, capture_output=True, text=True, env=env
    )
    assert report.returncode == 2
    assert "the last run used --store" in report.stderr, report.stderr
    hinted = report.stderr.split("a2rl report --store ", 1)[1].split()[0]
    again = subprocess.run(
        a2rl_argv("report", "--store", hinted, "--latest"),
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    assert again.returncode == 0, again.stderr
    assert "gives-up" in again.stdout


def test_a_second_ctrl_c_during_the_wrap_up_leaves_a_consistent_run_json(
    tmp_path: Path, store_dir: Path, env: dict[str, str]
) -> None:
    path = _spec_file(tmp_path, "twice", WAITS, wall_s=600, grace_s=5)
    proc = _start(env, "run", str(path), "--store", str(store_dir))
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if "agent | agent: started" in line:
            proc.send_signal(signal.SIGINT)
        if "[a2rl] interrupted: agent stopped" in line:
            proc.send_signal(signal.SIGINT)  # the wrap-up has begun: stop it too
            break
    rest, _ = proc.communicate(timeout=600)
    output = "".join(lines) + rest
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    doc = json.loads((_run_dir(store_dir, "twice") / "run.json").read_text())
    assert doc["end_reason"] == "interrupted", doc
    assert doc["started_at"] and doc["ended_at"]


def test_ctrl_c_during_the_wrap_up_is_recorded_as_interrupted(
    tmp_path: Path, store_dir: Path, env: dict[str, str]
) -> None:
    """The agent completed; Ctrl-C while the recorder finishes its evaluation: `interrupted`."""
    path = _spec_file(tmp_path, "cut-wrap-up", SUBMITS_AND_EXITS, wall_s=600, grace_s=5, limit=200)
    proc = _start(env, "run", str(path), "--store", str(store_dir))
    output = _signal_at(proc, "[a2rl] stopping the grading server", signal.SIGINT)
    assert proc.returncode == 130, output[-3000:]
    assert "agent: submit ->" in output and "Traceback" not in output
    doc = json.loads((_run_dir(store_dir, "cut-wrap-up") / "run.json").read_text())
    assert doc["end_reason"] == "interrupted", doc
    assert doc["agent_exit_code"] == 0 and doc["started_at"] and doc["ended_at"]


def test_the_terminal_closing_during_the_agent_is_recorded_as_interrupted(
    tmp_path: Path, store_dir: Path, env: dict[str, str]
) -> None:
    """The user's terminal goes away (a closed window, a dropped ssh session): the runner's output
    is a terminal no more and it gets SIGHUP. Before, it died there: no end reason, and its
    recorder left running."""
    path = _spec_file(tmp_path, "hung-up", WAITS, wall_s=600, grace_s=5)
    leader, follower = pty.openpty()
    with _sigint_as_from_a_terminal():
        proc = subprocess.Popen(
            a2rl_argv("run", str(path), "--store", str(store_dir)),
            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env,
        )  # fmt: skip
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 600
    while b"agent: started" not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(leader, 4096)
        except OSError:
            break
    assert b"agent: started" in seen, seen[-3000:]
    os.close(leader)  # the terminal is gone: writes to it fail from now on
    # The runner writes its status line meanwhile: the writes fail (EIO) before the SIGHUP comes, as
    # when a session drops. Without this pause the race was lost only now and then (exit 1).
    time.sleep(3)
    proc.send_signal(signal.SIGHUP)  # what the kernel sends its session
    assert proc.wait(timeout=600) == 130
    run_dir = _run_dir(store_dir, "hung-up")
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["end_reason"] == "interrupted" and doc["started_at"] and doc["ended_at"], doc
    assert (run_dir / "report" / "report.json").is_file()
    # Nothing of the run is left running: no process names the run in its command line or its
    # environment (the recorder's has the run's prefix).
    time.sleep(1)
    assert _processes_naming(run_dir.name) == []


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            except OSError:
                continue
            if text.encode() in seen:
                found.append(int(entry.name))
    return found
