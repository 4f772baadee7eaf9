"""Run an agent command under a wall-clock budget and leave no process of it behind.

The agent runs in its own session (so its own process group), with `A2RL_AGENT_SESSION=<id>`
in its environment. When the budget ends: SIGTERM to everything the agent started, `grace_s`
to exit, then SIGKILL. "Everything the agent started" is found three ways, because agents
detach (`setsid`, double fork, `nohup`) and may even clear their environment:

- the process tree below the agent's main process (PPid links in /proc);
- every process whose initial environment carries the session marker;
- orphans adopted by this process: the supervisor makes its process a child subreaper
  (`PR_SET_CHILD_SUBREAPER`), so a daemon that double-forks away from the agent is re-parented
  here instead of to init, and any such new child of ours that is not a known process is the
  agent's.

The runner's other children (recorder, eval processes) do not carry the marker, existed before
the agent started, and can be named in `protected`; they and their descendants are never signalled.
The same clean-up runs when the agent exits on its own, so detached leftovers never outlive a run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from a2rl.constants import ENV_AGENT_SESSION
from a2rl.records.run import (
    COMPLETED,
    DEADLINE_EXCEEDED,
    DISK_LIMIT_EXCEEDED,
    DRIVER_BUDGET_EXHAUSTED,
    FAILED,
    INTERRUPTED,
    MEMORY_LIMIT_EXCEEDED,
    NO_SUBMISSION,
    PROCESS_LIMIT_EXCEEDED,
    EndReason,
)
from a2rl_runner import procs

# The end-reason vocabulary lives in `a2rl.records.run` (shared with the operator and the report).
#: How often `run` asks `stop_when` whether to end the agent early.
_STOP_POLL_S = 0.5

#: Exit code reported when the agent command could not be started at all (as a shell would).
EXEC_FAILED = 127
_POLL_S = 0.05
_PUMP_JOIN_S = 5.0


@dataclass(frozen=True)
class AgentLaunch:
    """What to run. `env` is the complete environment (the session marker is added to it)."""

    argv: list[str]
    env: Mapping[str, str]
    cwd: Path
    log_path: Path
    #: Echo every output line to this process's stdout with this prefix (None: log file only).
    console_prefix: str | None = None
    #: Where echoed lines go (one line, prefixed, without its newline); default this process's
    #: stdout. The runner's status line passes its own, which keeps them above the status.
    echo: Callable[[str], None] | None = None
    session: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: `argv` starts the agent in a PID namespace (the local sandbox): the main process and its
    #: child are the namespace's wrappers, spared by SIGTERM (the namespace's init would take
    #: every process down with it, graceless) and SIGKILLed last, which ends the namespace.
    sandboxed: bool = False
    #: What the child runs before exec (the sandbox's staging, change of identity and limits).
    preexec: Callable[[], None] | None = None


@dataclass(frozen=True)
class AgentOutcome:
    #: The main process's exit status; negative `-N` when it was killed by signal N.
    exit_code: int | None
    end_reason: EndReason
    duration_s: float
    #: Processes of the agent still alive when it ended or was stopped (all of them signalled).
    leftovers: int = 0
    #: The run was stopped by the user (Ctrl-C) rather than by its deadline or its own exit.
    interrupted: bool = False


def end_reason_for(exit_code: int | None, *, deadline_hit: bool) -> EndReason:
    if deadline_hit:
        return DEADLINE_EXCEEDED
    return COMPLETED if exit_code == 0 else FAILED


class AgentSupervisor:
    """One agent process and everything it starts. Not thread-safe; one per agent run."""

    def __init__(self, launch: AgentLaunch, *, protected: Callable[[], Iterable[int]] | None = None) -> None:
        self.launch = launch
        self._protected = protected or (lambda: ())
        self._proc: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None
        self._log: IO[bytes] | None = None
        self._children_before: set[int] = set()
        self._started_at = 0.0
        self._exec_error: str | None = None
        self._was_subreaper = False

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def started_at(self) -> float:
        """`time.monotonic()` at start."""
        return self._started_at

    def start(self) -> None:
        self._was_subreaper = procs.is_child_subreaper()
        procs.set_child_subreaper()
        self._children_before = procs.children_of(os.getpid(), procs.snapshot())
        self.launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.launch.log_path.open("ab")
        env = {**self.launch.env, ENV_AGENT_SESSION: self.launch.session}
        self._started_at = time.monotonic()
        try:
            self._proc = subprocess.Popen(
                self.launch.argv,
                env=env,
                cwd=self.launch.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=self.launch.preexec,  # noqa: PLW1509 (raw system calls only)
            )
        except (OSError, subprocess.SubprocessError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            self._exec_error = f"cannot start agent command {self.launch.argv[0]!r}: {reason}"
            self._log.write(f"a2rl: {self._exec_error}\n".encode())
            self._log.close()
            return
        assert self._proc.stdout is not None
        self._pump = threading.Thread(
            target=_pump,
            args=(self._proc.stdout, self._log, self.launch.console_prefix, self.launch.echo),
            daemon=True,
        )
        self._pump.start()

    def poll(self) -> int | None:
        if self._exec_error is not None:
            return EXEC_FAILED
        assert self._proc is not None, "start() first"
        return self._proc.poll()

    def wait(self, timeout: float | None) -> int | None:
        """The exit code once the main process has exited, or None after `timeout` seconds."""
        if self._exec_error is not None:
            return EXEC_FAILED
        assert self._proc is not None, "start() first"
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def run(
        self,
        budget_s: float,
        grace_s: float,
        *,
        on_tick: Callable[[float, float], None] | None = None,
        tick_s: float = 10.0,
        stop_when: Callable[[], EndReason | None] | None = None,
    ) -> AgentOutcome:
        """Start (unless started), wait for exit or the deadline, clean up. Ctrl-C stops the agent
        and returns an interrupted outcome; `on_tick(elapsed, remaining)` runs every `tick_s`;
        `stop_when()` (polled twice a second) returning an end reason stops the agent early; when
        the agent exits on its own and `stop_when()` has a reason, that is the end reason."""
        if self._proc is None and self._exec_error is None:
            self.start()
        deadline = self._started_at + budget_s
        deadline_hit = False
        early: EndReason | None = None
        next_tick = self._started_at + tick_s
        try:
            while True:
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    deadline_hit = True
                    break
                wait = min(next_tick - now, remaining)
                if stop_when is not None:
                    wait = min(wait, _STOP_POLL_S)
                code = self.wait(max(wait, 0.0))
                if code is not None:  # its own exit; the reason may still be stop_when's
                    early = stop_when() if stop_when is not None else None
                    break
                if stop_when is not None and (early := stop_when()) is not None:
                    break
                now = time.monotonic()
                if on_tick is not None and now >= next_tick:
                    next_tick = now + tick_s
                    on_tick(now - self._started_at, max(deadline - now, 0.0))
        except KeyboardInterrupt:
            leftovers = self.stop(grace_s)
            return AgentOutcome(
                exit_code=self.poll(),
                end_reason=INTERRUPTED,
                duration_s=time.monotonic() - self._started_at,
                leftovers=leftovers,
                interrupted=True,
            )
        # Duration: until the main process exited, or until the deadline (not the grace period).
        duration = min(time.monotonic(), deadline) - self._started_at
        leftovers = self.stop(grace_s)
        code = self.poll()
        return AgentOutcome(
            exit_code=code,
            end_reason=early or end_reason_for(code, deadline_hit=deadline_hit),
            duration_s=duration,
            leftovers=leftovers,
        )

    def stop(self, grace_s: float) -> int:
        """SIGTERM every process of the agent, wait up to `grace_s`, SIGKILL what is left, reap.

        Returns how many processes were signalled. Safe to call more than once."""
        if self._proc is None:
            self._restore_subreaper()
            return 0
        pgid = self._proc.pid
        targets = self.agent_pids()
        wrappers = self._wrappers()
        signalled = set(targets) | wrappers
        if targets:
            if not self.launch.sandboxed:
                _killpg(pgid, signal.SIGTERM)
            # Once per process: a second SIGTERM can land while Python finalises after the agent's
            # handler called sys.exit (handlers are reset by then) and turn its exit code into -15.
            procs.signal_pids(_outside_group(targets, pgid) - wrappers, signal.SIGTERM)
            end = time.monotonic() + grace_s
            while time.monotonic() < end:
                alive = self.agent_pids()
                if not alive or alive <= wrappers:
                    break
                new = alive - signalled  # forked during the grace period
                procs.signal_pids(new, signal.SIGTERM)
                signalled |= new
                time.sleep(_POLL_S)
            for _ in range(100):
                alive = self.agent_pids()
                if not alive:
                    break
                _killpg(pgid, signal.SIGKILL)
                procs.signal_pids(alive, signal.SIGKILL)
                signalled |= alive
                time.sleep(_POLL_S)
        self._proc.wait()
        self._close_output()
        self._restore_subreaper()
        return len(signalled)

    def _wrappers(self) -> set[int]:
        """The sandbox's bubblewrap processes (the main process and its children), if sandboxed."""
        if not self.launch.sandboxed or self._proc is None or self._proc.returncode is not None:
            return set()
        return {self._proc.pid} | procs.children_of(self._proc.pid, procs.snapshot())

    def _restore_subreaper(self) -> None:
        if not self._was_subreaper:
            # Orphans of unrelated code in this process go to init again from now on.
            procs.set_child_subreaper(False)

    # --- discovery -------------------------------------------------------------------------
    def agent_pids(self) -> set[int]:
        """Live processes of this agent (see module docstring); reaps exited ones we adopted."""
        assert self._proc is not None
        me = os.getpid()
        table = procs.snapshot()
        protected = procs.descendants(self._protected(), table)
        adopted = procs.children_of(me, table) - self._children_before - protected
        roots = {self._proc.pid} | adopted | procs.marked(ENV_AGENT_SESSION, self.launch.session, table)
        found = procs.descendants(roots, table) - protected - {me}
        zombies = {pid for pid in found if table[pid].zombie}
        # Our own zombie children (the main process is reaped by Popen, not here).
        procs.reap(pid for pid in zombies if table[pid].ppid == me and pid != self._proc.pid)
        self._proc.poll()
        return found - zombies - ({self._proc.pid} if self._proc.returncode is not None else set())

    def _close_output(self) -> None:
        if self._pump is not None:
            self._pump.join(timeout=_PUMP_JOIN_S)
        if (
            self._log is not None
            and not self._log.closed
            and (self._pump is None or not self._pump.is_alive())
        ):
            self._log.close()


