"""Budget decisions of the driver gateway. Pure.

What counts: every prompt and output token the upstream reported (`DriverUsage.total_tokens`,
cached prompt tokens included) and the cost from the price table. A call is refused once the
spent tokens reach `driverTokens` or the spent cost reaches `driverCostUSD`; the call that
crosses the limit is answered in full (nobody knows its size before it ends), so the overshoot is
at most the calls in flight when the limit was crossed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """`spec.budget.driverTokens` / `driverCostUSD`; None: no limit."""

    tokens: int | None = None
    cost_usd: float | None = None


def exhausted_reason(limits: Limits, tokens: int, cost_usd: float) -> str | None:
    """Why no further call may go upstream after spending `tokens` and `cost_usd`, or None."""
    if limits.tokens is not None and tokens >= limits.tokens:
        return f"the run's driver budget ({limits.tokens} tokens) is exhausted: {tokens} tokens used"
    if limits.cost_usd is not None and cost_usd >= limits.cost_usd:
        return f"the run's driver budget (${limits.cost_usd:g}) is exhausted: ${cost_usd:.4f} spent"
    return None


def refusal_message(reason: str) -> str:
    """What the agent reads in the error answer."""
    return f"{reason}; a2rl's driver gateway refuses further calls for this run"
