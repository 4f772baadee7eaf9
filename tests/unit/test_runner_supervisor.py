"""Budget enforcement of the local runner: the agent and everything it detaches end with the run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from a2rl_runner import procs
from a2rl_runner.supervisor import DRIVER_BUDGET_EXHAUSTED, AgentLaunch, AgentSupervisor

from a2rl.constants import ENV_AGENT_SESSION

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _launch(tmp_path: Path, script: str, **kw: object) -> AgentLaunch:
    return AgentLaunch(
        argv=["bash", "-c", script],
        env={"PATH": os.environ["PATH"], "PYTHON": sys.executable},
        cwd=tmp_path,
        log_path=tmp_path / "logs" / "agent.log",
        **kw,  # type: ignore[arg-type]
    )


def _alive(pid: int) -> bool:
    info = procs.read_proc(pid)
    return info is not None and not info.zombie


def _read_pids(path: Path, n: int, timeout: float = 10.0) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            lines = path.read_text().split()
            if len(lines) >= n:
                return [int(x) for x in lines[:n]]
        time.sleep(0.05)
    raise AssertionError(f"agent did not write {n} pid(s) to {path}")


def test_normal_agent_completes_with_log_and_env(tmp_path: Path) -> None:
    script = 'echo "hello from agent"; echo "to stderr" >&2; echo "session=$A2RL_AGENT_SESSION"; pwd'
    launch = _launch(tmp_path, script, session="abc123")
    out = AgentSupervisor(launch).run(budget_s=30, grace_s=1)
    assert out.end_reason == "completed"
    assert out.exit_code == 0
    assert not out.interrupted
    assert 0 <= out.duration_s < 10
    log = launch.log_path.read_text()
    assert "hello from agent" in log
    assert "to stderr" in log
    assert "session=abc123" in log
    assert str(tmp_path) in log


def test_exit_code_propagates_and_marks_failure(tmp_path: Path) -> None:
    out = AgentSupervisor(_launch(tmp_path, "exit 7")).run(budget_s=30, grace_s=1)
    assert out.exit_code == 7
    assert out.end_reason == "failed"


def test_console_prefix_echoes_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = AgentSupervisor(_launch(tmp_path, "echo line-one; echo line-two", console_prefix="[agent] ")).run(
        budget_s=30, grace_s=1
    )
    assert out.exit_code == 0
    captured = capsys.readouterr().out
    assert "[agent] line-one\n" in captured
    assert "[agent] line-two\n" in captured


def test_missing_command_is_a_failed_outcome(tmp_path: Path) -> None:
    launch = AgentLaunch(
        argv=[str(tmp_path / "no-such-agent")], env={}, cwd=tmp_path, log_path=tmp_path / "agent.log"
    )
    out = AgentSupervisor(launch).run(budget_s=5, grace_s=1)
    assert out.end_reason == "failed"
    assert out.exit_code == 127
    assert "cannot start agent command" in launch.log_path.read_text()


def test_deadline_sends_sigterm_first(tmp_path: Path) -> None:
    # A well-behaved agent catches SIGTERM and exits within the grace period.
    script = "trap 'echo got-term; exit 3' TERM; while true; do sleep 0.1; done"
    launch = _launch(tmp_path, script)
    t0 = time.monotonic()
    out = AgentSupervisor(launch).run(budget_s=1.5, grace_s=10)
    assert out.end_reason == "deadline_exceeded"
    assert out.exit_code == 3
    assert time.monotonic() - t0 < 6  # did not need the whole grace period
    assert "got-term" in launch.log_path.read_text()


def test_stop_when_ends_the_agent_early_with_its_reason(tmp_path: Path) -> None:
    # The driver gateway's budget is spent: the agent is stopped (SIGTERM first), whatever its clock.
    script = "trap 'echo got-term; exit 4' TERM; while true; do sleep 0.1; done"
    launch = _launch(tmp_path, script)
    t0 = time.monotonic()
    spent_at = t0 + 1.0
    ticks: list[float] = []
    out = AgentSupervisor(launch).run(
        budget_s=60,
        grace_s=10,
        on_tick=lambda elapsed, remaining: ticks.append(elapsed),
        tick_s=0.3,
        stop_when=lambda: DRIVER_BUDGET_EXHAUSTED if time.monotonic() >= spent_at else None,
    )
    assert out.end_reason == DRIVER_BUDGET_EXHAUSTED == "driver_budget_exhausted"
    assert out.exit_code == 4 and "got-term" in launch.log_path.read_text()
    assert time.monotonic() - t0 < 6
    assert 2 <= len(ticks) <= 5  # progress ticks keep their own pace while stop_when is polled


def test_every_agent_process_gets_sigterm_exactly_once(tmp_path: Path) -> None:
    # A Python agent (and its child, same process group) whose SIGTERM handler takes a while:
    # a second SIGTERM would run the handler again (or, during interpreter shutdown, kill it
    # with -15 instead of its own exit code).
    handler = tmp_path / "agent.py"
    handler.write_text(
        textwrap.dedent(
            """
            import os, signal, sys, time
            count = 0
            def term(*_):
                global count
                count += 1
                time.sleep(0.5)
                with open(sys.argv[1], "a") as f:
                    f.write(f"{os.getpid()} {count}\\n")
                sys.exit(5)
            signal.signal(signal.SIGTERM, term)
            if len(sys.argv) > 2:
                import subprocess
                subprocess.Popen([sys.executable, __file__, sys.argv[1]])
            print("ready", flush=True)
            while True:
                time.sleep(0.1)
            """
        )
    )
    counts = tmp_path / "counts.txt"
    launch = _launch(tmp_path, f'exec "$PYTHON" {handler} {counts} spawn')
    out = AgentSupervisor(launch).run(budget_s=2.0, grace_s=10)
    assert out.end_reason == "deadline_exceeded"
    assert out.exit_code == 5
    lines = counts.read_text().split("\n")
    per_process = [line.split() for line in lines if line]
    assert len(per_process) == 2 and all(n == "1" for _, n in per_process), per_process


def test_agent_ignoring_sigterm_is_killed_after_grace(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"trap '' TERM; sleep 1000 & echo $! > {pids}; wait; wait; sleep 1000"
    t0 = time.monotonic()
    sup = AgentSupervisor(_launch(tmp_path, script))
    out = sup.run(budget_s=1.0, grace_s=1.5)
    elapsed = time.monotonic() - t0
    assert out.end_reason == "deadline_exceeded"
    assert out.exit_code == -9  # SIGKILL: it ignored SIGTERM
    assert 2.4 <= elapsed < 10  # budget + grace, then killed
    assert 0.9 <= out.duration_s < 2.0
    (child,) = _read_pids(pids, 1)
    assert not _alive(child)


DAEMON = textwrap.dedent(
    """
    import os, sys, time
    if os.fork():
        sys.exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()}\\n")
    if len(sys.argv) > 2:  # drop every trace of the session marker (same pid, empty environment)
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(1000)"], {})
    time.sleep(1000)
    """
)


def _detaching_script(tmp_path: Path, *, strip_env: bool, then: str) -> tuple[str, Path, Path]:
    """bash that detaches `setsid sleep`, `nohup sleep` and a double-forked python daemon."""
    daemon = tmp_path / "daemon.py"
    daemon.write_text(DAEMON)
    pids = tmp_path / "pids"
    extra = " strip" if strip_env else ""
    script = (
        f"setsid sleep 1000 & echo $! >> {pids}; "
        f"nohup sleep 1001 >/dev/null 2>&1 & echo $! >> {pids}; "
        f'"$PYTHON" {daemon} {pids}{extra}; '
        f"{then}"
    )
    return script, pids, daemon


@pytest.mark.parametrize("strip_env", [False, True], ids=["marked", "env-cleared"])
def test_detached_processes_do_not_survive_the_deadline(tmp_path: Path, strip_env: bool) -> None:
    script, pids_file, _ = _detaching_script(tmp_path, strip_env=strip_env, then="sleep 1000")
    out = AgentSupervisor(_launch(tmp_path, script)).run(budget_s=2.0, grace_s=1.0)
    assert out.end_reason == "deadline_exceeded"
    pids = _read_pids(pids_file, 3)
    assert out.leftovers >= 4  # bash, two sleeps, the daemon (at least)
    for pid in pids:
        assert not _alive(pid), f"process {pid} survived the run"
        assert procs.read_proc(pid) is None, f"process {pid} was not reaped"


def test_detached_processes_do_not_survive_a_normal_exit(tmp_path: Path) -> None:
    script, pids_file, _ = _detaching_script(tmp_path, strip_env=False, then="exit 0")
    out = AgentSupervisor(_launch(tmp_path, script)).run(budget_s=30, grace_s=1.0)
    assert out.end_reason == "completed"
    assert out.exit_code == 0
    assert out.leftovers >= 3
    for pid in _read_pids(pids_file, 3):
        assert not _alive(pid), f"process {pid} survived the run"


def test_no_process_carries_the_marker_after_the_run(tmp_path: Path) -> None:
    script, _, _ = _detaching_script(tmp_path, strip_env=False, then="sleep 1000")
    launch = _launch(tmp_path, script, session="marker-check-" + os.urandom(4).hex())
    AgentSupervisor(launch).run(budget_s=2.0, grace_s=1.0)
    assert procs.marked(ENV_AGENT_SESSION, launch.session, procs.snapshot()) == set()


def test_protected_children_are_left_alone(tmp_path: Path) -> None:
    # A sibling started by the runner (like the recorder) lives on; it does not carry the marker.
    sibling = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        sup = AgentSupervisor(_launch(tmp_path, "sleep 1000"), protected=lambda: [sibling.pid])
        out = sup.run(budget_s=1.0, grace_s=1.0)
        assert out.end_reason == "deadline_exceeded"
        assert sibling.poll() is None
    finally:
        sibling.kill()
        sibling.wait()


def test_tick_callback_reports_progress(tmp_path: Path) -> None:
    ticks: list[tuple[float, float]] = []
    out = AgentSupervisor(_launch(tmp_path, "sleep 1.2")).run(
        budget_s=30, grace_s=1, on_tick=lambda e, r: ticks.append((e, r)), tick_s=0.3
    )
    assert out.end_reason == "completed"
    assert len(ticks) >= 2
    assert all(e + r == pytest.approx(30, abs=0.5) for e, r in ticks)


def test_subreaper_flag_is_restored(tmp_path: Path) -> None:
    before = procs.is_child_subreaper()
    sup = AgentSupervisor(_launch(tmp_path, "sleep 0.2"))
    sup.start()
    assert procs.is_child_subreaper()
    sup.stop(1)
    assert procs.is_child_subreaper() == before
