"""`Meter`: the run's driver totals and budget, and the records in the store. Thread-safe.

Every call gets a number when it arrives (`next_index`). Before it goes upstream, `admit` reserves
the most it may use, or refuses it (`a2rl_gateway.budget`: the first refusal ends the budget). When
its answer is complete but before the agent has its end, `account(record, reservation)` releases
the reservation, adds the call's usage and cost to the totals and decides whether the budget is
now exhausted (`exhausted` is set at once): a few dictionary updates under a lock, nothing copied.
Then `persist` queues the record for one writer thread, off the agent's path: every `BATCH_S` (at
once when the budget was just exhausted, or on `close`) it takes what is queued, scrubs each record
of the known secrets and of credential-shaped text (`redact.scrub_record`), writes them as one
object, `driver/calls/<n>.jsonl` (`a2rl.records.driver_calls`: a record a line, n = the batch's
lowest call; a batch over `BATCH_MAX_BYTES` is split), then `driver/summary.json` once for the batch
and, the first time the budget was found exhausted, calls `on_exhausted(reason)` (once: the runner
reads a summary that already says so). `close` waits for the writer, so no record is lost on a stop.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from a2rl.records.driver import (
    DriverBudgetState,
    DriverCallRecord,
    DriverSummary,
    DriverTotals,
    DriverUsage,
    add_call,
)
from a2rl.records.driver_calls import encode_batch
from a2rl.records.times import utc_now
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl_gateway.budget import Limits, Reservation, exhausted_reason, refusal_message
from a2rl_gateway.metrics import GatewayMetrics
from a2rl_gateway.pricing import Price, lookup
from a2rl_gateway.redact import may_hold_secrets, scrub_record

log = logging.getLogger(__name__)

#: How long the writer gathers records into one batch (one object and one summary write per batch).
BATCH_S = 0.05
#: A batch's records go into objects of at most this many bytes (a bigger record gets its own).
BATCH_MAX_BYTES = 8 << 20


def count_call(totals: DriverTotals | DriverSummary, record: DriverCallRecord) -> None:
    """Add one call record to running totals (pure apart from mutating `totals`)."""
    add_call(
        totals, status=record.status, usage=record.usage, cost_usd=record.cost_usd, latency_s=record.latency_s
    )


def _put_batch(store: ObjectStore, layout: RunLayout, chunk: Sequence[tuple[int, str]]) -> None:
    """Write (call number, line) pairs as one batch object (logged and lost when the store fails)."""
    first, last = min(i for i, _ in chunk), max(i for i, _ in chunk)
    try:
        store.put_bytes(layout.driver_call_batch(first), encode_batch(line for _, line in chunk))
    except Exception:
        log.exception("could not write driver calls %d-%d (%d) to the store", first, last, len(chunk))


def _compact(doc: dict[str, Any]) -> str:
    """A record as JSON without indentation: `json` encodes that in C, ten times faster than the
    indented form `ObjectStore.put_json` writes (its readers parse either)."""
    return json.dumps(doc, sort_keys=True)


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
        secrets: Sequence[str] = (),
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.limits = limits
        self._secrets = tuple(secrets)
        self.metrics = metrics if metrics is not None else GatewayMetrics()
        if limits.tokens is not None:
            self.metrics.budget_tokens.set(limits.tokens)
        if limits.cost_usd is not None:
            self.metrics.budget_cost.set(limits.cost_usd)
        self.prices = dict(prices)
        #: model → its entry (`pricing.lookup` normalises every entry of the table per look-up).
        self._priced: dict[str | None, Price | None] = {}
        self._store = store
        self._layout = layout
        self._on_exhausted = on_exhausted
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._next = 0
        self._reserved = Reservation()
        #: Why `admit` found the budget exhausted, until the refused call's `account` reports it.
        self._newly: str | None = None
        self._queue: queue.Queue[tuple[DriverCallRecord, str | None]] = queue.Queue()
        self._wake = threading.Event()
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
            self._mark_exhausted()

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
            self._mark_exhausted()
        return None if refused is None else refusal_message(refused)

    @property
    def reserved(self) -> Reservation:
        """What the calls in flight hold."""
        with self._lock:
            return self._reserved

    def price(self, model: str | None, usage: DriverUsage) -> tuple[float, bool]:
        """(cost in USD, whether the model had a price): `pricing.cost`, its look-ups cached."""
        if model in self._priced:
            entry = self._priced[model]
        else:
            found = lookup(self.prices, model)
            entry = None if found is None else found[1]
            if len(self._priced) < 1024:  # model names come from the agent: bounded
                self._priced[model] = entry
        return (0.0, False) if entry is None else (entry.cost(usage), True)

    # --- accounting ---------------------------------------------------------------------------
    def finish(self, record: DriverCallRecord, reservation: Reservation | None = None) -> None:
        """Count a finished call (refused ones too) and record it (`account`, then `persist`)."""
        self.persist(record, self.account(record, reservation))

    def account(self, record: DriverCallRecord, reservation: Reservation | None = None) -> str | None:
        """Release the call's `reservation` (what `admit` reserved), add the call to the totals and
        decide the budget (in memory, before the agent gets the end of its answer, so its next call
        is judged with this one counted). Returns why the budget is exhausted, the first time it is
        found so."""
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
        self.metrics.count(record)
        if newly is not None:
            log.warning("%s", newly)
            self._mark_exhausted()
        return newly

    def _mark_exhausted(self) -> None:
        self.metrics.exhausted.set(1)
        self.exhausted.set()

    def persist(self, record: DriverCallRecord, newly: str | None = None) -> None:
        """Queue the call's record (the handler no longer touches it) for the writer thread, with
        what `account` returned (the writer then tells `on_exhausted`)."""
        if record.refused == "budget_exhausted":
            self.refused.set()
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._drain, name="a2rl-gateway-writer", daemon=True)
                self._writer.start()
        self._queue.put((record, newly))
        if newly is not None:
            self._wake.set()

    def _drain(self) -> None:
        while True:
            batch = [self._queue.get()]
            if batch[0][1] is None:
                self._wake.wait(BATCH_S)  # gather a batch (not when the budget just ended)
            self._wake.clear()
            try:
                while True:
                    batch.append(self._queue.get_nowait())
            except queue.Empty:
                pass
            try:
                self._write_calls([record for record, _ in batch])
                self.flush_summary()
                for _, newly in batch:
                    if newly is not None and self._on_exhausted is not None:
                        self._on_exhausted(newly)
            except Exception:
                log.exception("recording driver calls %d-%d failed", batch[0][0].index, batch[-1][0].index)
            finally:
                for _ in batch:
                    self._queue.task_done()

    def close(self, timeout_s: float = 30.0) -> bool:
        """Wait (at most `timeout_s`) until every queued record is written; then write the summary.
        False when records were still waiting."""
        end = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < end:
            self._wake.set()
            time.sleep(0.005)
        done = not self._queue.unfinished_tasks
        self.flush_summary()
        return done

    def snapshot(self) -> DriverSummary:
        with self._lock:
            return self.summary.model_copy(deep=True)

    def _encode(self, record: DriverCallRecord) -> str | None:
        """The record's line: compact JSON, scrubbed of secrets (None, logged, when it cannot be)."""
        try:
            # pydantic's own encoder: a quarter of the CPU of `model_dump` and then `json.dumps`
            text = record.model_dump_json(ensure_ascii=True)
            if may_hold_secrets(text, self._secrets):  # most records do not: no walk
                text = _compact(scrub_record(record.to_json(), self._secrets))
            return text
        except Exception:
            log.exception("could not encode driver call %d", record.index)
            return None

    def _write_calls(self, records: Sequence[DriverCallRecord]) -> None:
        """One batch's records as `driver/calls/<n>.jsonl` objects (split at `BATCH_MAX_BYTES`)."""
        store, layout = self._store, self._layout
        if store is None or layout is None:
            return
        chunk: list[tuple[int, str]] = []
        size = 0
        for record in records:
            line = self._encode(record)
            if line is None:
                continue
            if chunk and size + len(line) > BATCH_MAX_BYTES:
                _put_batch(store, layout, chunk)
                chunk, size = [], 0
            chunk.append((record.index, line))
            size += len(line) + 1
        if chunk:
            _put_batch(store, layout, chunk)

    def flush_summary(self) -> None:
        """Write the summary as it is now (the writer after each batch; `close`)."""
        if self._store is None or self._layout is None:
            return
        with self._write_lock:
            with self._lock:
                doc = self.summary.to_json()
            try:
                self._store.put_bytes(self._layout.driver_summary, _compact(doc).encode() + b"\n")
            except Exception:
                log.exception("could not write the driver summary to the store")
