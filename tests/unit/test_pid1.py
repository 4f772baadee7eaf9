"""a2rl.contracts.pid1: a program without a SIGTERM handler, run as PID 1 of a PID namespace (as a
container's main process is), ignores SIGTERM; under `supervise` it stops at once, its status is
the container's, and orphans are reaped. The namespaces are real (`unshare --pid --fork`, root)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from a2rl.contracts.pid1 import exit_on_sigterm, supervise

REPO = Path(__file__).resolve().parents[2]
SLEEP = shutil.which("sleep") or "/bin/sleep"
SUPERVISED = (
    "import os, sys; from a2rl.contracts.pid1 import supervise; sys.exit(supervise(sys.argv[1:], os.environ))"
)

needs_pid_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace needs root and unshare"
)


def in_pid_namespace(
    argv: list[str], env: dict[str, str] | None = None, stderr: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """`argv` as PID 1 of a new PID namespace; the `unshare` process and argv's pid as seen here."""
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--", *argv],
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stderr=stderr,
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = children.read_text().split() if children.exists() else []
        if pids:
            time.sleep(0.5)  # the interpreter's start-up: its handlers are set before the test signals
            return proc, int(pids[0])
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("no PID 1 in the new namespace")


def stopped_within(proc: subprocess.Popen[bytes], seconds: float) -> int | None:
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


@needs_pid_namespace
def test_pid_1_without_a_handler_ignores_sigterm_and_under_supervise_stops_at_once() -> None:
    # The finding: `sleep` exec'd as PID 1 (no handler) does not stop on SIGTERM.
    bare, init = in_pid_namespace([SLEEP, "30"])
    try:
        os.kill(init, signal.SIGTERM)
        assert stopped_within(bare, 2) is None, "PID 1 without a handler stopped on SIGTERM"
    finally:
        bare.kill()
        bare.wait()

    # The same program under supervise: SIGTERM reaches it; the container's status is its own.
    supervised, init = in_pid_namespace([sys.executable, "-c", SUPERVISED, SLEEP, "30"])
    started = time.monotonic()
    os.kill(init, signal.SIGTERM)
    code = stopped_within(supervised, 5)
    assert code is not None, "supervise did not stop on SIGTERM"
    assert time.monotonic() - started < 3
    assert code == 128 + signal.SIGTERM  # unshare passes PID 1's exit status on


@needs_pid_namespace
def test_supervise_reaps_orphans_and_passes_on_a_handled_signal() -> None:
    # The child traps SIGTERM (a stack that cleans up) and leaves an orphan behind first.
    script = "(sleep 0.2 &); trap 'exit 7' TERM; sleep 30 & wait"
    proc, init = in_pid_namespace([sys.executable, "-c", SUPERVISED, "/bin/sh", "-c", script])
    time.sleep(1)  # the orphan has exited by now: PID 1 inherited it and must have reaped it
    states = []
    for task in Path(f"/proc/{init}/task/{init}/children").read_text().split():
        status = Path(f"/proc/{task}/status").read_text()
        states.append(next(line for line in status.splitlines() if line.startswith("State:")))
    assert states and not any("zombie" in s for s in states), states
    os.kill(init, signal.SIGTERM)
    assert stopped_within(proc, 5) == 7


def test_supervise_returns_the_exit_code_and_reports_a_program_that_cannot_start(tmp_path: Path) -> None:
    assert supervise(["/bin/sh", "-c", "exit 3"], os.environ) == 3
    assert supervise(["/bin/sh", "-c", "kill -KILL $$"], os.environ) == 128 + signal.SIGKILL
    with pytest.raises(FileNotFoundError):
        supervise([str(tmp_path / "no-such-stack")], os.environ)


def test_exit_on_sigterm_raises_system_exit_and_puts_the_handler_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped, exit_on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs at the next bytecode
    assert stopped.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


@needs_pid_namespace
def test_an_a2rl_command_as_pid_1_stops_on_sigterm_while_it_waits_on_the_store() -> None:
    """What an eval, report or set-up container is: `a2rl …` as PID 1. Its store accepts the
    connection and never answers (the command waits in a read); SIGTERM ends it at once."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        conn, _ = server.accept()
        held.append(conn)
        accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.getsockname()[1]}",
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    }
    argv = [sys.executable, "-m", "a2rl_cli", "runs", "list", "--store", "s3://a2rl-runs/runs"]
    proc, init = in_pid_namespace(argv, env, stderr=subprocess.PIPE)
    try:
        assert accepted.wait(30), "the command never reached its store"
        started = time.monotonic()
        os.kill(init, signal.SIGTERM)
        code = stopped_within(proc, 5)
        assert code == 128 + signal.SIGTERM, code
        assert time.monotonic() - started < 3
        assert proc.stderr is not None and b"a2rl: stopped by SIGTERM" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        for conn in held:
            conn.close()
        server.close()
