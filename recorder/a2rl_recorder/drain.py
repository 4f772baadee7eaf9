"""The recorder's drain on SIGTERM: one deadline for all of it, and its outcome told.

Order: submissions close (503) → in cluster mode the recorder stops waiting for evaluation
results (the evaluations go on in the cluster and the operator records their scores), so a
submission in flight only has to be recorded (its snapshot stored, its BenchSubmission created)
→ the submissions in flight finish, else are cancelled → a final code revision → the spool
reaches the store. All of it within `drain_timeout_s` of the SIGTERM, plus at most
`RECORDER_DRAIN_MARGIN_S` for what follows the deadline (the cancel, the flusher's stop); the
workspace pod's termination grace is sized from the same two values
(`a2rl_operator.manifests.job.recorder_drain_budget_s`).

The outcome (how long it took, whether submissions were cut, what stayed in the spool) is logged
and, in a pod, written to the container's termination message (`A2RL_TERMINATION_MESSAGE_PATH`),
so `kubectl describe pod` shows what a cut drain lost.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from a2rl_recorder.service import Recorder
from a2rl_recorder.snapshots import CodeWatcher
from a2rl_recorder.spool import SpoolingStore

log = logging.getLogger(__name__)

#: After a cancel, how long the cancelled submissions get to return (part of the margin).
CANCEL_WAIT_S = 5.0


@runtime_checkable
class Cancellable(Protocol):
    def cancel(self) -> None:
        """Give up the submissions in flight (kill an eval process, stop a wait)."""


@runtime_checkable
class EndAware(Protocol):
    def stop_waiting(self) -> None:
        """The run is ending: return a submission once it is recorded, not when it is scored."""


@dataclass(frozen=True)
class DrainOutcome:
    seconds: float
    #: Submissions still in flight at the deadline (cancelled: an eval killed, a wait given up).
    submissions_cut: bool
    #: Objects the store never got (they stay in the spool directory).
    spool_left: int

    @property
    def complete(self) -> bool:
        return not self.submissions_cut and self.spool_left == 0

    def message(self) -> str:
        if self.complete:
            return f"drained in {self.seconds:.1f} s: everything recorded is in the store"
        parts = []
        if self.submissions_cut:
            parts.append("submissions in flight were cut at the deadline")
        if self.spool_left:
            parts.append(f"{self.spool_left} object(s) never reached the store (left in the spool)")
        return f"drain cut after {self.seconds:.1f} s: " + "; ".join(parts)


def drain(
    recorder: Recorder,
    dispatcher: object,
    watcher: CodeWatcher,
    spool: SpoolingStore,
    timeout_s: float,
) -> DrainOutcome:
    """Drain within `timeout_s` from now (see the module doc)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s

    def left() -> float:
        return max(0.0, deadline - time.monotonic())

    recorder.close_submissions()
    if isinstance(dispatcher, EndAware):
        dispatcher.stop_waiting()
    cut = not recorder.wait_idle(left())
    if cut:
        log.warning("drain deadline (%.0f s): cancelling the submissions in flight", timeout_s)
        if isinstance(dispatcher, Cancellable):
            dispatcher.cancel()
        recorder.wait_idle(CANCEL_WAIT_S)
    try:
        watcher.stop(final=True)
    except Exception:
        log.exception("final code snapshot failed")
    flushed = spool.close(left(), join_s=CANCEL_WAIT_S)
    outcome = DrainOutcome(
        seconds=time.monotonic() - t0,
        submissions_cut=cut,
        spool_left=0 if flushed else spool.pending(),
    )
    (log.info if outcome.complete else log.error)("recorder %s", outcome.message())
    return outcome


def write_termination_message(path: Path | None, outcome: DrainOutcome) -> None:
    """The outcome as the container's termination message (Kubernetes keeps up to 4 KiB)."""
    if path is None:
        return
    try:
        path.write_text(outcome.message() + "\n", encoding="utf-8")
    except OSError as exc:
        log.warning("could not write the termination message to %s: %s", path, exc)
