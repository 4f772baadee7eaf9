"""`GatewayMetrics`: what the gateway's `GET /metrics` answers (Prometheus text, `a2rl.metrics`).

A gateway serves one run, so the series carry no run label (the scrape's target names the run):

    a2rl_driver_calls_total{protocol, model, outcome}   outcome: ok (2xx), upstream_error (another
                                                        status from the upstream), refused (the
                                                        gateway answered: a2rl_driver_refusals_total)
    a2rl_driver_refusals_total{reason}                  unauthorized, budget_exhausted, bad_request, …
    a2rl_driver_tokens_total{protocol, model, kind}     kind: input (cached included), output,
                                                        cached, cache_write, reasoning
    a2rl_driver_cost_usd_total{protocol, model}
    a2rl_driver_usage_missing_calls_total{protocol, model}
    a2rl_driver_upstream_seconds{protocol, outcome}     histogram: the request sent upstream to the
                                                        answer's last byte read
    a2rl_driver_calls_in_flight                         gauge
    a2rl_driver_budget_exhausted                        gauge, 0 or 1
    a2rl_driver_budget_tokens, a2rl_driver_budget_cost_usd   gauges: the limits (absent: none)

They are updated where the meter counts a call (`Meter.account`), so they equal the summary's
totals. The model is the one the answer named, else the requested one; an agent can name any
model, so past `MAX_MODELS` distinct names further ones are counted as `other`.
"""

from __future__ import annotations

import threading

from a2rl.metrics import Registry
from a2rl.records.driver import DriverCallRecord

#: Distinct model label values kept; further names are `other` (bounded series for a hostile agent).
MAX_MODELS = 32
OTHER = "other"

#: Seconds: a local upstream's milliseconds to a long generation's minutes.
UPSTREAM_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


def outcome(record: DriverCallRecord) -> str:
    if record.refused:
        return "refused"
    return "ok" if record.status is not None and 200 <= record.status < 300 else "upstream_error"


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        self.calls = r.counter(
            "a2rl_driver_calls_total", "Driver calls through the gateway.", ["protocol", "model", "outcome"]
        )
        self.refusals = r.counter(
            "a2rl_driver_refusals_total", "Calls the gateway answered itself, by reason.", ["reason"]
        )
        self.tokens = r.counter(
            "a2rl_driver_tokens_total", "Tokens metered, by kind.", ["protocol", "model", "kind"]
        )
        self.cost = r.counter("a2rl_driver_cost_usd_total", "Cost metered (USD).", ["protocol", "model"])
        self.usage_missing = r.counter(
            "a2rl_driver_usage_missing_calls_total",
            "Generation answers without readable usage (counted at their maximum).",
            ["protocol", "model"],
        )
        self.upstream = r.histogram(
            "a2rl_driver_upstream_seconds",
            "From the request sent upstream to the last byte of its answer.",
            ["protocol", "outcome"],
            UPSTREAM_BUCKETS,
        )
        self.in_flight = r.gauge("a2rl_driver_calls_in_flight", "Calls being served now.")
        self.exhausted = r.gauge("a2rl_driver_budget_exhausted", "1 once the run's driver budget is spent.")
        self.budget_tokens = r.gauge("a2rl_driver_budget_tokens", "The run's driver token budget.")
        self.budget_cost = r.gauge("a2rl_driver_budget_cost_usd", "The run's driver cost budget (USD).")
        self.exhausted.set(0)
        self._models: set[str] = set()
        self._lock = threading.Lock()

    def model(self, name: str | None) -> str:
        """The label for a model name (bounded: see `MAX_MODELS`)."""
        name = name or ""
        with self._lock:
            if name in self._models:
                return name
            if len(self._models) < MAX_MODELS:
                self._models.add(name)
                return name
        return OTHER

    def count(self, record: DriverCallRecord) -> None:
        """One call as the meter counted it."""
        protocol = record.protocol or ""
        model = self.model(record.response_model or record.request_model)
        self.calls.inc(protocol=protocol, model=model, outcome=outcome(record))
        if record.refused:
            self.refusals.inc(reason=record.refused)
        usage = record.usage
        if usage is not None:
            for kind, n in (
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
                ("cached", usage.cached_tokens),
                ("cache_write", usage.cache_write_tokens),
                ("reasoning", usage.reasoning_tokens),
            ):
                if n:
                    self.tokens.inc(n, protocol=protocol, model=model, kind=kind)
        if record.cost_usd:
            self.cost.inc(record.cost_usd, protocol=protocol, model=model)
        if record.usage_missing:
            self.usage_missing.inc(protocol=protocol, model=model)

    def render(self) -> str:
        return self.registry.render()
