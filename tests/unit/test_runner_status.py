"""The local runner's console (`a2rl_runner.printing.StatusLine`): one status line redrawn in place
on a terminal, a few timestamped lines elsewhere, agent output kept above the status."""

from __future__ import annotations

import errno
import io
import os
import pty
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from a2rl_runner.printing import StatusLine, evaluating, submissions_status
from a2rl_runner.supervisor import AgentLaunch, AgentSupervisor


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.01)
    return check()


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO once the other side is closed and drained
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode()


def test_status_line_on_a_pseudo_terminal_is_redrawn_in_place() -> None:
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    status = StatusLine(stream)
    assert status.tty  # detected from the stream
    status.update("[a2rl] agent running  5s elapsed")
    status.update("[a2rl] agent running  6s elapsed")
    status("agent | step 10")
    status.update("[a2rl] agent running  7s elapsed")
    status.clear()
    status("[a2rl] agent ended")
    stream.close()
    out = _read_all(master).replace("\r\n", "\n")  # the terminal's own newline translation
    os.close(master)
    # No newline between two updates: the second overwrites the first on the same line.
    assert "\r\x1b[K[a2rl] agent running  5s elapsed\r\x1b[K[a2rl] agent running  6s elapsed" in out
    # An ordinary line clears the status, is printed, and the status comes back below it.
    assert "\r\x1b[Kagent | step 10\n[a2rl] agent running  6s elapsed" in out
    assert out.endswith("\r\x1b[K[a2rl] agent ended\n")
    assert out.count("\n") == 2  # only the two ordinary lines end a line


def test_status_line_is_cut_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    stream = io.StringIO()
    StatusLine(stream, tty=True).update("x" * 100)
    shown = stream.getvalue().removeprefix("\r\x1b[K")
    assert len(shown) < 40 and shown.endswith("…")


def test_plain_output_of_a_long_phase_is_a_few_lines() -> None:
    """Off a terminal: a line when the status changes, else one a minute, however often it ticks."""
    stream, clock = io.StringIO(), _Clock()
    status = StatusLine(stream, tty=False, plain_every_s=60.0, clock=clock)
    for second in range(0, 491):  # the baseline evaluation users waited 491 s for
        clock.now = float(second)
        status.update(f"[a2rl] scoring the base model: still evaluating ({second}s)", key="baseline")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 9  # at 0 s, then every 60 s
    assert all(line[2] == ":" and line[5] == ":" and " [a2rl] " in line for line in lines)  # timestamped
    assert "(60s)" in lines[1]
    # A change of key is printed at once.
    clock.now = 491.5
    status.update("[a2rl] agent running  submissions 1/1 valid", key="s1")
    assert stream.getvalue().splitlines()[-1].endswith("submissions 1/1 valid")


def test_quiet_prints_nothing() -> None:
    stream = io.StringIO()
    status = StatusLine(stream, enabled=False, tty=True)
    status("[a2rl] line")
    status.update("status")
    with status.ticking(lambda: ("still", None), every_s=0.01):
        time.sleep(0.05)
    assert stream.getvalue() == ""


def test_ticking_updates_a_blocking_phase_and_clears_it() -> None:
    stream = io.StringIO()
    status = StatusLine(stream, tty=True)
    calls = []

    def current() -> tuple[str, str | None]:
        calls.append(1)
        return f"[a2rl] still evaluating ({len(calls)})", "eval"

    with status.ticking(current, every_s=0.01):
        assert _until(lambda: len(calls) >= 3)
    out = stream.getvalue()
    assert "[a2rl] still evaluating (1)" in out and len(calls) >= 3
    assert out.endswith("\r\x1b[K")  # cleared: the next line starts on a clean line


def test_ticking_off_a_terminal_waits_before_its_first_line() -> None:
    stream, clock = io.StringIO(), _Clock()
    status = StatusLine(stream, tty=False, plain_every_s=60.0, clock=clock)
    with status.ticking(lambda: (f"[a2rl] still evaluating ({clock.now:.0f}s)", "eval"), every_s=0.01):
        time.sleep(0.1)
        assert stream.getvalue() == ""  # the phase's start line was said already
        clock.now = 61.0
        assert _until(lambda: "61s" in stream.getvalue())
    assert stream.getvalue().splitlines()[-1].endswith("still evaluating (61s)")
    assert len(stream.getvalue().splitlines()) == 1


def test_submissions_status_names_the_submission_being_evaluated() -> None:
    stamp = "2027-01-15T08:00:00Z"  # as the recorder stores it (`iso_utc`)
    submitted = datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    entries: list[dict[str, Any]] = [
        {"submission_id": 1, "score": 3.5, "error": None, "submitted_at": stamp},
        {"submission_id": 2, "score": None, "error": "invalid config", "submitted_at": stamp},
        {"submission_id": 3, "score": None, "error": None, "submitted_at": stamp},
    ]
    now = submitted + 42
    text, key = submissions_status(entries, now)
    assert text == "submissions 1/3 valid  evaluating #3 (42s)  best 3.5 (#1)"
    later, key_later = submissions_status(entries, now + 10)
    assert "(52s)" in later and key_later == key  # only time passed: no change
    assert evaluating(entries, now) == (3, 42.0)
    assert evaluating(entries[:2], now) is None
    assert submissions_status([], now) == ("submissions 0/0 valid  best —", "submissions 0/0 valid  best —")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_agent_output_goes_through_the_echo(tmp_path: Path) -> None:
    lines: list[str] = []
    lock = threading.Lock()

    def echo(line: str) -> None:
        with lock:
            lines.append(line)

    launch = AgentLaunch(
        argv=["bash", "-c", "echo one; printf 'two\\r\\n'; printf three"],
        env={"PATH": os.environ["PATH"]},
        cwd=tmp_path,
        log_path=tmp_path / "agent.log",
        console_prefix="agent | ",
        echo=echo,
    )
    assert AgentSupervisor(launch).run(budget_s=30, grace_s=1).exit_code == 0
    assert lines == ["agent | one", "agent | two", "agent | three"]


def test_a_terminal_that_went_away_takes_no_more_output_and_raises_nothing() -> None:
    """The user's terminal closes (a dropped ssh session): writes to it fail with EIO before the
    SIGHUP arrives. The runner must not die of that write (it did: exit 1, no end reason)."""

    class LostTerminal(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.EIO, "Input/output error")

        def isatty(self) -> bool:
            return True

    lost = LostTerminal()
    line = StatusLine(lost, plain_every_s=0)
    line.update("baseline: evaluating")
    line.say("[a2rl] agent: started")
    line.clear()
    assert line.stream is not lost and line.tty is False
    line.say("still fine")
