"""What the run's driver gateway metered, for run.json and the run's summary (local mode).

Read from the gateway's `driver/summary.json`: `driver_tokens` is its `total_tokens` (prompt +
output tokens, cached prompt tokens included: what counts against `spec.budget.driverTokens`),
`driver_cost_usd` its `cost_usd` — the same numbers a cluster's BenchRun status shows as
`driverTokens` / `driverCostUSD`.
"""

from __future__ import annotations

from typing import Any

from a2rl.records.base import read_record
from a2rl.records.driver import DriverSummary
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout

COST_DIGITS = 6


def read_driver_summary(store: ObjectStore, layout: RunLayout) -> DriverSummary | None:
    """The gateway's summary; None for a run without a driver, or before its first call."""
    return read_record(store, layout.driver_summary, DriverSummary)


def metered(summary: DriverSummary | None) -> dict[str, Any]:
    """run.json's `driver_tokens` / `driver_cost_usd` (`run_record` keywords); {} without a summary."""
    if summary is None:
        return {}
    return {"driver_tokens": summary.total_tokens, "driver_cost_usd": round(summary.cost_usd, COST_DIGITS)}


def driver_line(summary: DriverSummary | None) -> str:
    """The `driver` line of the run's summary."""
    if summary is None:
        return "driver      no calls recorded"
    budget = summary.budget
    exhausted = f"; budget exhausted, {budget.refused_calls} calls refused" if budget.exhausted else ""
    return (
        f"driver      {summary.calls} calls, {summary.total_tokens} tokens ({summary.input_tokens} in / "
        f"{summary.output_tokens} out / {summary.cached_tokens} cached), ${summary.cost_usd:.4f}{exhausted}"
    )
