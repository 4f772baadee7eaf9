"""OpenTelemetry tracing of a run: one trace per run, spans in the store and over OTLP.

See docs/architecture.md ("Tracing"). Importing this package does not import the OpenTelemetry
SDK; the first recorded span does.
"""

from a2rl.tracing.context import (
    TraceParent,
    carrier_json,
    new_traceparent,
    parse_traceparent,
    pod_trace_env,
    run_traceparent,
    trace_env,
    traceparent_from_annotations,
    traceparent_from_carrier,
    traceparent_from_env,
    uid_traceparent,
)
from a2rl.tracing.setup import (
    Tracing,
    annotate,
    current_trace_env,
    flush,
    get_tracing,
    init_tracing,
    installed,
    span,
)
from a2rl.tracing.spans import (
    ATTR_RUN_PREFIX,
    ATTR_SUBMISSION_INDEX,
    collect_spans,
    merge_traces,
    read_traces,
    timeline,
)

__all__ = [
    "ATTR_RUN_PREFIX",
    "ATTR_SUBMISSION_INDEX",
    "TraceParent",
    "Tracing",
    "annotate",
    "carrier_json",
    "collect_spans",
    "current_trace_env",
    "flush",
    "get_tracing",
    "init_tracing",
    "installed",
    "merge_traces",
    "new_traceparent",
    "parse_traceparent",
    "pod_trace_env",
    "read_traces",
    "run_traceparent",
    "span",
    "timeline",
    "trace_env",
    "traceparent_from_annotations",
    "traceparent_from_carrier",
    "traceparent_from_env",
    "uid_traceparent",
]
