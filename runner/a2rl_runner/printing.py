"""What the local runner prints: the status line of a running phase (`StatusLine`), progress
lines and the end-of-run summary."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import IO, Any

from a2rl.scores import Scored, ScoreSummary
from a2rl.scores import summarize as summarize_scores


def summarize(entries: Iterable[Mapping[str, Any]], baseline_score: float | None = None) -> ScoreSummary:
    """Scores of `entries` (items of GET /submissions or result.json documents): each has an index
    under `submission_id` or `index` and a `score` (null when invalid or not evaluated yet)."""
    scored = []
    for entry in entries:
        idx = entry.get("submission_id", entry.get("index"))
        if isinstance(idx, int):
            score = entry.get("score")
            scored.append(Scored(idx, float(score) if isinstance(score, int | float) else None))
    return summarize_scores(scored, baseline_score)


def fmt_score(score: float | None) -> str:
    return "—" if score is None else f"{score:.1f}"


def fmt_duration(seconds: float) -> str:
    s = max(round(seconds), 0)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def summary_lines(
    *,
    prefix: str,
    summary: ScoreSummary,
    end_reason: str,
    exit_code: int | None,
    duration_s: float,
    report_uri: str | None,
    workspace: str,
    store_uri: str,
) -> list[str]:
    imp = summary.improvement
    best = fmt_score(summary.best_score)
    if summary.best_submission is not None:
        best += f" (submission {summary.best_submission})"
    return [
        f"run         {prefix}",
        f"agent       {end_reason} (exit code {exit_code}) after {fmt_duration(duration_s)}",
        f"baseline    {fmt_score(summary.baseline_score)}",
        f"best        {best}",
        f"improvement {'—' if imp is None else f'{imp:+.1f}'}",
        f"submissions {summary.submissions} ({summary.valid_submissions} scored)",
        f"report      {report_uri or '— (not written)'}",
        f"workspace   {workspace}",
        f"store       {store_uri}",
    ]


def submissions_status(entries: Iterable[Mapping[str, Any]], now: float) -> tuple[str, str]:
    """(text, key) for the status line from GET /submissions (`now`: epoch seconds): `submissions
    valid/total`, the submission being evaluated with its time so far (`evaluating #3 (42s)`: no
    score and no error yet), the best score. `key` leaves out the times: it changes only when
    something happened."""
    entries = list(entries)
    summary = summarize(entries)
    text = f"submissions {summary.valid_submissions}/{summary.submissions} valid"
    key = text
    current = evaluating(entries, now)
    if current is not None:
        index, waited = current
        text += f"  evaluating #{index}" + (f" ({fmt_duration(waited)})" if waited is not None else "")
        key += f" evaluating #{index}"
    best = f"  best {fmt_score(summary.best_score)}"
    if summary.best_submission is not None:
        best += f" (#{summary.best_submission})"
    return text + best, key + best


def evaluating(entries: Iterable[Mapping[str, Any]], now: float) -> tuple[int, float | None] | None:
    """The submission being evaluated (the oldest with neither a score nor an error yet) and the
    seconds since it was submitted (None when unknown); None when there is none."""
    pending = [
        (idx, _epoch(e.get("submitted_at")))
        for e in entries
        if e.get("score") is None and not e.get("error") and isinstance(idx := e.get("submission_id"), int)
    ]
    if not pending:
        return None
    index, since = min(pending, key=lambda p: p[0])
    return index, (now - since if since is not None else None)


def _epoch(stamp: object) -> float | None:
    """Epoch seconds of a stored timestamp (ISO 8601 UTC, `a2rl.records.times.iso_utc`)."""
    if isinstance(stamp, int | float):
        return float(stamp)
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class StatusLine:
    """The runner's console while a phase runs.

    On a terminal: one status line, redrawn in place (``\\r`` and clear-to-end-of-line), kept
    below the ordinary lines (`say`) and the agent's echoed output. Elsewhere (a pipe, a log
    file, CI): a timestamped line only when the status changes (its `key`) or every `plain_every_s`
    seconds, so a long phase prints a handful of lines rather than one every few seconds.
    Thread-safe: the agent's output pump and the ticker of a blocking phase call it too."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        enabled: bool = True,
        tty: bool | None = None,
        plain_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = enabled
        self.tty = self.stream.isatty() if tty is None else tty
        self.plain_every_s = plain_every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._shown = ""  # the status text on screen (TTY)
        self._last_key: str | None = None
        self._last_plain = 0.0

    def say(self, line: str) -> None:
        """An ordinary line, printed above the status line."""
        if not self.enabled:
            return
        with self._lock:
            if self.tty and self._shown:
                self._emit("\r\x1b[K" + line + "\n" + self._fit(self._shown))
            else:
                self._emit(line + "\n")

    __call__ = say

    def update(self, text: str, key: str | None = None) -> None:
        """Show `text` as the status. `key`: what counts as a change (default the text itself)."""
        if not self.enabled:
            return
        key = text if key is None else key
        with self._lock:
            if self.tty:
                self._shown = text
                self._emit("\r\x1b[K" + self._fit(text))
            else:
                now = self.clock()
                if key == self._last_key and now - self._last_plain < self.plain_every_s:
                    return
                self._last_key, self._last_plain = key, now
                self._emit(f"{time.strftime('%H:%M:%S')} {text}\n")

    def clear(self) -> None:
        """Remove the status line (before the summary); the next `update` shows one again."""
        with self._lock:
            if self.enabled and self.tty and self._shown:
                self._emit("\r\x1b[K")
            self._shown = ""
            self._last_key = None

    @contextlib.contextmanager
    def ticking(self, status: Callable[[], tuple[str, str | None]], every_s: float = 1.0) -> Iterator[None]:
        """While the block runs (a blocking phase: the baseline's evaluation, the wrap-up), a thread
        updates the status from `status()` (text, key) every `every_s` seconds; cleared at the end.
        Off a terminal the first line comes only after `plain_every_s` (or a change of key)."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                with contextlib.suppress(Exception):  # a status that cannot be read is skipped
                    self.update(*status())

        thread = threading.Thread(target=loop, name="a2rl-status", daemon=True)
        if self.enabled:
            if not self.tty:  # the phase's start was said: its first plain line comes after a while
                with contextlib.suppress(Exception):
                    text, key = status()
                    with self._lock:
                        self._last_key, self._last_plain = (text if key is None else key), self.clock()
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join(timeout=5.0)
            self.clear()

    def _emit(self, text: str) -> None:
        """Write and flush (the lock held). A terminal that went away (EIO; a closed pipe: EPIPE)
        takes nothing more: the output goes to /dev/null from then on, and the run carries on to
        its end (the SIGHUP that follows a closed terminal ends it as an interrupt)."""
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError:
            self.stream = open(os.devnull, "w")  # noqa: SIM115 (kept for the rest of the run)
            self.tty = False

    def _fit(self, text: str) -> str:
        """`text` cut to the terminal's width: a wrapped line could not be redrawn in place."""
        width = shutil.get_terminal_size(fallback=(120, 24)).columns
        return text if len(text) < width else text[: max(width - 2, 1)] + "…"
