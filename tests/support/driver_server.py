"""A scripted driver LLM on loopback: speaks each provider's wire protocol and plays one script.

The LLM agent stacks (Claude Code, Codex CLI, Gemini CLI, OpenCode, OpenHands) are real programs
that talk to a model over HTTP. In the tests the "model" is this server: it speaks

- **Anthropic Messages**: `POST /v1/messages` (JSON, or SSE with `stream: true`), plus
  `POST /v1/messages/count_tokens`;
- **OpenAI Chat Completions**: `POST /v1/chat/completions` (JSON, or SSE chunks with
  `delta.tool_calls`; a final usage chunk when `stream_options.include_usage`);
- **OpenAI Responses**: `POST /v1/responses` (JSON, or SSE: `response.created`, …,
  `response.completed` with usage);
- **Gemini**: `POST /v1beta/models/<m>:generateContent` and `:streamGenerateContent?alt=sse`,
  plus `:countTokens` (camelCase or snake_case fields; litellm posts to `/models/<m>:…`);
- the side endpoints the stacks call: model listings (`GET /v1/models`, `GET /v1beta/models`),
  answered minimally.

Every path also works under a prefix (`/anything/v1/messages`), so a test can give a stack a
base URL with or without `/v1`.

**The script** is a list of shell commands, written once. For each request the server finds the
stack's shell tool among the tools the request declares (Claude Code `Bash`, Codex
`exec_command`/`shell`/`shell_command`, Gemini CLI `run_shell_command`, OpenCode `bash`,
OpenHands `terminal`/`execute_bash`) and builds that tool's arguments from its JSON schema (a
string or an argv array, other required fields filled in). Which step to play is read from the
conversation itself: a request that carries *k* tool results gets step *k* as a tool call, and
once every step has its result, the final text (the turn ends). That is stateless, so retries,
parallel side calls and a stack's own bookkeeping requests cannot push the script forward. A
request that declares no shell tool (titles, summaries, a "who speaks next" check) is a *side
call*: it gets `side_text`, or for a Gemini JSON-schema request the smallest JSON that fits.
A tool result saying the command still runs (Codex: `Process running with session ID N`;
OpenHands: `[The command has no new output after …]`) is waited on with the stack's own tool
(`write_stdin`, an empty `terminal` command) before the next step is played. A step with `until`
is played again while its result lacks that text (each time as `: check N; <command>`, so that
no stack's loop detection takes the polls for a model stuck in a loop): how a script waits, with
bounded shell loops, for a command that the stack moved to the background or stopped waiting
for (Claude Code moves a command still running at its timeout to the background; Gemini CLI
cancels one silent for 5 minutes; `Step.timeout_s` sets a stack's timeout where it takes one).

**Errors.** `DriverServer(fail_after=N, fail_status=S, fail_message=M)` answers every model call
after N answers with S and M in the provider's own error shape, and no usage: what a gateway
past its budget does (docs/agents.md says which status makes each stack stop at once).

**Usage and the log.** Every model response carries usage (`input`, `output`, `cached`) from the
script, rendered in the protocol's own fields:

| protocol | input | output | cached |
|---|---|---|---|
| Anthropic | `input_tokens` = input - cached | `output_tokens` | `cache_read_input_tokens` |
| OpenAI Chat | `prompt_tokens` | `completion_tokens` | `prompt_tokens_details.cached_tokens` |
| OpenAI Responses | `input_tokens` | `output_tokens` | `input_tokens_details.cached_tokens` |
| Gemini | `promptTokenCount` | `candidatesTokenCount` | `cachedContentTokenCount` |

(`input` counts cached tokens too, as OpenAI and Gemini do; Anthropic reports them apart.) The
server logs every request (method, path, headers, body, the protocol, what it played, the usage
it sent and the tool results the stack sent back), so a test can assert "metered tokens == the
sum of the usage sent" (`usage_total()`) and "this header was seen" (`header_values()`).

Run it by hand: `python -m tests.support.driver_server --script script.json --port 8700 --log
requests.jsonl` (the script file: `{"steps": ["cmd", {"command": "cmd", "usage": {...},
"until": "text", "timeout_s": 5}], "final_text": "..."}`; without `--script`, the default script
with a trivial train.py).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import socket
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

# The shell tool of each stack, by the name its current versions send (checked against the real
# CLIs: docs/agents.md, "Driving the stacks offline"). First match in this order wins.
SHELL_TOOL_NAMES: tuple[str, ...] = (
    "Bash",  # Claude Code
    "exec_command",  # Codex CLI (unified exec)
    "shell_command",  # Codex CLI (string command)
    "shell",  # Codex CLI (argv command)
    "run_shell_command",  # Gemini CLI
    "bash",  # OpenCode
    "terminal",  # OpenHands SDK
    "execute_bash",  # OpenHands (older)
)
# The property of a shell tool's schema that holds the command.
_COMMAND_KEYS = ("command", "cmd", "commands", "script")
# Tool types (OpenAI Responses) that are a built-in shell rather than a function.
_LOCAL_SHELL_TYPES = ("local_shell",)

SUBMIT_COMMAND = (
    "curl -s -X POST $GRADING_SERVER_URL/submit -H 'Content-Type: application/json' "
    """-d '{"model_path":"output/v1"}'"""
)


@dataclass(frozen=True)
class Usage:
    """Token usage of one model response; `input` includes `cached`."""

    input: int = 0
    output: int = 0
    cached: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output, self.cached + other.cached)

    @classmethod
    def parse(cls, data: Any) -> Usage:
        if isinstance(data, Usage):
            return data
        if not isinstance(data, dict):
            raise ValueError(f"usage must be an object with input/output/cached, not {data!r}")
        return cls(int(data.get("input", 0)), int(data.get("output", 0)), int(data.get("cached", 0)))


@dataclass(frozen=True)
class Step:
    """One scripted tool call: a shell command, with the usage of the response that plays it.
    `until`: played again while its result lacks this text. `timeout_s`: the shell tool's timeout
    for this step (default: the script's)."""

    command: str
    usage: Usage | None = None
    until: str | None = None
    timeout_s: float | None = None


@dataclass
class Script:
    """What the model plays: each step as a shell tool call, then `final_text` (end of turn)."""

    steps: list[Step]
    final_text: str = "Done: the model is trained and output/v1 is submitted."
    usage: Usage = field(default_factory=lambda: Usage(input=1200, output=40, cached=200))
    final_usage: Usage | None = None
    side_text: str = "Scripted run"
    side_usage: Usage = field(default_factory=lambda: Usage(input=60, output=4, cached=0))
    timeout_s: float = 1800  # how long a step may run: the shell tools' timeouts, where they have one

    @classmethod
    def of(cls, commands: list[str], **kwargs: Any) -> Script:
        return cls(steps=[Step(c) for c in commands], **kwargs)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Script:
        steps = []
        for raw in data.get("steps", []):
            if isinstance(raw, str):
                steps.append(Step(raw))
            else:
                usage = Usage.parse(raw["usage"]) if "usage" in raw else None
                until = str(raw["until"]) if "until" in raw else None
                timeout = float(raw["timeout_s"]) if "timeout_s" in raw else None
                steps.append(Step(str(raw["command"]), usage, until, timeout))
        kwargs: dict[str, Any] = {}
        for key in ("final_text", "side_text"):
            if key in data:
                kwargs[key] = str(data[key])
        for key in ("usage", "final_usage", "side_usage"):
            if key in data:
                kwargs[key] = Usage.parse(data[key])
        if "timeout_s" in data:
            kwargs["timeout_s"] = float(data["timeout_s"])
        return cls(steps=steps, **kwargs)

    def step_of(self, results: list[str]) -> int:
        """The step to play after these tool results (stateless: read from the conversation). A
        result saying its command still runs completes nothing; a result of an `until` step that
        lacks its text plays that step again."""
        return self.position(results)[0]

    def position(self, results: list[str]) -> tuple[int, int]:
        """The step to play after these tool results, and how often it was played already."""
        k = played = 0
        for result in results:
            if still_running(result) is not None:
                continue
            until = self.steps[k].until if k < len(self.steps) else None
            if until is None or until in result:
                k, played = k + 1, 0
            else:
                played += 1
        return k, played

    def command_of(self, index: int, played: int) -> str:
        """Step `index`'s command; played again, it says which time (`: check 2; …`), so that a
        stack's loop detection (Gemini CLI stops a turn after a few identical tool calls) sees
        distinct calls, as it would from a model that polls."""
        command = self.steps[index].command
        return f": check {played + 1}; {command}" if played else command

    def step_usage(self, index: int) -> Usage:
        if index < len(self.steps):
            return self.steps[index].usage or self.usage
        return self.final_usage or self.usage


def write_file_command(path: str, content: str, delimiter: str = "A2RL_EOF") -> str:
    """A shell command that writes `content` to `path` (parents created) with a quoted heredoc."""
    if any(line == delimiter for line in content.splitlines()):
        raise ValueError(f"content holds the heredoc delimiter line {delimiter!r}")
    body = content if content.endswith("\n") else content + "\n"
    parent = path.rsplit("/", 1)[0] if "/" in path else "."
    return f"mkdir -p {parent} && cat > {path} <<'{delimiter}'\n{body}{delimiter}"


TRIVIAL_TRAIN_PY = (
    "from pathlib import Path\n\n"
    'out = Path("output/v1")\n'
    "out.mkdir(parents=True, exist_ok=True)\n"
    '(out / "x").write_text("trained\\n")\n'
    'print("trained")\n'
)


def default_script(train_py: str = TRIVIAL_TRAIN_PY, **kwargs: Any) -> Script:
    """The issue's script: write code/train.py, run it, submit output/v1 with curl, stop."""
    return Script.of(
        [write_file_command("code/train.py", train_py), "python3 code/train.py", SUBMIT_COMMAND], **kwargs
    )


# --------------------------------------------------------------------------------------------
# What one response plays, and the log


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    kind: str = "function"  # or "local_shell" (OpenAI Responses built-in)


@dataclass(frozen=True)
class Turn:
    """One model response: a tool call or plain text, and its usage."""

    kind: str  # "step" | "poll" (wait for a running step) | "final" | "side"
    usage: Usage
    text: str = ""
    call: ToolCall | None = None
    step: int | None = None


@dataclass
class RequestRecord:
    """One HTTP request the server received, and what it answered."""

    seq: int
    time: float
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    protocol: str = "other"  # anthropic | openai-chat | openai-responses | gemini | side endpoint name
    model: str = ""
    stream: bool = False
    kind: str = "other"  # step | poll | final | side | error | other
    step: int | None = None
    tool: str | None = None
    tool_arguments: dict[str, Any] | None = None
    tools_declared: list[str] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    usage: Usage | None = None
    status: int = 0
    client: str = ""  # the peer's address

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["usage"] = asdict(self.usage) if self.usage else None
        return data


# --------------------------------------------------------------------------------------------
# Reading requests: tools, tool results, the shell tool's arguments


def _schema_type(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), t[0] if t else "")
    if not t:
        for alt in schema.get("anyOf") or schema.get("oneOf") or []:
            if isinstance(alt, dict) and alt.get("type") not in (None, "null"):
                return _schema_type(alt)
    return str(t or "").lower()


