"""`driver/calls/<n>.jsonl` (call records in batches, `a2rl.records.driver_calls`) and
`driver/summary.json`: what the run's driver gateway (`a2rl_gateway`, docs/gateway.md) forwarded
to the upstream LLM provider, what it answered, what that used and cost, and the driver budget's
state.

Written by the gateway only; read by the report and the runner. Keys and the per-run token are
redacted before a record is built (`a2rl_gateway.redact`).
"""

from __future__ import annotations

from typing import Any

from a2rl.records.base import Record


class _Complete(Record):
    """A record written in full (defaults included): these documents are only ever written whole."""

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class DriverUsage(Record):
    """One call's usage as the upstream reported it, normalised over the protocols.

    `input_tokens` counts every prompt token, cached ones included (Anthropic's `input_tokens`
    + `cache_read_input_tokens` + `cache_creation_input_tokens`; OpenAI's `prompt_tokens` /
    `input_tokens`; Gemini's `promptTokenCount`); `cached_tokens` (cache reads) and
    `cache_write_tokens` (Anthropic's cache creation) are parts of it. `output_tokens` includes
    reasoning/thinking tokens. What counts against `driverTokens` is `total_tokens`.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class DriverCallRecord(_Complete):
    """One request the agent's stack made through the gateway, and its answer."""

    index: int
    started_at: str | None = None
    finished_at: str | None = None
    #: Seconds from the request's arrival to its first response byte, and to its last.
    first_byte_s: float | None = None
    latency_s: float | None = None
    provider: str | None = None
    #: Wire protocol of the endpoint: `anthropic-messages`, `openai-chat`, `openai-responses`,
    #: `gemini`, and `operation` (`chat`, `generate_content`, `count_tokens`, `list_models`, …).
    protocol: str | None = None
    operation: str | None = None
    method: str | None = None
    #: Path and query as the agent sent them (a `key=` query parameter redacted).
    path: str | None = None
    upstream_url: str | None = None
    stream: bool = False
    request_model: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    finish_reasons: list[str] = []
    #: HTTP status the agent got (the upstream's, or the gateway's own: 401, 403, 404, 502).
    status: int | None = None
    #: Set when the gateway answered itself: `unauthorized`, `budget_exhausted`, `unknown_endpoint`,
    #: `upstream_unreachable`, `bad_request`, `too_many_calls`, `stopping`, `internal` (a fault of
    #: the gateway's own).
    refused: str | None = None
    error: str | None = None
    usage: DriverUsage | None = None
    #: True when a generation answer carried no usage the gateway could read (`usage` is then the
    #: most the call could use, what the budget reserved for it).
    usage_missing: bool = False
    cost_usd: float = 0.0
    #: False when the model has no price (cost counted as 0).
    priced: bool = True
    request_headers: dict[str, str] = {}
    request_body: Any = None
    response_headers: dict[str, str] = {}
    #: The answer: parsed JSON, or for a stream the reassembled final message (the protocol's
    #: non-streaming shape) when the events could be reassembled, else the events.
    response_body: Any = None
    stream_events: int | None = None
    #: Bytes left out of `request_body` / `response_body` (over the record's size limit).
    truncated: bool = False


class DriverTotals(Record):
    """Totals over calls (the whole run, or one model)."""

    calls: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class DriverBudgetState(Record):
    """The run's driver budget (`spec.budget.driverTokens`, `driverCostUSD`; None: no limit)."""

    driver_tokens: int | None = None
    driver_cost_usd: float | None = None
    exhausted: bool = False
    exhausted_at: str | None = None
    #: e.g. "the run's driver budget (1000 tokens) is exhausted: 1042 tokens used".
    reason: str | None = None
    #: Calls answered with the budget error (the agent saw it).
    refused_calls: int = 0
    first_refused_at: str | None = None


class DriverSummary(_Complete):
    """`driver/summary.json`, rewritten after every call."""

    provider: str | None = None
    base_url: str | None = None
    model: str | None = None
    updated_at: str | None = None
    calls: int = 0
    #: Answers other than 2xx (the gateway's own refusals included).
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    mean_latency_s: float | None = None
    #: Calls whose model had no price (their cost counted as 0), and those models.
    unpriced_calls: int = 0
    unpriced_models: list[str] = []
    usage_missing_calls: int = 0
    per_model: dict[str, DriverTotals] = {}
    budget: DriverBudgetState = DriverBudgetState()


def add_call(
    totals: DriverTotals | DriverSummary,
    *,
    status: int | None,
    usage: DriverUsage | None,
    cost_usd: float,
    latency_s: float | None,
) -> None:
    """Add one call to running totals (the gateway's summary, the report's per-model rows): a
    status other than 2xx (or none) is an error; a call without usage adds no tokens."""
    totals.calls += 1
    if status is None or not 200 <= status < 300:
        totals.errors += 1
    if usage is not None:
        totals.input_tokens += usage.input_tokens
        totals.output_tokens += usage.output_tokens
        totals.cached_tokens += usage.cached_tokens
        totals.cache_write_tokens += usage.cache_write_tokens
        totals.reasoning_tokens += usage.reasoning_tokens
    totals.cost_usd += cost_usd
    totals.latency_s += latency_s or 0.0
