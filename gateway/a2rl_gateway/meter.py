"""`Meter`: the run's driver totals and budget, and the records in the store. Thread-safe.

Every call gets a number when it arrives (`next_index`). Before it goes upstream, `admit` reserves
the most it may use, or refuses it (`a2rl_gateway.budget`: the first refusal ends the budget). When
its answer is complete but before the agent has its end, `account(record, reservation)` releases
the reservation, adds the call's usage and cost to the totals and decides whether the budget is
now exhausted (`exhausted` is set at once); then `persist` hands the redacted record
to one writer thread, which scrubs credential-shaped text from it (`redact_patterns`), writes
`driver/calls/<n>.json`, rewrites `driver/summary.json` (in
call order) and, the first time the budget was found exhausted, calls `on_exhausted(reason)`
(once). The agent's next call never waits for the store; `close` waits for the writer.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping

from a2rl.records.base import write_record
from a2rl.records.driver import (
    DriverBudgetState,
    DriverCallRecord,
    DriverSummary,
    DriverTotals,
    DriverUsage,
    add_call,
)
from a2rl.records.times import utc_now
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl_gateway.budget import Limits, Reservation, exhausted_reason, refusal_message
from a2rl_gateway.pricing import Price, cost
from a2rl_gateway.redact import redact_patterns

log = logging.getLogger(__name__)


def count_call(totals: DriverTotals | DriverSummary, record: DriverCallRecord) -> None:
    """Add one call record to running totals (pure apart from mutating `totals`)."""
    add_call(
        totals, status=record.status, usage=record.usage, cost_usd=record.cost_usd, latency_s=record.latency_s
    )


class Meter:
    def __init__(
        self,
        *,
        limits: Limits,
        prices: Mapping[str, Price],
        store: ObjectStore | None = None,
        layout: RunLayout | None = None,
        provider: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        on_exhausted: Callable[[str], None] | None = None,
    ) -> None:
        self.limits = limits
        self.prices = dict(prices)
        self._store = store
        self._layout = layout
        self._on_exhausted = on_exhausted
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._next = 0
        self._reserved = Reservation()
        #: Why `admit` found the budget exhausted, until the refused call's `account` reports it.
        self._newly: str | None = None
        self._written_calls = 0
        self._queue: queue.Queue[tuple[DriverCallRecord, DriverSummary, str | None]] = queue.Queue()
        self._writer: threading.Thread | None = None
        self.summary = DriverSummary(
            provider=provider,
            base_url=base_url,
            model=model,
            budget=DriverBudgetState(driver_tokens=limits.tokens, driver_cost_usd=limits.cost_usd),
        )
        self.exhausted = threading.Event()
        self.refused = threading.Event()
        reason = exhausted_reason(limits, 0, 0.0)  # a zero budget allows no call at all
        self._initially_exhausted = reason
        if reason is not None:
            budget = self.summary.budget
            budget.exhausted, budget.exhausted_at, budget.reason = True, utc_now(), reason
            self.exhausted.set()

    def announce(self) -> None:
        """Tell `on_exhausted` about a budget that was zero from the start (once serving)."""
        if self._initially_exhausted is not None and self._on_exhausted is not None:
            self._on_exhausted(self._initially_exhausted)

    # --- decisions ----------------------------------------------------------------------------
    def next_index(self) -> int:
        with self._lock:
            self._next += 1
            return self._next

    def refusal(self) -> str | None:
        """The message a new call is refused with once the budget is exhausted, else None."""
        with self._lock:
            reason = self.summary.budget.reason if self.summary.budget.exhausted else None
        return refusal_message(reason) if reason else None

    def admit(self, reservation: Reservation) -> str | None:
        """Reserve `reservation` for a call about to go upstream, or the message it is refused with:
        the budget is exhausted, or (for a call that may cost something) what is spent and reserved
        already reaches a limit, which exhausts it now."""
        newly: str | None = None
        with self._lock:
            budget = self.summary.budget
            if not budget.exhausted and not reservation.empty:
                s = self.summary
                newly = exhausted_reason(self.limits, s.total_tokens, s.cost_usd, self._reserved)
                if newly is not None:
                    budget.exhausted, budget.exhausted_at, budget.reason = True, utc_now(), newly
                    self._newly = newly
            refused = (budget.reason or "the run's driver budget is exhausted") if budget.exhausted else None
            if refused is None:
                self._reserved = Reservation(
                    self._reserved.tokens + reservation.tokens, self._reserved.cost_usd + reservation.cost_usd
                )
        if newly is not None:
            self.exhausted.set()
        return None if refused is None else refusal_message(refused)

    @property
    def reserved(self) -> Reservation:
        """What the calls in flight hold."""
        with self._lock:
            return self._reserved

    def price(self, model: str | None, usage: DriverUsage) -> tuple[float, bool]:
        return cost(self.prices, model, usage)

    # --- accounting ---------------------------------------------------------------------------
    def finish(self, record: DriverCallRecord, reservation: Reservation | None = None) -> None:
        """Count a finished call (refused ones too) and record it (`account`, then `persist`)."""
        self.persist(record, *self.account(record, reservation))

    def account(
        self, record: DriverCallRecord, reservation: Reservation | None = None
    ) -> tuple[DriverSummary, str | None]:
        """Release the call's `reservation` (what `admit` reserved), add the call to the totals and
        decide the budget (in memory, before the agent gets the end of its answer, so its next call
        is judged with this one counted). Returns the summary to write and, the first time the
        budget is found exhausted, why."""
        with self._lock:
            newly, self._newly = self._newly, None
            if reservation is not None:
                self._reserved = Reservation(
                    max(0, self._reserved.tokens - reservation.tokens),
                    max(0.0, self._reserved.cost_usd - reservation.cost_usd),
                )
            s = self.summary
            count_call(s, record)
            s.total_tokens = s.input_tokens + s.output_tokens
            s.mean_latency_s = s.latency_s / s.calls if s.calls else None
            s.updated_at = utc_now()
            model = record.response_model or record.request_model
            if model and record.usage is not None:
                per = s.per_model.setdefault(model, DriverTotals())
                count_call(per, record)
            if not record.priced and record.usage is not None and record.usage.total_tokens:
                s.unpriced_calls += 1
                if model and model not in s.unpriced_models:
                    s.unpriced_models = [*s.unpriced_models, model]
            if record.usage_missing:
                s.usage_missing_calls += 1
            if record.refused == "budget_exhausted":
                s.budget.refused_calls += 1
                if s.budget.first_refused_at is None:
                    s.budget.first_refused_at = record.finished_at or utc_now()
            if not s.budget.exhausted:
                reason = exhausted_reason(self.limits, s.total_tokens, s.cost_usd)
                if reason is not None:
                    s.budget.exhausted, s.budget.exhausted_at, s.budget.reason = True, utc_now(), reason
                    newly = reason
            snapshot = s.model_copy(deep=True)
        if newly is not None:
            log.warning("%s", newly)
            self.exhausted.set()
        return snapshot, newly

    def persist(self, record: DriverCallRecord, summary: DriverSummary, newly: str | None) -> None:
        """Queue the call's record and the summary `account` returned for the writer thread, which
        then tells `on_exhausted` (the runner reads a summary that already says so)."""
        if record.refused == "budget_exhausted":
            self.refused.set()
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._drain, name="a2rl-gateway-writer", daemon=True)
                self._writer.start()
        self._queue.put((record, summary, newly))

    def _drain(self) -> None:
        while True:
            record, summary, newly = self._queue.get()
            try:
                self._write(record, summary)
                if newly is not None and self._on_exhausted is not None:
                    self._on_exhausted(newly)
            except Exception:
                log.exception("recording driver call %d failed", record.index)
            finally:
                self._queue.task_done()

    def close(self, timeout_s: float = 30.0) -> bool:
        """Wait (at most `timeout_s`) until every queued record is written; then write the summary.
        False when records were still waiting."""
        end = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.01)
        done = not self._queue.unfinished_tasks
        self.flush_summary()
        return done

    def snapshot(self) -> DriverSummary:
        with self._lock:
            return self.summary.model_copy(deep=True)

    def _write(self, record: DriverCallRecord, summary: DriverSummary) -> None:
        if self._store is None or self._layout is None:
            return
        try:
            # Credential-shaped text goes here, on the writer thread (the known secrets are gone).
            record = DriverCallRecord.model_validate(redact_patterns(record.to_json()))
            write_record(self._store, self._layout.driver_call(record.index), record)
        except Exception:
            log.exception("could not write driver call %d to the store", record.index)
        # Summaries are written in order: a slower writer never replaces a newer one.
        with self._write_lock:
            if summary.calls < self._written_calls:
                return
            self._written_calls = summary.calls
            try:
                write_record(self._store, self._layout.driver_summary, summary)
            except Exception:
                log.exception("could not write the driver summary to the store")

    def flush_summary(self) -> None:
        """Write the summary now (at shutdown)."""
        if self._store is None or self._layout is None:
            return
        with self._write_lock:
            try:
                write_record(self._store, self._layout.driver_summary, self.snapshot())
            except Exception:
                log.exception("could not write the driver summary to the store")