def _default_for(name: str, schema: dict[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    t = _schema_type(schema)
    if t == "string":
        return "Run the scripted command" if "desc" in name.lower() else ""
    if t == "boolean":
        return False
    if t in ("integer", "number"):
        if "timeout" in name.lower():
            return 600_000 if name.lower().endswith("ms") else 600
        return schema.get("minimum", 0)
    if t == "array":
        return []
    if t == "object":
        return {}
    return None


def _timeout_value(name: str, schema: dict[str, Any], seconds: float) -> float:
    """`seconds` in the unit of a timeout property (ms or s, read from its name and description),
    capped at the maximum the schema or its description gives ("max 600000", "range is 250-30000")."""
    desc = str(schema.get("description", "")).lower()
    in_ms = name.lower().endswith("ms") or "millisecond" in desc or re.search(r"\d\s*ms\b", desc)
    value = seconds * 1000 if in_ms else seconds
    caps = [schema["maximum"]] if isinstance(schema.get("maximum"), int | float) else []
    caps += [float(m) for m in re.findall(r"\bmax(?:imum)?\s+(\d+)", desc)]
    caps += [float(m) for m in re.findall(r"range is \d+\s*-\s*(\d+)", desc)]
    value = min([value, *caps])
    return int(value) if float(value).is_integer() else value


def shell_arguments(schema: dict[str, Any], command: str, timeout_s: float = 1800) -> dict[str, Any]:
    """The arguments of a call to a shell tool with this JSON schema that runs `command`.

    The command goes in `command`/`cmd` (a string, or `["bash", "-lc", command]` where the schema
    wants an array); other required properties get a default; a description is given where the
    tool asks for one; timeout-like properties (`timeout`, `yield_time_ms`) are set to
    `timeout_s` within the tool's own maximum, so a long training step is waited for.
    """
    props: dict[str, Any] = schema.get("properties") or {}
    key = next((k for k in _COMMAND_KEYS if k in props), "command")
    as_array = _schema_type(props.get(key) or {"type": "string"}) == "array"
    args: dict[str, Any] = {key: ["bash", "-lc", command] if as_array else command}
    for name in schema.get("required") or []:
        if name not in args:
            args[name] = _default_for(name, props.get(name) or {})
    for name, prop in props.items():
        if name in args or not isinstance(prop, dict):
            continue
        if name == "description":
            args[name] = "Run the scripted command"
        elif name in ("timeout", "timeout_ms", "yield_time_ms") and _schema_type(prop) in (
            "number",
            "integer",
        ):
            args[name] = _timeout_value(name, prop, timeout_s)
    return args


# Tool results that say the command is still running, and how the stack's model waits for it:
# (pattern, the tool to call, its arguments from the match).
_STILL_RUNNING: tuple[tuple[re.Pattern[str], str, Any], ...] = (
    # Codex `exec_command`: output so far and "Process running with session ID N"; poll with
    # `write_stdin` and no input.
    (
        re.compile(r"Process running with session ID (\d+)"),
        "write_stdin",
        lambda m: {"session_id": int(m.group(1)), "chars": "", "yield_time_ms": 30_000},
    ),
    # OpenHands `terminal`: "[The command has no new output after 30 seconds. …" or "[The command
    # timed out after N seconds. …"; an empty command shows more output.
    (
        re.compile(r"\[The command (?:has no new output after|timed out after)"),
        "terminal",
        lambda m: {"command": "", "is_input": False, "timeout": 1800},
    ),
)


def still_running(result: str) -> tuple[str, dict[str, Any]] | None:
    """For a tool result that says its command still runs: (the tool, the arguments) to wait with."""
    for pattern, tool, build in _STILL_RUNNING:
        m = pattern.search(result)
        if m:
            return tool, build(m)
    return None


@dataclass(frozen=True)
class ToolDecl:
    name: str
    schema: dict[str, Any]
    kind: str = "function"


def _lower_types(schema: Any) -> Any:
    """Gemini `parameters` schemas spell types in capitals (`STRING`); JSON Schema does not."""
    if isinstance(schema, dict):
        out = {k: _lower_types(v) for k, v in schema.items()}
        if isinstance(out.get("type"), str):
            out["type"] = out["type"].lower()
        return out
    if isinstance(schema, list):
        return [_lower_types(x) for x in schema]
    return schema


def declared_tools(protocol: str, body: dict[str, Any]) -> list[ToolDecl]:
    tools = body.get("tools") or []
    out: list[ToolDecl] = []
    if protocol == "anthropic":
        for t in tools:
            if isinstance(t, dict) and "name" in t:
                out.append(ToolDecl(t["name"], t.get("input_schema") or {}))
    elif protocol == "openai-chat":
        for t in tools:
            fn = (t or {}).get("function") or {}
            if "name" in fn:
                out.append(ToolDecl(fn["name"], fn.get("parameters") or {}))
    elif protocol == "openai-responses":
        for t in tools:
            if not isinstance(t, dict):
                continue
            if t.get("type") in _LOCAL_SHELL_TYPES:
                out.append(ToolDecl(t["type"], {}, kind="local_shell"))
            elif "name" in t:
                out.append(
                    ToolDecl(t["name"], t.get("parameters") or {}, kind=str(t.get("type", "function")))
                )
    elif protocol == "gemini":
        for t in tools:
            # The API takes both spellings: litellm (OpenHands) sends snake_case.
            for fn in _get(t or {}, "functionDeclarations") or []:
                schema = _get(fn, "parametersJsonSchema") or _lower_types(fn.get("parameters") or {})
                out.append(ToolDecl(fn["name"], schema))
    return out


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _get(obj: dict[str, Any], camel: str) -> Any:
    """`obj[camel]`, or its snake_case spelling (Gemini's JSON API accepts both)."""
    value = obj.get(camel)
    return obj.get(_snake(camel)) if value is None else value


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for c in content:
            if isinstance(c, dict):
                parts.append(str(c.get("text", c.get("output", ""))))
            else:
                parts.append(str(c))
        return "".join(parts)
    if content is None:
        return ""
    return json.dumps(content)


def tool_results(protocol: str, body: dict[str, Any]) -> list[str]:
    """The tool results in the conversation of a request, oldest first, as text."""
    out: list[str] = []
    if protocol == "anthropic":
        for m in body.get("messages") or []:
            content = m.get("content")
            if isinstance(content, list):
                out += [_text_of(c.get("content")) for c in content if c.get("type") == "tool_result"]
    elif protocol == "openai-chat":
        out += [_text_of(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "tool"]
    elif protocol == "openai-responses":
        items = body.get("input")
        if isinstance(items, list):
            for it in items:
                if isinstance(it, dict) and str(it.get("type", "")).endswith("call_output"):
                    out.append(_text_of(it.get("output")))
    elif protocol == "gemini":
        for c in body.get("contents") or []:
            for p in c.get("parts") or []:
                response = _get(p, "functionResponse")
                if response is not None:
                    out.append(_text_of(response.get("response")))
    return out


def _json_instance(schema: dict[str, Any]) -> Any:
    """The smallest value that fits a JSON schema: for a side call that asks for JSON."""
    schema = _lower_types(schema)
    if schema.get("enum"):
        return schema["enum"][0]
    t = _schema_type(schema)
    if t == "object":
        props = schema.get("properties") or {}
        return {k: _json_instance(props.get(k) or {}) for k in schema.get("required") or list(props)}
    if t == "array":
        return []
    if t == "boolean":
        return False
    if t in ("integer", "number"):
        return 0
    return "Scripted run"


# --------------------------------------------------------------------------------------------
# The server


_GEMINI_PATH = re.compile(r"/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")


class DriverServer:
    """The scripted driver on `host`:`port` (127.0.0.1, 0: a free port); a context manager.

    `api_key`, when set, is required (as `x-api-key`, `Authorization: Bearer`, `x-goog-api-key`
    or `?key=`); a request without it gets the provider's 401. `fail_after=N`: once N model
    answers were sent, every model request gets `fail_status` with `fail_message` in the
    provider's error shape (what a gateway past its budget does), and no usage.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        api_key: str | None = None,
        shell_tool_names: tuple[str, ...] = SHELL_TOOL_NAMES,
        log_path: Path | None = None,
        chunk_delay_s: float = 0.0,
        answer_delay_s: float = 0.0,
        fail_after: int | None = None,
        fail_status: int = 400,
        fail_message: str = "driver budget exhausted",
    ) -> None:
        self.script = script or default_script()
        self.api_key = api_key
        self.shell_tool_names = shell_tool_names
        self.log_path = log_path
        self.chunk_delay_s = chunk_delay_s
        self.answer_delay_s = answer_delay_s  # a provider's time before its first byte
        self.fail_after, self.fail_status, self.fail_message = fail_after, fail_status, fail_message
        self.records: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._ids = 0
        self._httpd = _Server((host, port), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # -- lifecycle

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The server's root, `http://<host>:<port>` (add `/v1` where a stack wants it)."""
        return f"http://{self._httpd.server_address[0]}:{self.port}"

    def start(self) -> DriverServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> DriverServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the log

    def model_calls(self) -> list[RequestRecord]:
        """The requests answered with a model response (steps, final text and side calls)."""
        with self._lock:
            return [r for r in self.records if r.usage is not None]

    def usage_total(self) -> Usage:
        total = Usage()
        for r in self.model_calls():
            assert r.usage is not None
            total = total + r.usage
        return total

    def errors_sent(self) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.records if r.kind == "error"]

    def _failing(self) -> bool:
        if self.fail_after is None:
            return False
        with self._lock:
            return sum(1 for r in self.records if r.usage is not None) >= self.fail_after

    def steps_played(self) -> list[int]:
        return [r.step for r in self.model_calls() if r.kind == "step" and r.step is not None]

    def finished(self) -> bool:
        """Whether the final text was sent (every step's result came back)."""
        return any(r.kind == "final" for r in self.model_calls())

    def header_values(self, name: str) -> set[str]:
        with self._lock:
            return {r.headers[name.lower()] for r in self.records if name.lower() in r.headers}

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.records]

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    def _add(self, record: RequestRecord) -> None:
        """In the log from the start (its fields are all set before the answer's first byte)."""
        with self._lock:
            self.records.append(record)

    def _write(self, record: RequestRecord) -> None:
        with self._lock:
            if self.log_path is not None:
                with self.log_path.open("a") as f:
                    f.write(json.dumps(record.to_json()) + "\n")

    # -- playing the script

    def plan(self, protocol: str, body: dict[str, Any]) -> tuple[Turn, list[ToolDecl], list[str]]:
        tools = declared_tools(protocol, body)
        results = tool_results(protocol, body)
        by_name = {t.name: t for t in tools}
        shell = next((by_name[n] for n in self.shell_tool_names if n in by_name), None)
        if shell is None:
            shell = next((t for t in tools if t.kind == "local_shell"), None)
        if shell is None:
            return Turn("side", self.script.side_usage, text=self.script.side_text), tools, results
        # Step k is done when its result (or the last poll's) says the command ended.
        k, played = self.script.position(results)
        call_id = f"call_a2rl_{len(results)}"
        wait = still_running(results[-1]) if results else None
        if wait is not None and wait[0] in by_name:
            call = ToolCall(call_id, wait[0], wait[1])
            return Turn("poll", self.script.usage, call=call, step=k), tools, results
        if k >= len(self.script.steps):
            turn = Turn("final", self.script.step_usage(k), text=self.script.final_text, step=k)
            return turn, tools, results
        step = self.script.steps[k]
        command = self.script.command_of(k, played)
        if shell.kind == "local_shell":
            call = ToolCall(call_id, "local_shell", {"command": ["bash", "-lc", command]}, "local_shell")
        else:
            timeout_s = self.script.timeout_s if step.timeout_s is None else step.timeout_s
            call = ToolCall(call_id, shell.name, shell_arguments(shell.schema, command, timeout_s))
        return Turn("step", self.script.step_usage(k), call=call, step=k), tools, results

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(_Handler):
            driver = server

        return Handler


def _split(text: str, parts: int = 3) -> list[str]:
    """`text` in up to `parts` pieces (at least one), to exercise the clients' delta joining."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a gateway's pool opens its connections at once (the default: 5)


class _Handler(BaseHTTPRequestHandler):
    driver: DriverServer
    _record: RequestRecord
    _written: bool = True
    protocol_version = "HTTP/1.1"
    server_version = "a2rl-driver/1"

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in two writes: without this a kept-alive connection's next answer
        # waits ~40 ms for the client's delayed ACK (Nagle), as no provider's server makes it wait.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = self.headers.get("Content-Encoding", "").lower()
        if encoding == "gzip":
            data = gzip.decompress(data)
        elif encoding == "deflate":
            data = zlib.decompress(data)
        return data

    def _send_json(self, status: int, payload: Any) -> None:
        self._commit()
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _start_sse(self) -> None:
        self._commit()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, raw: bytes) -> None:
        self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        self.wfile.flush()
        if self.driver.chunk_delay_s:
            time.sleep(self.driver.chunk_delay_s)

    def _event(self, data: Any, event: str | None = None) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        self._chunk(f"{head}data: {text}\n\n".encode())

    def _end_sse(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _key_ok(self, query: dict[str, list[str]]) -> bool:
        key = self.driver.api_key
        if key is None:
            return True
        offered = {
            self.headers.get("x-api-key", ""),
            self.headers.get("x-goog-api-key", ""),
            self.headers.get("Authorization", "").removeprefix("Bearer ").strip(),
            *query.get("key", []),
        }
        return key in offered

    # -- dispatch

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path.rstrip("/") or "/", parse_qs(parts.query)
        raw = self._read_body() if method == "POST" else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        record = RequestRecord(
            seq=self.driver._next_id(),
            time=time.time(),
            method=method,
            path=parts.path,
            query=query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            client=str(self.client_address[0]),
        )
        self.driver._add(record)
        self._record, self._written = record, False
        try:
            self._route(method, path, query, body, record)
        finally:
            self._commit()

    def _commit(self) -> None:
        """The log file gets the record before the answer does (a test may read it right after)."""
        if not self._written:
            self._written = True
            self.driver._write(self._record)
            if self.driver.answer_delay_s:
                time.sleep(self.driver.answer_delay_s)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, record: RequestRecord
    ) -> None:
        gemini = _GEMINI_PATH.search(path)
        protocol = (
            "anthropic"
            if path.endswith("/messages")
            else "openai-chat"
            if path.endswith("/chat/completions")
            else "openai-responses"
            if path.endswith("/responses")
            else "gemini"
            if gemini
            else None
        )
        if protocol is not None and not self._key_ok(query):
            record.protocol, record.status = protocol, 401
            self._send_json(401, _error(protocol, 401, "invalid api key"))
            return
        if method == "POST" and path.endswith("/messages/count_tokens"):
            record.protocol, record.status = "anthropic-count-tokens", 200
            self._send_json(200, {"input_tokens": self.driver.script.usage.input})
            return
        if method == "POST" and gemini and gemini.group(2) == "countTokens":
            record.protocol, record.status = "gemini-count-tokens", 200
            self._send_json(200, {"totalTokens": self.driver.script.usage.input})
            return
        if method == "GET" and re.search(r"/models(/[^/]+)?$", path):
            record.protocol, record.status = "models", 200
            self._send_json(200, _models(path))
            return
        if method != "POST" or protocol is None or not isinstance(body, dict):
            record.status = 404
            self._send_json(404, {"error": {"type": "not_found", "message": f"no route for {method} {path}"}})
            return
        record.protocol = protocol
        turn, tools, results = self.driver.plan(protocol, body)
        record.tools_declared = [t.name for t in tools]
        record.tool_results = results
        if self.driver._failing():
            record.kind, record.status = "error", self.driver.fail_status
            self._send_json(record.status, _error(protocol, record.status, self.driver.fail_message))
            return
        record.kind, record.step, record.usage = turn.kind, turn.step, turn.usage
        if turn.call is not None:
            record.tool, record.tool_arguments = turn.call.name, turn.call.arguments
        if protocol == "gemini":
            assert gemini is not None
            record.model = gemini.group(1)
            record.stream = gemini.group(2) == "streamGenerateContent"
            if turn.kind == "side":
                turn = _gemini_side(turn, body)
        else:
            record.model = str(body.get("model", ""))
            record.stream = bool(body.get("stream"))
        record.status = 200
        render = {
            "anthropic": self._anthropic,
            "openai-chat": self._chat,
            "openai-responses": self._responses,
            "gemini": self._gemini,
        }[protocol]
        render(turn, record.model or "scripted", record.stream, body)

    # -- Anthropic Messages

    def _anthropic(self, turn: Turn, model: str, stream: bool, body: dict[str, Any]) -> None:
        u = turn.usage
        usage = {
            "input_tokens": u.input - u.cached,
            "output_tokens": u.output,
            "cache_read_input_tokens": u.cached,
            "cache_creation_input_tokens": 0,
        }
        msg_id = f"msg_a2rl_{self.driver._next_id()}"
        stop = "tool_use" if turn.call else "end_turn"
        block: dict[str, Any] = (
            {
                "type": "tool_use",
                "id": turn.call.id.replace("call_", "toolu_"),
                "name": turn.call.name,
                "input": turn.call.arguments,
            }
            if turn.call
            else {"type": "text", "text": turn.text}
        )
        message = {"id": msg_id, "type": "message", "role": "assistant", "model": model}
        if not stream:
            self._send_json(
                200,
                {**message, "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage},
            )
            return
        self._start_sse()
        start_usage = {**usage, "output_tokens": 0}
        self._event(
            {
                "type": "message_start",
                "message": {
                    **message,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
            "message_start",
        )
        if turn.call:
            start = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _split(json.dumps(block["input"]))
            ]
        else:
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _split(turn.text)]
        self._event(
            {"type": "content_block_start", "index": 0, "content_block": start}, "content_block_start"
        )
        for d in deltas:
            self._event({"type": "content_block_delta", "index": 0, "delta": d}, "content_block_delta")
        self._event({"type": "content_block_stop", "index": 0}, "content_block_stop")
        self._event(
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage},
            "message_delta",
        )
        self._event({"type": "message_stop"}, "message_stop")
        self._end_sse()

    # -- OpenAI Chat Completions

    def _chat(self, turn: Turn, model: str, stream: bool, body: dict[str, Any]) -> None:
        u = turn.usage
        usage = {
            "prompt_tokens": u.input,
            "completion_tokens": u.output,
            "total_tokens": u.input + u.output,
            "prompt_tokens_details": {"cached_tokens": u.cached},
        }
        cid = f"chatcmpl-a2rl-{self.driver._next_id()}"
        head = {"id": cid, "created": int(time.time()), "model": model}
        finish = "tool_calls" if turn.call else "stop"
        call: dict[str, Any] | None = (
            {
                "id": turn.call.id,
                "type": "function",
                "function": {"name": turn.call.name, "arguments": json.dumps(turn.call.arguments)},
            }
            if turn.call
            else None
        )
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": None if call else turn.text}
            if call:
                message["tool_calls"] = [call]
            self._send_json(
                200,
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                    "usage": usage,
                },
            )
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunk = {**head, "object": "chat.completion.chunk"}

        def choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

        self._start_sse()
        self._event(choice({"role": "assistant", "content": ""}))
        if call:
            pieces = _split(call["function"]["arguments"])
            first = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
            self._event(choice({"tool_calls": [{"index": 0, **first}]}))
            for p in pieces:
                self._event(choice({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
        else:
            for p in _split(turn.text):
                self._event(choice({"content": p}))
        last = choice({}, finish)
        if include_usage:
            self._event(last)
            self._event({**chunk, "choices": [], "usage": usage})
        else:
            # No usage chunk asked for: the usage rides on the last chunk (as several
            # OpenAI-compatible servers do), so a metering gateway still sees it.
            self._event({**last, "usage": usage})
        self._event("[DONE]")
        self._end_sse()

    # -- OpenAI Responses

    def _responses(self, turn: Turn, model: str, stream: bool, body: dict[str, Any]) -> None:
        u = turn.usage
        usage = {
            "input_tokens": u.input,
            "input_tokens_details": {"cached_tokens": u.cached},
            "output_tokens": u.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.input + u.output,
        }
        n = self.driver._next_id()
        response: dict[str, Any] = {
            "id": f"resp_a2rl_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "in_progress",
            "output": [],
            "usage": None,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
        }
        item: dict[str, Any]
        if turn.call and turn.call.kind == "local_shell":
            item = {
                "type": "local_shell_call",
                "id": f"lsh_a2rl_{n}",
                "call_id": turn.call.id,
                "status": "completed",
                "action": {"type": "exec", **turn.call.arguments, "env": {}},
            }
        elif turn.call:
            item = {
                "type": "function_call",
                "id": f"fc_a2rl_{n}",
                "call_id": turn.call.id,
                "name": turn.call.name,
                "arguments": json.dumps(turn.call.arguments),
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": f"msg_a2rl_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        done = {**response, "status": "completed", "output": [item], "usage": usage}
        if not stream:
            self._send_json(200, done)
            return
        seq = iter(range(1_000_000))

        def ev(kind: str, **fields: Any) -> None:
            self._event({"type": kind, "sequence_number": next(seq), **fields}, kind)

        self._start_sse()
        ev("response.created", response=response)
        ev("response.in_progress", response=response)
        if item["type"] == "function_call":
            ev(
                "response.output_item.added",
                output_index=0,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for p in _split(item["arguments"]):
                ev("response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=p)
            ev(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=0,
                arguments=item["arguments"],
            )
        elif item["type"] == "message":
            ev(
                "response.output_item.added",
                output_index=0,
                item={**item, "content": [], "status": "in_progress"},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            ids = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            ev("response.content_part.added", **ids, part=part)
            for p in _split(turn.text):
                ev("response.output_text.delta", **ids, delta=p)
            ev("response.output_text.done", **ids, text=turn.text)
            ev("response.content_part.done", **ids, part={**part, "text": turn.text})
        else:
            ev("response.output_item.added", output_index=0, item={**item, "status": "in_progress"})
        ev("response.output_item.done", output_index=0, item=item)
        ev("response.completed", response=done)
        self._end_sse()

    # -- Gemini generateContent

    def _gemini(self, turn: Turn, model: str, stream: bool, body: dict[str, Any]) -> None:
        u = turn.usage
        usage = {
            "promptTokenCount": u.input,
            "candidatesTokenCount": u.output,
            "totalTokenCount": u.input + u.output,
            "cachedContentTokenCount": u.cached,
        }
        if turn.call:
            parts: list[list[dict[str, Any]]] = [
                [{"functionCall": {"id": turn.call.id, "name": turn.call.name, "args": turn.call.arguments}}]
            ]
        else:
            parts = [[{"text": p}] for p in (_split(turn.text) if stream else [turn.text])]

        def response(ps: list[dict[str, Any]], last: bool) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": ps}, "index": 0}
            out: dict[str, Any] = {
                "candidates": [cand],
                "modelVersion": model,
                "responseId": f"a2rl-{id(ps)}",
            }
            if last:
                cand["finishReason"] = "STOP"
                out["usageMetadata"] = usage
            return out

        if not stream:
            self._send_json(200, response(parts[0], True))
            return
        self._start_sse()
        for i, ps in enumerate(parts):
            self._chunk(f"data: {json.dumps(response(ps, i == len(parts) - 1))}\r\n\r\n".encode())
        self._end_sse()


def _gemini_side(turn: Turn, body: dict[str, Any]) -> Turn:
    """A Gemini side call that asks for JSON (`responseMimeType`) gets the smallest JSON that fits."""
    config = _get(body, "generationConfig") or {}
    schema = _get(config, "responseJsonSchema") or _get(config, "responseSchema")
    if _get(config, "responseMimeType") == "application/json":
        return Turn(turn.kind, turn.usage, text=json.dumps(_json_instance(schema or {"type": "object"})))
    return turn


_ERROR_TYPES = {  # status: (Anthropic type, OpenAI type, Gemini status)
    400: ("invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT"),
    401: ("authentication_error", "invalid_request_error", "UNAUTHENTICATED"),
    402: ("billing_error", "insufficient_quota", "RESOURCE_EXHAUSTED"),
    403: ("permission_error", "insufficient_quota", "PERMISSION_DENIED"),
    429: ("rate_limit_error", "insufficient_quota", "RESOURCE_EXHAUSTED"),
}


def _error(protocol: str, status: int, message: str) -> dict[str, Any]:
    """An error in the provider's own shape."""
    anthropic, openai, gemini = _ERROR_TYPES.get(status, ("api_error", "server_error", "INTERNAL"))
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": anthropic, "message": message}}
    if protocol == "gemini":
        return {"error": {"code": status, "message": message, "status": gemini}}
    code = "invalid_api_key" if status == 401 else openai
    return {"error": {"message": message, "type": openai, "code": code, "param": None}}


def _models(path: str) -> dict[str, Any]:
    """A one-model listing that reads as OpenAI's, Anthropic's and Gemini's shape at once."""
    one = re.search(r"/models/([^/]+)$", path)
    name = one.group(1) if one else "scripted"
    entry = {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "a2rl",
        "type": "model",
        "display_name": name,
        "created_at": "2025-01-01T00:00:00Z",
        "name": f"models/{name}",
        "displayName": name,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "inputTokenLimit": 1_000_000,
        "outputTokenLimit": 65_536,
    }
    if one:
        return entry
    return {
        "object": "list",
        "data": [entry],
        "models": [entry],
        "has_more": False,
        "first_id": name,
        "last_id": name,
    }


# --------------------------------------------------------------------------------------------
# A stand-in for the grading API's /submit


class SubmitStub:
    """`POST /submit` on loopback: records each submission, answers like the grading API."""

    def __init__(self) -> None:
        self.submissions: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"raw": raw.decode(errors="replace")}
                stub.submissions.append({"path": self.path, "body": body})
                reply = json.dumps({"submission_id": len(stub.submissions), "status": "accepted"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> SubmitStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def iter_sse(lines: Iterator[bytes]) -> Iterator[tuple[str | None, Any]]:
    """(event, data) of a server-sent event stream: for the tests and manual debugging."""
    event: str | None = None
    data: list[str] = []
    for raw in lines:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                text = "\n".join(data)
                yield event, (text if text == "[DONE]" else json.loads(text))
            event, data = None, []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if data:
        text = "\n".join(data)
        yield event, (text if text == "[DONE]" else json.loads(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.driver_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--script", type=Path, help="script JSON (default: the issue's script, trivial train.py)"
    )
    parser.add_argument("--train-py", type=Path, help="with the default script: the train.py to write")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=None, help="require this key")
    parser.add_argument("--log", type=Path, default=None, help="append every request as a JSON line here")
    parser.add_argument("--fail-after", type=int, default=None, help="error every model call after N answers")
    parser.add_argument("--fail-status", type=int, default=400)
    parser.add_argument("--fail-message", default="driver budget exhausted")
    parser.add_argument(
        "--answer-delay-ms", type=float, default=0.0, help="wait before each answer (a provider's latency)"
    )
    args = parser.parse_args(argv)
    if args.script:
        script = Script.from_json(json.loads(args.script.read_text()))
    else:
        script = default_script(args.train_py.read_text()) if args.train_py else default_script()
    with DriverServer(
        script,
        port=args.port,
        api_key=args.api_key,
        log_path=args.log,
        fail_after=args.fail_after,
        fail_status=args.fail_status,
        fail_message=args.fail_message,
        answer_delay_s=args.answer_delay_ms / 1000,
    ) as server:
        print(f"driver server on {server.url} ({len(script.steps)} steps)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        print(f"usage sent: {server.usage_total()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
