"""The report's `driver` section: the driver gateway's calls, tokens, cost, latency and budget.

Totals (the whole run's and each model's) are the gateway's own, from `driver/summary.json`;
without a summary they are added up from the call records. Refusals, latency percentiles and the
first and last call come from the call records (`driver/calls/`). Pure functions of a
`RunHistory`; None when the run has neither (no driver, or not one call).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from a2rl.records.driver import DriverSummary, DriverTotals, add_call
from a2rl.records.report import ReportDriver, ReportDriverBudget, ReportDriverModel
from a2rl.runs import parse_time
from a2rl_grader.report.history import DriverCall, RunHistory
from a2rl_grader.report.times import RATIO_DIGITS, SECONDS_DIGITS, iso, origin, seconds_since

COST_DIGITS = 6


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank percentile: the ⌈p/100 · n⌉-th smallest value; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return round(ordered[rank - 1], SECONDS_DIGITS)


def forwarded(calls: Sequence[DriverCall]) -> list[DriverCall]:
    """Calls that reached the provider (the gateway's own answers — refusals — left out)."""
    return [c for c in calls if c.refused is None]


def latencies(calls: Sequence[DriverCall]) -> list[float]:
    return [c.latency_s for c in forwarded(calls) if c.latency_s is not None]


def first_bytes(calls: Sequence[DriverCall]) -> list[float]:
    return [c.first_byte_s for c in forwarded(calls) if c.first_byte_s is not None]


def totals_from_calls(calls: Sequence[DriverCall]) -> DriverSummary:
    """What the gateway's summary would say of `calls` (used when summary.json is missing)."""
    summary = DriverSummary()
    for call in calls:
        add_to(summary, call)
        if call.model and call.usage is not None:
            add_to(summary.per_model.setdefault(call.model, DriverTotals()), call)
    summary.total_tokens = summary.input_tokens + summary.output_tokens
    return summary


def add_to(totals: DriverTotals | DriverSummary, call: DriverCall) -> None:
    add_call(totals, status=call.status, usage=call.usage, cost_usd=call.cost_usd, latency_s=call.latency_s)


def model_rows(summary: DriverSummary, calls: Sequence[DriverCall]) -> list[ReportDriverModel]:
    """One row per model of the summary, by name; latencies from that model's calls."""
    rows = []
    for model, totals in sorted(summary.per_model.items()):
        mine = [c for c in calls if c.model == model]
        rows.append(
            ReportDriverModel(
                model=model,
                calls=totals.calls,
                errors=totals.errors,
                input_tokens=totals.input_tokens,
                output_tokens=totals.output_tokens,
                cached_tokens=totals.cached_tokens,
                cost_usd=round(totals.cost_usd, COST_DIGITS),
                latency_p50_s=percentile(latencies(mine), 50),
                latency_p95_s=percentile(latencies(mine), 95),
            )
        )
    return rows


def limits(history: RunHistory, summary: DriverSummary) -> tuple[int | None, float | None]:
    """The budget's limits: the gateway's, else the BenchRun's `spec.budget` (run.json)."""
    budget = summary.budget
    if budget.driver_tokens is not None or budget.driver_cost_usd is not None:
        return budget.driver_tokens, budget.driver_cost_usd
    spec_budget: dict[str, Any] = (history.run.record.spec or {}).get("budget") or {}
    tokens, cost = spec_budget.get("driverTokens"), spec_budget.get("driverCostUSD")
    return (
        tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
        float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
    )


def budget_section(history: RunHistory, summary: DriverSummary, t0: datetime | None) -> ReportDriverBudget:
    tokens, cost = limits(history, summary)
    state = summary.budget
    exhausted_at = parse_time(state.exhausted_at)
    return ReportDriverBudget(
        driver_tokens=tokens,
        driver_cost_usd=cost,
        tokens_used_ratio=round(summary.total_tokens / tokens, RATIO_DIGITS) if tokens else None,
        cost_used_ratio=round(summary.cost_usd / cost, RATIO_DIGITS) if cost else None,
        exhausted=state.exhausted,
        exhausted_at=iso(exhausted_at),
        exhausted_s=seconds_since(t0, exhausted_at),
        reason=state.reason,
        refused_calls=state.refused_calls,
    )


def driver_section(history: RunHistory) -> ReportDriver | None:
    """The `driver` section (module docstring); None when the run has no driver records."""
    calls = history.driver_calls
    if history.driver_summary is None and not calls:
        return None
    summary = history.driver_summary or totals_from_calls(calls)
    t0 = origin(history)
    starts = [c.started_at for c in calls if c.started_at is not None]
    refused = Counter(c.refused for c in calls if c.refused is not None)
    return ReportDriver(
        provider=summary.provider,
        model=summary.model,
        calls=summary.calls,
        errors=summary.errors,
        refused_calls=sum(refused.values()),
        refused=dict(sorted(refused.items())),
        input_tokens=summary.input_tokens,
        output_tokens=summary.output_tokens,
        cached_tokens=summary.cached_tokens,
        cache_write_tokens=summary.cache_write_tokens,
        reasoning_tokens=summary.reasoning_tokens,
        total_tokens=summary.input_tokens + summary.output_tokens,
        cost_usd=round(summary.cost_usd, COST_DIGITS),
        unpriced_models=sorted(summary.unpriced_models),
        usage_missing_calls=summary.usage_missing_calls,
        latency_p50_s=percentile(latencies(calls), 50),
        latency_p95_s=percentile(latencies(calls), 95),
        first_byte_p50_s=percentile(first_bytes(calls), 50),
        first_byte_p95_s=percentile(first_bytes(calls), 95),
        first_call_s=seconds_since(t0, min(starts)) if starts else None,
        last_call_s=seconds_since(t0, max(starts)) if starts else None,
        per_model=model_rows(summary, calls),
        budget=budget_section(history, summary, t0),
    )
