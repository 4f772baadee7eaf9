"""The agent's trajectory: the tool calls in an LLM agent stack's event stream
(`agent/trajectory.jsonl`), each classified as an edit, a shell command, a training launch, a
submission, a read or something else (docs/report.md, "Agent trajectory").

Pure functions: `stream_events` (bytes → JSON objects), `parse_trajectory` (a stack's objects →
`ToolCall`s), `command_kind` (a shell command's kind), `answer_tool_calls` and
`place_on_driver_calls` (times from the driver's calls when the stream has none), and
`build_transcript` (the driver's call records → what the model was sent and said, per call).
"""

from a2rl.trajectory.answers import answer_tool_calls
from a2rl.trajectory.commands import command_kind
from a2rl.trajectory.events import KINDS, ToolCall
from a2rl.trajectory.placement import AnswerCalls, place_on_driver_calls
from a2rl.trajectory.streams import parse_trajectory, stream_events
from a2rl.trajectory.transcript import build_transcript

__all__ = [
    "KINDS",
    "AnswerCalls",
    "ToolCall",
    "answer_tool_calls",
    "build_transcript",
    "command_kind",
    "parse_trajectory",
    "place_on_driver_calls",
    "stream_events",
]
