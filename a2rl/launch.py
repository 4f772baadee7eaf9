"""The one way a2rl starts its own processes: `python -m a2rl_cli ARGS…` in its own session.

The local runner (recorder, baseline evaluation), the recorder (eval processes) and the tests
all launch `a2rl` through here, so every child runs with this interpreter (whether or not
the console script is on PATH), is killable as a whole process group, and never outlives an
interrupted parent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Model and data hubs are never reached by a2rl's own processes (nothing downloads at run time).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
#: The exit code of a child that ran past its time limit (as coreutils' `timeout`).
TIMEOUT_EXIT_CODE = 124
CLI_MODULE = "a2rl_cli"


def a2rl_argv(*args: str, python: str | None = None) -> list[str]:
    """argv running the `a2rl` CLI with this interpreter (or `python`)."""
    return [python or sys.executable, "-m", CLI_MODULE, *args]


def start_a2rl(
    args: list[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: int | IO[bytes] | None = subprocess.DEVNULL,
    stderr: int | IO[bytes] | None = subprocess.STDOUT,
    python: str | None = None,
    stdin: int = subprocess.DEVNULL,
    wrapper: Sequence[str] = (),
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `a2rl ARGS…` in its own session (so its own process group), stdin closed unless
    `stdin` is `subprocess.PIPE` (how a secret reaches a child: never its environment).
    `wrapper`: a command line the a2rl command is appended to (a sandbox, `a2rl.eval_sandbox`);
    `preexec_fn`: run in the child before exec (joining a cgroup, `a2rl.limits`)."""
    return subprocess.Popen(
        [*wrapper, *a2rl_argv(*args, python=python)],
        env=dict(os.environ if env is None else env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=preexec_fn,  # noqa: PLW1509  # a2rl.limits' preexec: raw system calls only
    )


def kill_group(proc: subprocess.Popen[bytes], grace_s: float | None = None) -> None:
    """SIGTERM the child's process group, then SIGKILL after `grace_s` (at once when None)."""
    steps = ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)) if grace_s else ((signal.SIGKILL, None),)
    for sig, wait_s in steps:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def stop_service(proc: subprocess.Popen[bytes] | None, timeout: float) -> int | None:
    """Stop a service started with `start_a2rl`: SIGTERM to it alone (it finishes what it must),
    then, after `timeout` s, SIGKILL to its whole process group. Its exit code (None: never started)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
    return proc.returncode


@dataclass(frozen=True)
class Finished:
    """A completed `a2rl` child: exit code (`TIMEOUT_EXIT_CODE` after a time-out) and its output;
    `stderr` is empty when it went to a log file."""

    returncode: int
    stdout: str
    stderr: str = ""


def run_a2rl(
    args: list[str],
    *,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    timeout_s: float | None = None,
    python: str | None = None,
    wrapper: Sequence[str] = (),
    preexec_fn: Callable[[], None] | None = None,
) -> Finished:
    """Run `a2rl ARGS…` to completion; stderr is appended to `log_path` (else captured).

    On a time-out the whole process group is killed and the result has exit code 124; if the
    caller is interrupted, the child is killed, not orphaned.
    """
    log: IO[bytes] | int = subprocess.PIPE
    with contextlib.ExitStack() as stack:
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = stack.enter_context(log_path.open("ab"))
        proc = start_a2rl(
            args,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            python=python,
            wrapper=wrapper,
            preexec_fn=preexec_fn,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out, err = proc.communicate()
            note = f"\na2rl {args[0] if args else ''} timed out after {timeout_s:.0f} s\n"
            return Finished(TIMEOUT_EXIT_CODE, _text(out), _text(err) + note)
        except BaseException:
            kill_group(proc)
            raise
    return Finished(proc.returncode, _text(out), _text(err))


def _text(data: bytes | None) -> str:
    return (data or b"").decode(errors="replace")
