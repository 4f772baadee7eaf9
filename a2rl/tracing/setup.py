"""`Tracing`: the OpenTelemetry set-up of one a2rl component in one process.

    tracing = init_tracing("recorder", store=store, run_prefix=layout.prefix)
    with span("submission", {"a2rl.submission.index": 3}):   # module-level helper
        ...
    env = {**os.environ, **current_trace_env()}   # a child process joins the same trace
    tracing.shutdown()                             # flush (also done at exit)

Each component gets its own `TracerProvider` with `service.name = a2rl-<component>` (several
can live in one process: the local runner writes the report in-process). Spans go to the run's
`traces/` folder in the object store (`StoreSpanExporter`), and also over OTLP/HTTP when
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the OTLP
exporter is imported only then. `OTEL_SDK_DISABLED=true` turns tracing off.

Where a new span's parent comes from, in this order: the span current in this thread (any
component's); the parent given to `Tracing` or, by default, `A2RL_TRACEPARENT`; for a
component created with `new_trace=True` (the local runner; the operator for a new run) a new
trace. Without any of these the span is not recorded — a process started outside a run (say
`a2rl report --regenerate` by hand) never adds a stray trace to the run's `traces.jsonl`.
The OpenTelemetry SDK itself is imported on the first recorded span, not at import time.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from a2rl.constants import ENV_OTEL_ENDPOINT, TRACE_SERVICE_PREFIX
from a2rl.store.base import ObjectStore
from a2rl.tracing.context import TraceParent, parse_traceparent, trace_env, traceparent_from_env
from a2rl.tracing.exporter import StoreSpanExporter
from a2rl.tracing.spans import ATTR_RUN_PREFIX

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import Span, Tracer

    from a2rl.tracing.exporter import StoreSpanExporter

log = logging.getLogger(__name__)

ENV_OTEL_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_OTEL_SDK_DISABLED = "OTEL_SDK_DISABLED"
#: How often the batch processor hands finished spans to the exporters.
EXPORT_DELAY_MS = 2000
FLUSH_TIMEOUT_S = 30.0
TRACER_NAME = "a2rl"

Attributes = Mapping[str, str | bool | int | float]

# Ids for `Tracing.record_span`: the next span started in this context gets exactly these.
_PRESET_IDS: ContextVar[tuple[int, int] | None] = ContextVar("a2rl_preset_ids", default=None)


def otlp_endpoint(environ: Mapping[str, str]) -> str | None:
    return (environ.get(ENV_OTEL_TRACES_ENDPOINT) or environ.get(ENV_OTEL_ENDPOINT) or "").strip() or None


def sdk_disabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_OTEL_SDK_DISABLED, "").strip().lower() == "true"


def _span_context_tp(span: Any) -> TraceParent | None:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return TraceParent(
        trace_id=f"{ctx.trace_id:032x}", span_id=f"{ctx.span_id:016x}", flags=int(ctx.trace_flags)
    )


class Tracing:
    """Tracer provider, exporters and parent context of one component (see the module doc)."""

    def __init__(
        self,
        component: str,
        *,
        store: ObjectStore | None = None,
        run_prefix: str | None = None,
        parent: TraceParent | str | None = None,
        new_trace: bool = False,
        enabled: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.component = component
        self.service_name = f"{TRACE_SERVICE_PREFIX}{component}"
        self.parent = parse_traceparent(parent) if isinstance(parent, str) else parent
        if self.parent is None and parent is None:
            self.parent = traceparent_from_env(env)
        self.new_trace = new_trace
        self.enabled = enabled and not sdk_disabled(env)
        self.otlp_endpoint = otlp_endpoint(env)
        self._store = store
        self._run_prefix = run_prefix
        self._provider: TracerProvider | None = None
        self._exporter: StoreSpanExporter | None = None
        self._tracer: Tracer | None = None
        self._lock = threading.Lock()
        self._closed = False

    # --- set-up -------------------------------------------------------------------------------
    def _get_tracer(self) -> Tracer | None:
        with self._lock:
            if self._closed:
                return None
            if self._tracer is None:
                self._tracer = self._start_provider()
            return self._tracer

    def _start_provider(self) -> Tracer:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create(
            {"service.name": self.service_name, "process.pid": os.getpid(), "a2rl.component": self.component}
        )
        provider = TracerProvider(
            resource=resource, shutdown_on_exit=False, id_generator=_preset_id_generator()
        )
        self._exporter = StoreSpanExporter(self.component, self._store, self._run_prefix)
        provider.add_span_processor(BatchSpanProcessor(self._exporter, schedule_delay_millis=EXPORT_DELAY_MS))
        if self.otlp_endpoint:
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                log.warning(
                    "%s is set but opentelemetry-exporter-otlp-proto-http is not installed; "
                    "spans go to the object store only",
                    ENV_OTEL_ENDPOINT,
                )
            else:
                provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._provider = provider
        atexit.register(self.shutdown)
        return provider.get_tracer(TRACER_NAME)

    def bind(self, store: ObjectStore, run_prefix: str) -> None:
        """The run whose `traces/` folder gets the spans (spans that ended before are kept)."""
        with self._lock:
            self._store, self._run_prefix = store, run_prefix
            exporter = self._exporter
        if exporter is not None:
            exporter.bind(store, run_prefix)

    # --- context --------------------------------------------------------------------------------
    def _parent_context(self) -> tuple[bool, Context | None]:
        """(record?, the `context` argument for a new span: None = the current one)."""
        from opentelemetry import trace
        from opentelemetry.context import Context

        if trace.get_current_span().get_span_context().is_valid:
            return True, None
        if self.parent is not None:
            ctx = trace.SpanContext(
                trace_id=int(self.parent.trace_id, 16),
                span_id=int(self.parent.span_id, 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(self.parent.flags),
            )
            return True, trace.set_span_in_context(trace.NonRecordingSpan(ctx), Context())
        return self.new_trace, Context()

    def traceparent(self) -> TraceParent | None:
        """The context a child process should continue: the current span's, else the parent."""
        from opentelemetry import trace

        return _span_context_tp(trace.get_current_span()) or self.parent

    def env(self) -> dict[str, str]:
        """`{"A2RL_TRACEPARENT": …}` for a child process (empty without a context)."""
        return trace_env(self.traceparent())

    # --- spans ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def span(
        self, name: str, attributes: Attributes | None = None, *, start_time_ns: int | None = None
    ) -> Iterator[Span]:
        """A span around a block, current in this thread while the block runs.

        Yields a non-recording span when there is nothing to record (see the module doc).
        Exceptions are recorded on the span (status ERROR) and propagate unchanged.
        """
        from opentelemetry import trace

        record, ctx = self._parent_context() if self.enabled else (False, None)
        tracer = self._get_tracer() if record else None
        if tracer is None:
            yield trace.INVALID_SPAN
            return
        attrs = dict(attributes or {})
        inherited = getattr(trace.get_current_span(), "attributes", None) or {}
        run_prefix = inherited.get(ATTR_RUN_PREFIX)
        if run_prefix and ATTR_RUN_PREFIX not in attrs:
            attrs[ATTR_RUN_PREFIX] = run_prefix  # spans of one run stay in that run's files
        with tracer.start_as_current_span(
            name, context=ctx, attributes=attrs, start_time=start_time_ns
        ) as sp:
            yield sp

    def record_span(
        self,
        name: str,
        ids: TraceParent,
        *,
        start_time_ns: int,
        end_time_ns: int,
        parent: TraceParent | None = None,
        attributes: Attributes | None = None,
    ) -> bool:
        """Record a finished span whose trace id and span id are exactly those of `ids`.

        For the operator: the run's trace context (its annotation) is created before the run's
        root span can be — at the end of the run, this records that root span ("benchrun", from
        the creation time to now) so every span of the run has its parent in the trace.
        Returns False when tracing is off. `parent` must belong to the same trace.
        """
        if not self.enabled:
            return False
        if parent is not None and parent.trace_id != ids.trace_id:
            raise ValueError("parent belongs to another trace")
        from opentelemetry import trace
        from opentelemetry.context import Context

        tracer = self._get_tracer()
        if tracer is None:
            return False
        ctx = Context()
        if parent is not None:
            remote = trace.SpanContext(
                trace_id=int(parent.trace_id, 16),
                span_id=int(parent.span_id, 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(parent.flags),
            )
            ctx = trace.set_span_in_context(trace.NonRecordingSpan(remote), ctx)
        token = _PRESET_IDS.set((int(ids.trace_id, 16), int(ids.span_id, 16)))
        try:
            sp = tracer.start_span(
                name, context=ctx, attributes=dict(attributes or {}), start_time=start_time_ns
            )
        finally:
            _PRESET_IDS.reset(token)
        sp.end(end_time=end_time_ns)
        return True

    # --- flushing -------------------------------------------------------------------------------
    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
        """Export every finished span now (to the store and OTLP); False on timeout or failure."""
        provider, exporter = self._provider, self._exporter
        if provider is None or exporter is None:
            return True
        in_time = bool(provider.force_flush(int(timeout_s * 1000)))
        return exporter.force_flush() and in_time  # the store exporter: were all spans written?

    def shutdown(self) -> None:
        """Flush and stop; later spans of this component are not recorded. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            provider = self._provider
        atexit.unregister(self.shutdown)
        if provider is not None:
            provider.shutdown()

    @property
    def written_keys(self) -> list[str]:
        """Store keys this component's exporter has written so far."""
        return list(self._exporter.written) if self._exporter is not None else []


def _preset_id_generator() -> IdGenerator:
    """Random ids, except for a span started while `_PRESET_IDS` is set (`record_span`)."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PresetIdGenerator(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            preset = _PRESET_IDS.get()
            return preset[0] if preset else super().generate_trace_id()

        def generate_span_id(self) -> int:
            preset = _PRESET_IDS.get()
            return preset[1] if preset else super().generate_span_id()

    return PresetIdGenerator()


# --- the process's default component (module-level helpers) ------------------------------------
_DISABLED = Tracing("disabled", enabled=False, environ={})
_default: Tracing | None = None


def get_tracing() -> Tracing:
    """The component installed by `init_tracing` / `installed`, else one that records nothing."""
    return _default or _DISABLED


def init_tracing(
    component: str,
    *,
    store: ObjectStore | None = None,
    run_prefix: str | None = None,
    parent: TraceParent | str | None = None,
    new_trace: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Tracing:
    """Create a component's `Tracing` and make it this process's default (for `span`)."""
    global _default  # noqa: PLW0603 - one default per process, like OpenTelemetry's global provider
    _default = Tracing(
        component, store=store, run_prefix=run_prefix, parent=parent, new_trace=new_trace, environ=environ
    )
    return _default


@contextlib.contextmanager
def installed(tracing: Tracing) -> Iterator[Tracing]:
    """Make `tracing` the default for the block, then restore the previous one."""
    global _default  # noqa: PLW0603
    previous, _default = _default, tracing
    try:
        yield tracing
    finally:
        _default = previous


def span(
    name: str, attributes: Attributes | None = None, *, start_time_ns: int | None = None
) -> contextlib.AbstractContextManager[Span]:
    """`get_tracing().span(…)`: a span of this process's default component."""
    return get_tracing().span(name, attributes, start_time_ns=start_time_ns)


def annotate(attributes: Attributes) -> None:
    """Set attributes on the span current in this thread (no-op without one)."""
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(dict(attributes))


def current_trace_env() -> dict[str, str]:
    """`A2RL_TRACEPARENT` for a child process, from the current span of the default component."""
    return get_tracing().env()


def flush() -> bool:
    return get_tracing().flush()
