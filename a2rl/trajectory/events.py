"""`ToolCall`: one tool call of an agent stack, as its event stream (`agent/trajectory.jsonl`) shows it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

EDIT = "edit"
SHELL = "shell"
TRAINING = "training"
SUBMISSION = "submission"
READ = "read"
OTHER = "other"

#: Every kind, in the order reports list them.
KINDS: tuple[str, ...] = (EDIT, SHELL, TRAINING, SUBMISSION, READ, OTHER)

#: Characters of a call's `detail` (the command's first line, the file's path, …).
MAX_DETAIL_CHARS = 100


@dataclass(frozen=True)
class ToolCall:
    """One tool call: `seq` counts from 1 in stream order; `at` is None when the stream has no time;
    `backgrounded`: the stack moved its command, still running, to the background."""

    seq: int
    tool: str
    kind: str
    detail: str
    at: datetime | None = None
    backgrounded: bool = False


def short_detail(text: str) -> str:
    """The first non-empty line of `text`, cut to MAX_DETAIL_CHARS."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= MAX_DETAIL_CHARS else line[: MAX_DETAIL_CHARS - 1] + "…"
