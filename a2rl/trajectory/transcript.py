"""The run's transcript: what the agent's model was sent and what it said, call by call. Pure.

Read from the driver gateway's call records (`driver/calls/`, `DriverCallRecord`): the
request body carries the conversation so far (the stack's previous tool results included) and the
response body the model's answer (a stream reassembled by the gateway, docs/gateway.md). Each call
becomes a `Step`: the messages that are new since the conversation's previous call (tool results,
the user's text; the whole conversation, system prompt included, for a call that continues none),
then the model's reply (text, thinking, tool calls with their arguments: `name: value` lines).

Protocols: Anthropic Messages (`tool_use` / `tool_result` blocks), OpenAI Chat Completions
(`tool_calls`, `role: tool`), OpenAI Responses (`function_call` / `function_call_output` items and
their custom/local-shell kinds) and Gemini (`functionCall` / `functionResponse` parts).

Every text is scrubbed of secrets (`a2rl.redaction.redact_secrets`), then cut to `MAX_TEXT_BYTES`
(`Block.cut` says how many bytes were left out). Only generation calls become steps (token counts
and model lists do not).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from a2rl.records.driver import DriverCallRecord
from a2rl.redaction import redact_secrets

#: Most bytes (UTF-8) kept of one block's text.
MAX_TEXT_BYTES = 20_000
GENERATING = frozenset({"chat", "generate_content"})

TEXT, THINKING, TOOL_CALL, TOOL_RESULT, OTHER = "text", "thinking", "tool_call", "tool_result", "other"


@dataclass(frozen=True)
class Block:
    kind: str  # TEXT | THINKING | TOOL_CALL | TOOL_RESULT | OTHER
    text: str
    name: str | None = None  # the tool's name (a call; a result when the protocol says)
    call_id: str | None = None
    error: bool = False  # a tool result marked as an error
    cut: int = 0  # bytes left out of `text`


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant | tool
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Step:
    index: int  # the driver call's number
    started_at: str | None
    finished_at: str | None
    model: str | None
    protocol: str | None
    #: Messages new since the conversation's previous call (all of them: `continued` False).
    inputs: tuple[Message, ...]
    reply: tuple[Message, ...]
    continued: bool = False
    #: Why the reply is missing or partial (a refusal, an error, a stream not reassembled).
    note: str | None = None
    status: int | None = None


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def cap(text: str, limit: int = MAX_TEXT_BYTES) -> tuple[str, int]:
    """(`text` cut to `limit` UTF-8 bytes, the bytes left out)."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text, 0
    return data[:limit].decode("utf-8", errors="ignore"), len(data) - limit


def _show(value: object) -> str:
    """A tool's arguments or result as text: strings as they are, JSON (a JSON string parsed) indented."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        value = parsed if isinstance(parsed, dict | list) else value
        if isinstance(value, str):
            return value
    return json.dumps(value, ensure_ascii=False, indent=2)


def _show_arguments(value: object) -> str:
    """A tool call's arguments: an object as `name: value` lines, strings as they are (a heredoc
    stays readable), other values as JSON; anything else as `_show` shows it."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        value = parsed
    if not isinstance(value, Mapping) or not value:
        return _show(value)
    lines = []
    for key, arg in value.items():
        shown = arg if isinstance(arg, str) else json.dumps(arg, ensure_ascii=False)
        lines.append(f"{key}:\n{shown}" if "\n" in shown else f"{key}: {shown}")
    return "\n".join(lines)


def _block(kind: str, value: object, secrets: Sequence[str], **kw: Any) -> Block:
    shown = "" if value is None else _show_arguments(value) if kind == TOOL_CALL else _show(value)
    text, cut = cap(redact_secrets(shown, secrets))
    name = kw.pop("name", None)
    return Block(kind, text, name=redact_secrets(str(name), secrets) if name else None, cut=cut, **kw)


def _content_text(content: object) -> str:
    """Text of a tool result's content: a string, or the text of its parts (others by type)."""
    if isinstance(content, str):
        return content
    parts = []
    for part in _list(content):
        p = _dict(part)
        if isinstance(p.get("text"), str):
            parts.append(p["text"])
        elif p:
            parts.append(f"[{p.get('type', 'part')}]")
    return "\n".join(parts) if parts else ("" if content is None else _show(content))


