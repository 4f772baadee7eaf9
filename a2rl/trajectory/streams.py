"""`parse_trajectory`: the tool calls in an agent stack's event stream (`agent/trajectory.jsonl`).

One reader per stack (docs/report.md, "Agent trajectory", describes each stream); every reader is
a pure function of the parsed JSON lines and tolerates lines it does not know (skipped). A shell
tool's command is classified by `a2rl.trajectory.commands.command_kind`; other tools by name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from a2rl.runs import parse_time
from a2rl.trajectory.commands import command_kind, unwrap
from a2rl.trajectory.events import EDIT, OTHER, READ, SHELL, ToolCall, short_detail

Event = Mapping[str, Any]
#: (time, tool name, kind, detail, the stream's id of the call where it has one) of one call,
#: before numbering.
Found = tuple[datetime | None, str, str, str, str | None]

#: A tool result saying that the stack moved the command, still running, to the background (at
#: its shell timeout, or to deliver a message): the command goes on while the agent moves on.
#: Claude Code: "Command did not complete within its 5s timeout and was moved to the background (ID:
#: b1)…". A command the agent itself asked to run in the background does not count.
MOVED_TO_BACKGROUND = re.compile(r"\bwas moved to the background\b")

# Tool names of each stack, by kind (shell tools take a command).
CLAUDE_CODE_TOOLS = {
    SHELL: {"Bash"},
    EDIT: {"Edit", "MultiEdit", "Write", "NotebookEdit"},
    READ: {"Read", "Glob", "Grep", "LS", "NotebookRead"},
}
GEMINI_CLI_TOOLS = {
    SHELL: {"run_shell_command"},
    EDIT: {"write_file", "replace", "edit"},
    READ: {"read_file", "read_many_files", "glob", "search_file_content", "grep", "list_directory", "ls"},
}
OPENCODE_TOOLS = {
    SHELL: {"bash"},
    EDIT: {"edit", "write", "patch", "multiedit"},
    READ: {"read", "glob", "grep", "list"},
}
OPENHANDS_TOOLS = {
    SHELL: {"terminal", "execute_bash", "bash"},
    EDIT: {"file_editor", "str_replace_editor"},
    READ: set(),
}
CODEX_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search", "todo_list")
#: `file_editor` commands that only look.
OPENHANDS_VIEW_COMMANDS = {"view"}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def tool_kind(table: Mapping[str, set[str]], tool: str) -> str:
    return next((kind for kind, names in table.items() if tool in names), OTHER)


def classify(table: Mapping[str, set[str]], tool: str, args: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, detail) of a call of `tool` with `args`, by the stack's tool table."""
    kind = tool_kind(table, tool)
    if kind == SHELL:
        command = _str(args.get("command") or args.get("cmd"))
        if not command.strip():
            return OTHER, "(no command: reads the running command's output)"
        return command_kind(command), short_detail(unwrap(command))
    path = args.get("file_path") or args.get("filePath") or args.get("path") or args.get("pattern")
    return kind, short_detail(_str(path) or _str(args.get("description")) or tool)


def _content_blocks(event: Event) -> Iterator[Mapping[str, Any]]:
    for block in _dict(event.get("message")).get("content") or []:
        if isinstance(block, Mapping):
            yield block


def claude_code(events: Iterable[Event]) -> Iterator[Found]:
    """`claude -p --output-format stream-json`: `assistant` events whose message content holds
    `tool_use` blocks (`id`, `name`, `input`); the event's `timestamp` (ISO) when present."""
    for event in events:
        if event.get("type") != "assistant":
            continue
        at = parse_time(event.get("timestamp"))
        for block in _content_blocks(event):
            if block.get("type") == "tool_use":
                tool = _str(block.get("name"))
                kind, detail = classify(CLAUDE_CODE_TOOLS, tool, _dict(block.get("input")))
                yield at, tool, kind, detail, _str(block.get("id")) or None


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_str(_dict(part).get("text")) for part in content)
    return ""


def claude_code_backgrounded(events: Iterable[Event]) -> set[str]:
    """Ids of the tool calls whose result (a `tool_result` block of a `user` event) says Claude Code
    moved the command to the background (`MOVED_TO_BACKGROUND`)."""
    found = set()
    for event in events:
        if event.get("type") != "user":
            continue
        for block in _content_blocks(event):
            if block.get("type") == "tool_result" and MOVED_TO_BACKGROUND.search(
                _result_text(block.get("content"))
            ):
                found.add(_str(block.get("tool_use_id")))
    return found


