"""Budget decisions of the driver gateway. Pure.

What counts: every prompt and output token the upstream reported (`DriverUsage.total_tokens`,
cached prompt tokens included) and the cost from the price table.

Before a generation call goes upstream the gateway reserves the most it may use (`Reservation`:
`a2rl_gateway.validation.max_usage` and its price); when it ends, the reservation is replaced by
what it used. A call is admitted while the spent plus the reserved tokens stay under
`driverTokens` (and the spent plus the reserved cost under `driverCostUSD`); the call admitted last
may take the run past the limit by at most its own maximum, so concurrent calls overshoot the
budget by at most one call, however many are sent at once. The first call refused ends the
budget (`exhausted`): once the spent tokens reach the limit, or once the calls in flight have
reserved the rest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """`spec.budget.driverTokens` / `driverCostUSD`; None: no limit."""

    tokens: int | None = None
    cost_usd: float | None = None


@dataclass(frozen=True)
class Reservation:
    """The most one call may use, held against the budget while it is in flight."""

    tokens: int = 0
    cost_usd: float = 0.0

    @property
    def empty(self) -> bool:
        return not self.tokens and not self.cost_usd


def exhausted_reason(
    limits: Limits, tokens: int, cost_usd: float, reserved: Reservation | None = None
) -> str | None:
    """Why no further call may go upstream after spending `tokens` and `cost_usd` while calls in
    flight hold `reserved`, or None."""
    r = reserved or Reservation()
    if limits.tokens is not None and tokens + r.tokens >= limits.tokens:
        held = f" and {r.tokens} reserved by calls in flight" if r.tokens and tokens < limits.tokens else ""
        return f"the run's driver budget ({limits.tokens} tokens) is exhausted: {tokens} tokens used{held}"
    if limits.cost_usd is not None and cost_usd + r.cost_usd >= limits.cost_usd:
        held = (
            f" and ${r.cost_usd:.4f} reserved by calls in flight"
            if r.cost_usd and cost_usd < limits.cost_usd
            else ""
        )
        return f"the run's driver budget (${limits.cost_usd:g}) is exhausted: ${cost_usd:.4f} spent{held}"
    return None


def refusal_message(reason: str) -> str:
    """What the agent reads in the error answer."""
    return f"{reason}; a2rl's driver gateway refuses further calls for this run"
