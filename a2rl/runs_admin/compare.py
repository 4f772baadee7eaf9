"""`a2rl runs compare`: runs side by side, one column per run (pure, from `RunSummary`s)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from a2rl.runs_admin.durations import format_duration
from a2rl.runs_admin.summary import RunSummary
from a2rl.runs_admin.table import format_cost, format_delta, format_local_time, format_score


def driver_model(summary: RunSummary) -> str | None:
    driver = summary.record.driver or {}
    model, provider = driver.get("model"), driver.get("provider")
    if not model:
        return None
    return f"{provider}/{model}" if provider else str(model)


def seed(summary: RunSummary) -> int | None:
    value = (summary.record.spec or {}).get("seed")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def budget(summary: RunSummary) -> dict[str, Any]:
    """The run's budget: wall time, submission cap, and the driver limits its spec sets."""
    record = summary.record
    spec_budget = (record.spec or {}).get("budget")
    spec_budget = spec_budget if isinstance(spec_budget, dict) else {}
    return {
        "wall_time_seconds": record.budget.wall_time_seconds if record.budget else None,
        "max_submissions": record.budget.max_submissions if record.budget else None,
        "driver_tokens": spec_budget.get("driverTokens"),
        "driver_cost_usd": spec_budget.get("driverCostUSD"),
    }


def budget_text(summary: RunSummary) -> str:
    b = budget(summary)
    parts = [format_duration(b["wall_time_seconds"])]
    if b["max_submissions"] is not None:
        parts.append(f"{b['max_submissions']} subs")
    if b["driver_tokens"] is not None:
        parts.append(f"{b['driver_tokens']} tokens")
    if b["driver_cost_usd"] is not None:
        parts.append(format_cost(float(b["driver_cost_usd"])))
    return ", ".join(parts)


def base_model(summary: RunSummary) -> str | None:
    ref = summary.record.base_model
    if ref is None:
        return None
    return ref.name or ref.source


def compare_json(summary: RunSummary, now: datetime) -> dict[str, Any]:
    """`a2rl runs compare --json`'s object of one run: `runs list --json`'s fields and more."""
    record = summary.record
    agent = record.agent
    return {
        **summary.to_json(now),
        "stack": agent.stack if agent else None,
        "stack_version": agent.stack_version if agent else None,
        "agent_mode": agent.mode if agent else None,
        "driver_model": driver_model(summary),
        "mode": record.mode,
        "base_model": base_model(summary),
        "base_model_source": record.base_model.source if record.base_model else None,
        "protocol": record.protocol,
        "evaluator_version": record.evaluator_version,
        "seed": seed(summary),
        "budget": budget(summary),
        "submissions": [s.to_json() for s in summary.submissions],
    }


def _submission_cell(summary: RunSummary, index: int) -> str:
    for sub in summary.submissions:
        if sub.index == index:
            if sub.status == "valid":
                marker = " *" if summary.best_submission == index else ""
                return format_score(sub.score) + marker
            return sub.status
    return ""


def compare_rows(summaries: list[RunSummary], now: datetime) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): one row per field, one column per run; then one row per submission
    (`*` marks each run's best)."""

    def row(label: str, cells: list[str | None]) -> list[str]:
        return [label, *("-" if c is None or c == "" else c for c in cells)]

    s = summaries
    rows = [
        row("task", [x.info.task for x in s]),
        row("agent", [x.agent for x in s]),
        row("stack version", [x.record.agent.stack_version if x.record.agent else None for x in s]),
        row("driver model", [driver_model(x) for x in s]),
        row("agent mode", [x.record.agent.mode if x.record.agent else None for x in s]),
        row("run mode", [x.record.mode for x in s]),
        row("base model", [base_model(x) for x in s]),
        row("protocol", [x.record.protocol for x in s]),
        row("seed", [None if seed(x) is None else str(seed(x)) for x in s]),
        row("budget", [budget_text(x) for x in s]),
        row("started", [format_local_time(x.info.started_at) for x in s]),
        row("state", [x.state for x in s]),
        row("wall time", [format_duration(x.duration_s(now)) for x in s]),
        row("baseline", [format_score(x.baseline_score) for x in s]),
        row(
            "best",
            [
                format_score(x.best_score) + (f" (#{x.best_submission})" if x.best_submission else "")
                for x in s
            ],
        ),
        row("improvement", [format_delta(x.improvement) for x in s]),
        row("submissions", [f"{x.valid_submissions}/{x.total_submissions} valid" for x in s]),
        row("driver cost", [format_cost(x.driver_cost_usd) for x in s]),
    ]
    indices = sorted({sub.index for x in s for sub in x.submissions})
    for index in indices:
        rows.append([f"#{index}", *(_submission_cell(x, index) or "-" for x in s)])
    return ["", *(x.ref for x in s)], rows
