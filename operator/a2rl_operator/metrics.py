"""The operator's Prometheus metrics (`GET /metrics` on the probe server, docs/operator.md).

What a platform team watches: BenchRuns by phase and end reason, how long runs waited for Kueue
and submissions for their eval Job, the evaluation backlog, each run's driver spend, and the
operator's own handlers (latency, errors) and leadership.

Run and submission series are recomputed at each scrape from a table fed by kopf's watch events
(`observe_run`, `observe_submission`): the gauges stay true across restarts and deletions, while
the wait histograms count each run or submission once, when its wait first becomes known.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf

from a2rl.metrics import Histogram, Registry
from a2rl.runs import parse_time
from a2rl_operator import status as st

F = TypeVar("F", bound=Callable[..., Any])

# Seconds: a queue or eval wait runs from seconds to hours.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)


@dataclass(frozen=True)
class RunSeen:
    namespace: str
    name: str
    phase: str
    reason: str
    driver_tokens: int | None
    driver_cost_usd: float | None


def run_seen(body: Mapping[str, Any]) -> RunSeen:
    """What the metrics keep of a BenchRun: its phase, end reason (terminal runs) and driver spend."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    # The wire conditions as they are (no model validation: this runs on every watch event).
    conds = [dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    outcome, reason, _ = st.run_outcome(conds)
    phase = str(status.get("phase") or st.derive_phase(conds))
    return RunSeen(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        phase=phase,
        reason=reason if outcome != st.Outcome.IN_FLIGHT else "",
        driver_tokens=status.get("driverTokens"),
        driver_cost_usd=status.get("driverCostUSD"),
    )


def _seconds_between(start: Any, end: Any) -> float | None:
    a, b = parse_time(start), parse_time(end)
    return None if a is None or b is None else max(0.0, (b - a).total_seconds())


class OperatorMetrics:
    """The operator's registry and the tables behind its per-object series."""

    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        self.runs = r.gauge("a2rl_benchruns", "BenchRuns the operator sees, by phase and end reason.",
                            ["phase", "reason"])  # fmt: skip
        self.submissions = r.gauge(
            "a2rl_benchsubmissions", "BenchSubmissions by evaluation state.", ["state"]
        )
        self.queue_wait = r.histogram(
            "a2rl_benchrun_queue_wait_seconds",
            "Seconds a queued run's workspace Job waited for Kueue's admission.",
            buckets=WAIT_BUCKETS,
        )
        self.eval_wait = r.histogram(
            "a2rl_benchsubmission_eval_wait_seconds",
            "Seconds from a submission's creation to the start of its evaluation.",
            buckets=WAIT_BUCKETS,
        )
        self.driver_tokens = r.gauge(
            "a2rl_benchrun_driver_tokens", "Driver tokens a run's agent stack spent.", ["namespace", "run"]
        )
        self.driver_cost = r.gauge(
            "a2rl_benchrun_driver_cost_usd", "Driver cost (USD) of a run's agent stack.", ["namespace", "run"]
        )
        self.handler_seconds = r.histogram(
            "a2rl_operator_handler_seconds", "Wall time of the operator's handlers.", ["handler"]
        )
        self.handler_errors = r.counter(
            "a2rl_operator_handler_errors_total",
            "Handler calls that raised: temporary (retried), permanent, or an unexpected exception.",
            ["handler", "kind"],
        )
        self.leader = r.gauge("a2rl_operator_leader", "1 while this replica leads (or runs alone), else 0.")
        self._lock = threading.Lock()
        self._runs: dict[str, RunSeen] = {}
        self._submissions: dict[str, str] = {}
        self._waits_seen: set[tuple[str, str]] = set()
        r.on_collect(self._collect)

    def observe_run(self, body: Mapping[str, Any], event: str | None) -> None:
        uid = str((body.get("metadata") or {}).get("uid") or "")
        if uid and not self._forget(self._runs, uid, event):
            with self._lock:
                self._runs[uid] = run_seen(body)
            wait = (body.get("status") or {}).get("queueWaitSeconds")
            self._observe_once(self.queue_wait, "queue", uid, None if wait is None else float(wait))

    def observe_submission(self, body: Mapping[str, Any], event: str | None) -> None:
        meta, status = body.get("metadata") or {}, body.get("status") or {}
        uid = str(meta.get("uid") or "")
        if uid and not self._forget(self._submissions, uid, event):
            with self._lock:
                self._submissions[uid] = str(status.get("state") or "Pending")
            started = status.get("startedAt")
            self._observe_once(
                self.eval_wait, "eval", uid, _seconds_between(meta.get("creationTimestamp"), started)
            )

    def _forget(self, table: dict[str, Any], uid: str, event: str | None) -> bool:
        """On a DELETED event: drop the object (its series go at the next scrape); True then."""
        if event != "DELETED":
            return False
        with self._lock:
            table.pop(uid, None)
            self._waits_seen.difference_update({("queue", uid), ("eval", uid)})
        return True

    def _observe_once(self, histogram: Histogram, kind: str, uid: str, seconds: float | None) -> None:
        """Count `seconds` into `histogram` the first time an object's wait is known, never again."""
        if seconds is None:
            return
        with self._lock:
            if (kind, uid) in self._waits_seen:
                return
            self._waits_seen.add((kind, uid))
        histogram.observe(seconds)

    def _collect(self) -> None:
        with self._lock:
            runs = list(self._runs.values())
            states = Tally(self._submissions.values())
        self.runs.set_all(dict(Tally((r.phase, r.reason) for r in runs)))
        self.submissions.set_all({(s,): n for s, n in states.items()})
        self.driver_tokens.set_all(
            {(r.namespace, r.name): r.driver_tokens for r in runs if r.driver_tokens is not None}
        )
        self.driver_cost.set_all(
            {(r.namespace, r.name): r.driver_cost_usd for r in runs if r.driver_cost_usd is not None}
        )

    def render(self) -> str:
        return self.registry.render()


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, kopf.TemporaryError):
        return "temporary"
    if isinstance(exc, kopf.PermanentError):
        return "permanent"
    return "exception"


def timed(fn: F) -> F:
    """`fn` as a kopf handler that records its wall time and failures in `memo.metrics` (when the
    memo has them). Same name, so kopf's handler id (and its progress annotations) stays."""

    @functools.wraps(fn)
    def handler(*args: Any, **kwargs: Any) -> Any:
        metrics: OperatorMetrics | None = getattr(kwargs.get("memo"), "metrics", None)
        if metrics is None:
            return fn(*args, **kwargs)
        start = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            metrics.handler_errors.inc(handler=fn.__name__, kind=_error_kind(exc))
            raise
        finally:
            metrics.handler_seconds.observe(time.monotonic() - start, handler=fn.__name__)

    return handler  # type: ignore[return-value]


# The two event handlers only update memory: on kopf's event loop, not a worker thread per event.
async def on_run_event(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    metrics: OperatorMetrics | None = getattr(memo, "metrics", None)
    if metrics is not None:
        metrics.observe_run(body, type)


async def on_submission_event(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    metrics: OperatorMetrics | None = getattr(memo, "metrics", None)
    if metrics is not None:
        metrics.observe_submission(body, type)