def codex(events: Iterable[Event]) -> Iterator[Found]:
    """`codex exec --json`: `item.started` / `item.completed` events (one item may appear in both;
    the first counts) whose `item.type` is `command_execution` (`command`, wrapped in `bash -lc`),
    `file_change` (`changes[].path`), `mcp_tool_call`, `web_search` or `todo_list`. No times."""
    seen: set[str] = set()
    for event in events:
        if event.get("type") not in ("item.started", "item.completed"):
            continue
        item = _dict(event.get("item"))
        item_id, kind_name = _str(item.get("id")), _str(item.get("type"))
        if item_id in seen or kind_name not in (
            "command_execution",
            "file_change",
            "mcp_tool_call",
            "web_search",
            "todo_list",
        ):
            continue
        seen.add(item_id)
        if kind_name == "command_execution":
            command = _str(item.get("command"))
            yield None, kind_name, command_kind(command), short_detail(unwrap(command)), item_id or None
        elif kind_name == "file_change":
            paths = [_str(_dict(c).get("path")) for c in item.get("changes") or []]
            detail = short_detail(", ".join(p for p in paths if p) or kind_name)
            yield None, kind_name, EDIT, detail, item_id or None
        elif kind_name == "mcp_tool_call":
            name = f"{_str(item.get('server'))}.{_str(item.get('tool'))}".strip(".")
            yield None, kind_name, OTHER, short_detail(name or kind_name), item_id or None
        else:
            yield None, kind_name, OTHER, short_detail(_str(item.get("query")) or kind_name), item_id or None


def gemini_cli(events: Iterable[Event]) -> Iterator[Found]:
    """`gemini --output-format stream-json`: `tool_use` events (`tool_name`, `parameters`,
    `timestamp` ISO)."""
    for event in events:
        if event.get("type") == "tool_use":
            tool = _str(event.get("tool_name"))
            kind, detail = classify(GEMINI_CLI_TOOLS, tool, _dict(event.get("parameters")))
            yield parse_time(event.get("timestamp")), tool, kind, detail, _str(event.get("tool_id")) or None


def opencode(events: Iterable[Event]) -> Iterator[Found]:
    """`opencode run --format json`: `tool_use` events, one per finished call: `part.tool`,
    `part.state.input`, `part.state.time.start` (epoch ms; else the event's `timestamp`)."""
    for event in events:
        if event.get("type") != "tool_use":
            continue
        part = _dict(event.get("part"))
        state = _dict(part.get("state"))
        started = _dict(state.get("time")).get("start") or event.get("timestamp")
        at = parse_time(started / 1000) if isinstance(started, int | float) else parse_time(started)
        tool = _str(part.get("tool"))
        kind, detail = classify(OPENCODE_TOOLS, tool, _dict(state.get("input")))
        yield at, tool, kind, detail, _str(part.get("callID")) or None


def openhands(events: Iterable[Event]) -> Iterator[Found]:
    """The OpenHands SDK runner's events (one JSON line each, log lines among them): action
    events (`kind: ActionEvent`, or an `action` with a `tool_name`) from the agent; `timestamp`
    is ISO without a zone (UTC)."""
    for event in events:
        action = _dict(event.get("action"))
        if not action or event.get("source", "agent") != "agent":
            continue
        tool = _str(event.get("tool_name")) or _str(action.get("kind"))
        kind, detail = classify(OPENHANDS_TOOLS, tool, action)
        if kind == EDIT and _str(action.get("command")) in OPENHANDS_VIEW_COMMANDS:
            kind = READ
        yield parse_time(event.get("timestamp")), tool, kind, detail, _str(event.get("tool_call_id")) or None


READERS: dict[str, Callable[[Iterable[Event]], Iterator[Found]]] = {
    "claude-code": claude_code,
    "codex": codex,
    "gemini-cli": gemini_cli,
    "opencode": opencode,
    "openhands": openhands,
}


#: Per stack: the ids of the calls whose command the stack moved to the background.
BACKGROUNDED: dict[str, Callable[[Iterable[Event]], set[str]]] = {
    "claude-code": claude_code_backgrounded,
}


def parse_trajectory(stack: str, events: Iterable[Event]) -> list[ToolCall]:
    """The tool calls of `stack`'s event stream, numbered from 1 in stream order; [] for an
    unknown stack."""
    reader = READERS.get(stack)
    if reader is None:
        return []
    events = list(events)
    moved = BACKGROUNDED[stack](events) if stack in BACKGROUNDED else set()
    return [
        ToolCall(seq=n, tool=tool or "?", kind=kind, detail=detail, at=at, backgrounded=call_id in moved)
        for n, (at, tool, kind, detail, call_id) in enumerate(reader(events), start=1)
    ]


def event_lines(output: bytes) -> bytes:
    """The stack's event stream in an agent's output: the lines that are JSON objects, one per
    line (what is stored as `agent/trajectory.jsonl`, locally and in a cluster)."""
    kept = []
    for line in output.splitlines():
        try:
            if isinstance(json.loads(line), dict):
                kept.append(line)
        except ValueError:
            continue
    return b"".join(line + b"\n" for line in kept)


def stream_events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL stream, in order (other lines skipped)."""
    events = []
    for line in raw.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events
