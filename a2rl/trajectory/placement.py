"""`place_on_driver_calls`: times for tool calls whose stream has none (Codex's), from the driver.

Every tool call was asked for by one driver answer. Counted in order over the driver's answers
(`driver/calls/`, index order), the k-th tool call asked for is taken to be the stream's
k-th tool call, placed at the end of the call that asked for it (`finished_at`). Calls that never
appear in a stream on their own are not counted (`UNSTREAMED_TOOLS`: Codex's `write_stdin`, its
polls of a running command, are part of the `command_execution` item). When the stream holds more
calls than the answers, the rest keep no time; a call already timed keeps its time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from a2rl.trajectory.events import ToolCall

UNSTREAMED_TOOLS = frozenset({"write_stdin"})


@dataclass(frozen=True)
class AnswerCalls:
    """The tools one driver answer asked for, and when that answer ended."""

    finished_at: datetime | None
    tools: tuple[str, ...]


def place_on_driver_calls(calls: Sequence[ToolCall], answers: Sequence[AnswerCalls]) -> list[ToolCall]:
    """`calls` with the untimed ones placed at their driver answer's end (module docstring)."""
    ends = [a.finished_at for a in answers for tool in a.tools if tool not in UNSTREAMED_TOOLS]
    return [
        replace(call, at=ends[i]) if call.at is None and i < len(ends) else call
        for i, call in enumerate(calls)
    ]