# --- Anthropic Messages -----------------------------------------------------------------------
def _anthropic_blocks(content: object, secrets: Sequence[str]) -> list[Block]:
    if isinstance(content, str):
        return [_block(TEXT, content, secrets)]
    blocks = []
    for raw in _list(content):
        b = _dict(raw)
        kind = b.get("type")
        if kind == "text":
            blocks.append(_block(TEXT, b.get("text", ""), secrets))
        elif kind in ("thinking", "redacted_thinking"):
            blocks.append(_block(THINKING, b.get("thinking", "[redacted thinking]"), secrets))
        elif kind in ("tool_use", "server_tool_use"):
            blocks.append(_block(TOOL_CALL, b.get("input"), secrets, name=b.get("name"), call_id=b.get("id")))
        elif kind == "tool_result":
            blocks.append(
                _block(
                    TOOL_RESULT,
                    _content_text(b.get("content")),
                    secrets,
                    call_id=b.get("tool_use_id"),
                    error=b.get("is_error") is True,
                )
            )
        elif b:
            blocks.append(Block(OTHER, f"[{kind or 'block'}]"))
    return blocks


def _anthropic_request(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    out = []
    if body.get("system"):
        out.append(Message("system", tuple(_anthropic_blocks(body["system"], secrets))))
    for m in map(_dict, _list(body.get("messages"))):
        out.append(Message(str(m.get("role", "user")), tuple(_anthropic_blocks(m.get("content"), secrets))))
    return out


def _anthropic_reply(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    return [Message("assistant", tuple(_anthropic_blocks(body.get("content"), secrets)))]


# --- OpenAI Chat Completions ------------------------------------------------------------------
def _chat_message(m: Mapping[str, Any], secrets: Sequence[str]) -> Message:
    role = str(m.get("role", "user"))
    blocks: list[Block] = []
    content = m.get("content")
    if role == "tool":
        blocks.append(_block(TOOL_RESULT, _content_text(content), secrets, call_id=m.get("tool_call_id")))
        return Message(role, tuple(blocks))
    for key in ("reasoning_content", "reasoning"):
        if isinstance(m.get(key), str) and m[key]:
            blocks.append(_block(THINKING, m[key], secrets))
    if content:
        blocks.append(_block(TEXT, _content_text(content), secrets))
    for call in map(_dict, _list(m.get("tool_calls"))):
        fn = _dict(call.get("function"))
        blocks.append(
            _block(TOOL_CALL, fn.get("arguments"), secrets, name=fn.get("name"), call_id=call.get("id"))
        )
    return Message(role, tuple(blocks))


def _chat_request(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    return [_chat_message(m, secrets) for m in map(_dict, _list(body.get("messages")))]


def _chat_reply(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    choices = [_dict(c) for c in _list(body.get("choices"))][:1]
    return [_chat_message(_dict(c.get("message")), secrets) for c in choices]


# --- OpenAI Responses -------------------------------------------------------------------------
def _responses_items(items: object, secrets: Sequence[str], default_role: str) -> list[Message]:
    if isinstance(items, str):
        return [Message("user", (_block(TEXT, items, secrets),))]
    out: list[Message] = []
    for it in map(_dict, _list(items)):
        kind = it.get("type", "message")
        if kind == "message":
            role = str(it.get("role", default_role))
            out.append(Message(role, (_block(TEXT, _content_text(it.get("content")), secrets),)))
        elif kind == "reasoning":
            text = "\n".join(_dict(s).get("text", "") for s in _list(it.get("summary"))) or "[reasoning]"
            out.append(Message("assistant", (_block(THINKING, text, secrets),)))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            args = it.get("arguments", it.get("input", it.get("action")))
            name = it.get("name") or kind
            call = _block(TOOL_CALL, args, secrets, name=name, call_id=it.get("call_id"))
            out.append(Message("assistant", (call,)))
        elif kind.endswith("_call_output"):
            result = _block(TOOL_RESULT, _content_text(it.get("output")), secrets, call_id=it.get("call_id"))
            out.append(Message("tool", (result,)))
        elif it:
            out.append(Message(default_role, (Block(OTHER, f"[{kind}]"),)))
    return out


def _responses_request(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    out = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        out.append(Message("system", (_block(TEXT, body["instructions"], secrets),)))
    return out + _responses_items(body.get("input"), secrets, "user")


def _responses_reply(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    return _responses_items(body.get("output"), secrets, "assistant")


# --- Gemini -----------------------------------------------------------------------------------
def _gemini_content(c: Mapping[str, Any], secrets: Sequence[str], role: str | None = None) -> Message:
    blocks = []
    for part in map(_dict, _list(c.get("parts"))):
        if "functionCall" in part:
            fc = _dict(part["functionCall"])
            blocks.append(
                _block(TOOL_CALL, fc.get("args"), secrets, name=fc.get("name"), call_id=fc.get("id"))
            )
        elif "functionResponse" in part:
            fr = _dict(part["functionResponse"])
            blocks.append(
                _block(TOOL_RESULT, fr.get("response"), secrets, name=fr.get("name"), call_id=fr.get("id"))
            )
        elif isinstance(part.get("text"), str):
            blocks.append(_block(THINKING if part.get("thought") else TEXT, part["text"], secrets))
        elif part:
            blocks.append(Block(OTHER, f"[{next(iter(part))}]"))
    gemini_role = role or str(c.get("role", "user"))
    return Message("assistant" if gemini_role == "model" else gemini_role, tuple(blocks))


def _gemini_request(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    out = []
    system = _dict(body.get("systemInstruction") or body.get("system_instruction"))
    if system:
        out.append(_gemini_content(system, secrets, "system"))
    return out + [_gemini_content(c, secrets) for c in map(_dict, _list(body.get("contents")))]


def _gemini_reply(body: Mapping[str, Any], secrets: Sequence[str]) -> list[Message]:
    candidates = [_dict(c) for c in _list(body.get("candidates"))][:1]
    return [_gemini_content(_dict(c.get("content")), secrets, "model") for c in candidates]


_READERS = {
    "anthropic-messages": (_anthropic_request, _anthropic_reply),
    "openai-chat": (_chat_request, _chat_reply),
    "openai-responses": (_responses_request, _responses_reply),
    "gemini": (_gemini_request, _gemini_reply),
}


def _digest(previous: bytes, message: Message) -> bytes:
    h = hashlib.sha256(previous)
    h.update(repr((message.role, [(b.kind, b.text, b.name) for b in message.blocks])).encode())
    return h.digest()


def _chain(messages: Sequence[Message]) -> list[bytes]:
    """The digest of each prefix of `messages` (`[i]`: the first i + 1)."""
    out, d = [], b""
    for m in messages:
        d = _digest(d, m)
        out.append(d)
    return out


@dataclass
class TranscriptBuilder:
    """Turns call records, in index order, into `Step`s (`add`), remembering conversations so far."""

    secrets: Sequence[str] = ()
    #: Digests of the conversations requests sent so far.
    _seen: set[bytes] = field(default_factory=set)
    #: Tool name by call id (a result names the tool of the call it answers).
    _tools: dict[str, str] = field(default_factory=dict)

    def _named(self, message: Message) -> Message:
        blocks = []
        for b in message.blocks:
            if b.kind == TOOL_CALL and b.call_id and b.name:
                self._tools[b.call_id] = b.name
            named = b.kind == TOOL_RESULT and b.call_id and not b.name and b.call_id in self._tools
            blocks.append(dataclasses.replace(b, name=self._tools[b.call_id]) if named and b.call_id else b)
        return Message(message.role, tuple(blocks))

    def add(self, record: DriverCallRecord) -> Step | None:
        """The step of one call; None for a call that generates nothing (token counts, model lists)."""
        if record.operation is not None and record.operation not in GENERATING:
            return None
        readers = _READERS.get(record.protocol or "")
        request = _dict(record.request_body)
        messages = readers[0](request, self.secrets) if readers else []
        chain = _chain(messages)
        start = 0
        for i in range(len(chain) - 1, -1, -1):
            if chain[i] in self._seen:
                start = i + 1
                break
        continued = start > 0
        # An earlier request ended there: its reply (shown with that call) comes next.
        while continued and start < len(messages) and messages[start].role == "assistant":
            start += 1
        if chain:
            self._seen.add(chain[-1])
        reply: list[Message] = []
        note = None
        body = record.response_body
        if record.refused:
            note = f"refused by the gateway: {record.refused}"
        elif record.error:
            note = redact_secrets(record.error, self.secrets)
        if readers and isinstance(body, Mapping) and record.status is not None and record.status < 400:
            reply = readers[1](body, self.secrets)
        elif note is None and record.status is not None and record.status >= 400:
            note = f"HTTP {record.status}: " + cap(redact_secrets(_show(body), self.secrets), 2000)[0]
        elif note is None and record.stream:
            note = "streamed, content not kept (the stream could not be reassembled)"
        elif note is None and not readers:
            note = f"protocol {record.protocol or 'unknown'}: content not read"
        if record.truncated and note is None:
            note = "the gateway's record of this call was cut (over its size limit)"
        return Step(
            index=record.index,
            started_at=record.started_at,
            finished_at=record.finished_at,
            model=record.response_model or record.request_model,
            protocol=record.protocol,
            inputs=tuple(self._named(m) for m in messages[start:]),
            reply=tuple(self._named(m) for m in reply if m.blocks),
            continued=continued,
            note=note,
            status=record.status,
        )


def build_transcript(records: Iterable[DriverCallRecord], secrets: Sequence[str] = ()) -> list[Step]:
    """The steps of `records` (sorted by index here)."""
    builder = TranscriptBuilder(secrets=secrets)
    steps = (builder.add(r) for r in sorted(records, key=lambda r: r.index))
    return [s for s in steps if s is not None]
