"""PID 1 of a container for a program not written to be one: `supervise` runs it as a child,
passes the termination signals on to it and reaps every orphan until it exits; and
`exit_on_sigterm`, for a2rl's own commands that run as a container's main process (the set-up,
eval and report containers' `a2rl …`): SIGTERM ends them as it would any other process.

The kernel delivers PID 1 of a PID namespace no signal it has no handler for. A program exec'd as
a container's PID 1 that does not handle SIGTERM (Node.js, most CLIs) therefore ignores the
kubelet's SIGTERM and holds its pod for the whole grace period (tests/node/test_real_node.py
measures it). As a child it has the default disposition: SIGTERM ends it. When it has exited,
PID 1 exits with its status, and the kernel kills whatever is left in the namespace, as when the
program itself was PID 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType

#: What a container runtime or a user sends to stop or poke a container's main process.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def exit_code(status: int) -> int:
    """A `waitpid` status as a shell reports it: the exit code, or 128 + the signal that ended it."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def supervise(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run `argv` (its first item a path) with `env` as a child; the signals in FORWARDED go on to
    it. Returns its exit code once it has exited (128 + N after signal N). Raises OSError when it
    cannot be started (the exec's error)."""
    child = 0
    pending: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        del frame
        if not child:  # arrived before the child's pid was known: sent right after
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):  # it has just exited: waitpid tells
            os.kill(child, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    child = os.posix_spawn(argv[0], list(argv), dict(env), setsigdef=FORWARDED)
    for signum in pending:
        os.kill(child, signum)
    while True:
        pid, status = os.waitpid(-1, 0)  # every child: PID 1 inherits the orphans, and reaps them
        if pid == child:
            return exit_code(status)


def _exit_terminated(signum: int, frame: FrameType | None) -> None:
    del frame
    print(f"a2rl: stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM raises SystemExit(143) in the main thread (`finally` blocks run); the
    previous handler is back afterwards. A command that installs its own handler inside (the
    recorder's and the gateway's drain) keeps it. Outside the main thread: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