def _outside_group(pids: set[int], pgid: int) -> set[int]:
    """Those of `pids` not in process group `pgid` (a `killpg` did not reach them)."""
    outside = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) != pgid:
                outside.add(pid)
    return outside


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _pump(
    stream: IO[bytes], log: IO[bytes], prefix: str | None, echo: Callable[[str], None] | None = None
) -> None:
    """Copy the agent's output to the log file (and the console) line by line until EOF."""
    with stream:
        for line in iter(stream.readline, b""):
            log.write(line)
            log.flush()
            if prefix is not None:
                text = prefix + line.decode("utf-8", errors="replace").rstrip("\r\n")
                if echo is not None:
                    echo(text)
                else:
                    sys.stdout.write(text + "\n")
                    sys.stdout.flush()


# Re-exported: the runner's modules import the end reasons from here.
__all__ = [
    "COMPLETED",
    "DEADLINE_EXCEEDED",
    "DISK_LIMIT_EXCEEDED",
    "DRIVER_BUDGET_EXHAUSTED",
    "EXEC_FAILED",
    "FAILED",
    "INTERRUPTED",
    "MEMORY_LIMIT_EXCEEDED",
    "NO_SUBMISSION",
    "PROCESS_LIMIT_EXCEEDED",
    "AgentLaunch",
    "AgentOutcome",
    "AgentSupervisor",
    "EndReason",
    "end_reason_for",
]
