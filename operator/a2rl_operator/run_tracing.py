"""The operator's spans in a run's trace (docs/architecture.md "Tracing").

The operator serves many runs, so it has one `Tracing` and records finished spans with
`record_span`: each span names its run (`a2rl.run.prefix`, so the store exporter writes it into
that run's `traces/` folder) and has the run's root span (`run_traceparent`: the BenchRun's
trace-context annotation, or its uid's) as parent. At the end of the run the root span itself
("benchrun", from the run's creation to now) is recorded, so every span of the run has its parent
in the trace.
"""

from __future__ import annotations

import secrets
import threading
import time
from datetime import datetime
from typing import Any

from a2rl.constants import COMPONENT_OPERATOR
from a2rl.store.layout import RunLayout
from a2rl.tracing.context import TraceParent, run_traceparent
from a2rl.tracing.setup import Tracing
from a2rl.tracing.spans import ATTR_RUN_PREFIX
from a2rl_operator.grading.store import open_cached

Body = dict[str, Any]
ROOT_SPAN = "benchrun"


_TRACINGS: dict[str, Tracing] = {}
_LOCK = threading.Lock()


def operator_tracing(store_uri: str | None) -> Tracing | None:
    """The operator's `Tracing` for the runs kept in `store_uri` (one per store for the process's
    lifetime; None: no store, no spans)."""
    if not store_uri:
        return None
    with _LOCK:
        tracing = _TRACINGS.get(store_uri)
        if tracing is None:
            tracing = _TRACINGS[store_uri] = Tracing(COMPONENT_OPERATOR, store=open_cached(store_uri))
        return tracing


def run_prefix(run: Body) -> str:
    meta = run["metadata"]
    return RunLayout(meta["namespace"], meta["name"], meta["uid"]).prefix


def _created_ns(run: Body) -> int | None:
    stamp = run["metadata"].get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1e9)


def record_run_span(
    tracing: Tracing | None,
    run: Body,
    name: str,
    *,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, str | int] | None = None,
) -> bool:
    """A finished operator span of `run`, child of the run's root span; False when the run has no
    trace context (or tracing is off)."""
    root = run_traceparent(run["metadata"])
    if tracing is None or root is None:
        return False
    ids = TraceParent(trace_id=root.trace_id, span_id=secrets.token_hex(8), flags=root.flags)
    attrs = {**(attributes or {}), ATTR_RUN_PREFIX: run_prefix(run)}
    return tracing.record_span(
        name, ids, start_time_ns=start_ns, end_time_ns=end_ns, parent=root, attributes=attrs
    )


def record_root_span(tracing: Tracing | None, run: Body, end_ns: int) -> bool:
    """The run's root span, with exactly the ids of `run_traceparent`, then flush (end of the run)."""
    root = run_traceparent(run["metadata"])
    if tracing is None or root is None:
        return False
    start_ns = _created_ns(run) or end_ns
    attrs = {ATTR_RUN_PREFIX: run_prefix(run), "a2rl.run.name": run["metadata"]["name"]}
    recorded = tracing.record_span(
        ROOT_SPAN, root, start_time_ns=min(start_ns, end_ns), end_time_ns=end_ns, attributes=attrs
    )
    return recorded and tracing.flush()


def now_ns() -> int:
    return time.time_ns()
