"""`StoreSpanExporter`: finished spans as JSON lines in the object store.

The store has no append. Every process therefore writes its own objects:
`<run prefix>/traces/<component>-<pid>-<token>-<n>.jsonl`, one object per export batch (a batch
is whatever the SDK's BatchSpanProcessor hands over: every couple of seconds and at flush). No
object is ever rewritten, so concurrent writers (runner, recorder, eval processes, operator, a
report Job) never race, a killed process loses only its unexported spans, and memory stays
flat. `a2rl.tracing.spans.merge_traces` turns the parts into one `traces.jsonl`.

Each line is one finished span (`span_record`): ids in lower-case hex, times in Unix
nanoseconds and ISO 8601 UTC, `service` (`a2rl-<component>`), status, attributes, events.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from a2rl.records.times import iso_utc
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.tracing.spans import ATTR_RUN_PREFIX, span_line

log = logging.getLogger(__name__)

#: Spans kept in memory while they cannot be written (no run bound yet, store unreachable).
MAX_PENDING_SPANS = 10_000


def iso_ns(ns: int | None) -> str | None:
    return None if ns is None else iso_utc(ns / 1e9)


def _value(v: Any) -> Any:
    if isinstance(v, str | bool | int | float) or v is None:
        return v
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, Mapping):
        return {str(k): _value(x) for k, x in v.items()}
    if isinstance(v, Sequence):
        return [_value(x) for x in v]
    return str(v)


def _attrs(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {str(k): _value(v) for k, v in (attributes or {}).items()}


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One finished SDK span as the JSON object of a `traces.jsonl` line."""
    ctx = span.context
    assert ctx is not None
    resource = _attrs(span.resource.attributes) if span.resource is not None else {}
    start, end = span.start_time, span.end_time
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "name": span.name,
        "service": resource.get("service.name"),
        "pid": resource.get("process.pid"),
        "kind": span.kind.name,
        "start_time_unix_nano": start,
        "end_time_unix_nano": end,
        "start": iso_ns(start),
        "end": iso_ns(end),
        "duration_s": round((end - start) / 1e9, 6) if start is not None and end is not None else None,
        "status": span.status.status_code.name,
        "status_message": span.status.description or None,
        "attributes": _attrs(span.attributes),
        "events": [
            {"name": e.name, "time_unix_nano": e.timestamp, "attributes": _attrs(e.attributes)}
            for e in span.events
        ],
    }


class StoreSpanExporter(SpanExporter):
    """An OpenTelemetry `SpanExporter` writing JSON lines into runs' `traces/` folders.

    Spans go to the run named by their `a2rl.run.prefix` attribute, else to the run bound with
    `bind` (or given at construction). Spans with no run yet, or whose write failed, are kept
    (at most `MAX_PENDING_SPANS`) and written with the next batch. Never raises.
    """

    def __init__(
        self,
        component: str,
        store: ObjectStore | None = None,
        run_prefix: str | None = None,
        *,
        pid: int | None = None,
        token: str | None = None,
    ) -> None:
        self.component = component
        self.pid = os.getpid() if pid is None else pid
        self.token = token or secrets.token_hex(4)
        self._store = store
        self._prefix = run_prefix
        self._pending: dict[str | None, list[str]] = {}
        self._seq: dict[str, int] = {}
        self._lock = threading.Lock()
        self.written: list[str] = []  # keys written, in order (for tests and diagnostics)

    def bind(self, store: ObjectStore, run_prefix: str) -> None:
        """From now on, spans without their own run attribute belong to `run_prefix` in `store`."""
        with self._lock:
            self._store, self._prefix = store, run_prefix
        self.export(())

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            for span in spans:
                try:
                    record = span_record(span)
                except Exception:  # a span we cannot serialise is dropped, not the batch
                    log.exception("span %r could not be serialised", getattr(span, "name", "?"))
                    continue
                prefix = record["attributes"].get(ATTR_RUN_PREFIX)
                key = prefix if isinstance(prefix, str) and prefix else None
                self._pending.setdefault(key, []).append(span_line(record))
            self._trim()
            ok = self._write_pending()
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def _trim(self) -> None:
        total = sum(len(v) for v in self._pending.values())
        for lines in self._pending.values():
            if total <= MAX_PENDING_SPANS:
                break
            drop = min(len(lines), total - MAX_PENDING_SPANS)
            del lines[:drop]
            total -= drop
            log.warning("dropped %d spans that could not be written", drop)

    def _write_pending(self) -> bool:
        if self._store is None:
            return True  # nothing can be written yet; kept for bind()
        ok = True
        for key in list(self._pending):
            prefix = key or self._prefix
            lines = self._pending[key]
            if prefix is None or not lines:
                continue
            seq = self._seq.get(prefix, 0)
            try:
                object_key = RunLayout.from_prefix(prefix).trace_part(
                    self.component, self.pid, self.token, seq
                )
                self._store.put_bytes(object_key, "".join(lines).encode())
            except ValueError:
                log.warning("span run prefix %r is not <namespace>/<run>-<uid>; spans dropped", prefix)
                del self._pending[key]
                continue
            except Exception as exc:  # store unreachable: keep the spans for the next batch
                log.warning("could not write %d spans to %s: %s", len(lines), self._store.uri, exc)
                ok = False
                continue
            self._seq[prefix] = seq + 1
            self.written.append(object_key)
            del self._pending[key]
        return ok

    def shutdown(self) -> None:
        with self._lock:
            self._write_pending()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        del timeout_millis
        with self._lock:
            return self._write_pending()
