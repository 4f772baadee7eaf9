"""What a stack run's driver gateway reports, for the run's status: `driver/summary.json` (written
by the gateway pod after every call) read with the operator's store credentials.

`status.driverTokens` / `status.driverCostUSD` are its totals, updated whenever the operator
re-observes the run (pod and Job events, the 60 s resync); `budget.refused_calls` tells the
status math that the agent was refused a call for the driver budget (`DriverBudgetExhausted`).
A store that cannot be read (a run's own store Secret, an outage) leaves the status as it is.
"""

from __future__ import annotations

import logging
from typing import Any

from a2rl.api.benchrun import BenchRunStatus
from a2rl.records.base import read_record
from a2rl.records.driver import DriverSummary
from a2rl.store.layout import RunLayout
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.store import open_cached
from a2rl_operator.manifests import parse_spec
from a2rl_operator.manifests.gateway import has_gateway
from a2rl_operator.manifests.secret import store_uri

log = logging.getLogger(__name__)

Body = dict[str, Any]


def read_summary(run: Body, config: OperatorConfig) -> DriverSummary | None:
    """The gateway's summary of a stack run; None for other runs, before the first call, or when
    the store cannot be read (logged)."""
    try:
        spec = parse_spec(run)
    except ValueError:
        return None
    uri = store_uri(spec, config)
    if not has_gateway(spec) or uri is None:
        return None
    meta = run["metadata"]
    layout = RunLayout(meta["namespace"], meta["name"], meta["uid"])
    try:
        return read_record(open_cached(uri), layout.driver_summary, DriverSummary)
    except Exception as exc:  # an unreachable store never fails the observation
        log.warning("BenchRun %s/%s: driver summary not read: %s", meta["namespace"], meta["name"], exc)
        return None


def refused_reason(summary: DriverSummary | None) -> str | None:
    """The gateway's budget reason once it refused the agent a call (None: it did not)."""
    if summary is None or summary.budget.refused_calls < 1:
        return None
    return summary.budget.reason or "the run's driver budget is exhausted"


def with_usage(status: BenchRunStatus, summary: DriverSummary | None) -> BenchRunStatus:
    """`status` with the summary's totals (unchanged without a summary)."""
    if summary is None:
        return status
    return status.model_copy(
        update={"driver_tokens": summary.total_tokens, "driver_cost_usd": round(summary.cost_usd, 6)}
    )
