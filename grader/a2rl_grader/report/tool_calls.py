"""The report's `trajectory` section: the agent stack's tool calls by kind, and each one's time.

The calls are `a2rl.trajectory.parse_trajectory`'s over `agent/trajectory.jsonl`; a stream
without times (Codex) is placed on the driver's calls (`place_on_driver_calls`). None when the
run has no event stream or no agent stack.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from a2rl.records.report import ReportToolCall, ReportTrajectory
from a2rl.trajectory import KINDS, ToolCall, parse_trajectory, place_on_driver_calls
from a2rl_grader.report.history import RunHistory
from a2rl_grader.report.times import iso, origin, seconds_since

TIMING_STREAM = "stream"
TIMING_DRIVER = "driver"
TIMING_NONE = "none"


def agent_tool_calls(history: RunHistory) -> tuple[list[ToolCall], str]:
    """The run's tool calls, and where their times come from (`stream`, `driver` or `none`)."""
    if history.agent_events is None or history.stack is None:
        return [], TIMING_NONE
    calls = parse_trajectory(history.stack, history.agent_events)
    if calls and all(c.at is not None for c in calls):
        return calls, TIMING_STREAM
    placed = place_on_driver_calls(calls, [c.answer for c in history.driver_calls])
    if any(a.at is None and b.at is not None for a, b in zip(calls, placed, strict=True)):
        return placed, TIMING_DRIVER
    return calls, TIMING_STREAM if any(c.at is not None for c in calls) else TIMING_NONE


def trajectory_section(history: RunHistory) -> ReportTrajectory | None:
    """The `trajectory` section (module docstring)."""
    if history.agent_events is None or history.stack is None:
        return None
    calls, timing = agent_tool_calls(history)
    t0 = origin(history)
    kinds = Counter(c.kind for c in calls)
    section = ReportTrajectory(
        stack=history.stack,
        events=len(history.agent_events),
        tool_calls=len(calls),
        kinds={kind: kinds.get(kind, 0) for kind in KINDS},
        tools=dict(sorted(Counter(c.tool for c in calls).items())),
        timing=timing,
        calls=[_call_row(c, t0) for c in calls],
    )
    moved = sum(1 for c in calls if c.backgrounded)
    if moved:  # set only then: reports of other runs stay as they were
        section.backgrounded = moved
    return section


def _call_row(call: ToolCall, t0: datetime | None) -> ReportToolCall:
    row = ReportToolCall(
        index=call.seq,
        at=iso(call.at),
        elapsed_s=seconds_since(t0, call.at),
        tool=call.tool,
        kind=call.kind,
        detail=call.detail,
    )
    if call.backgrounded:
        row.backgrounded = True
    return row
