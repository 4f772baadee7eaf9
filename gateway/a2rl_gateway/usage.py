"""Usage, model and final message of an upstream answer, per protocol: from a JSON body, or from
a stream's events (reassembled into the protocol's non-streaming shape). Pure functions.

    Anthropic   usage {input_tokens, output_tokens, cache_read_input_tokens,
                cache_creation_input_tokens}; a stream: message_start.message.usage, then
                message_delta.usage (cumulative: its fields replace the start's)
    OpenAI      Chat Completions usage {prompt_tokens, completion_tokens,
                prompt_tokens_details.cached_tokens, completion_tokens_details.reasoning_tokens};
                a stream: the last chunk with `usage` (the gateway asks for it)
                Responses usage {input_tokens, output_tokens, input_tokens_details.cached_tokens,
                output_tokens_details.reasoning_tokens}; a stream: response.completed (or
                .incomplete / .failed) → response
    Gemini      usageMetadata {promptTokenCount, candidatesTokenCount, thoughtsTokenCount,
                cachedContentTokenCount}; a stream: the last chunk's (cumulative)

Normalised as `a2rl.records.driver.DriverUsage` (its doc says what each field counts).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from a2rl.records.driver import DriverUsage
from a2rl_gateway import protocols as p
from a2rl_gateway.sse import SSEEvent, parse_events


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def anthropic_usage(usage: Any) -> DriverUsage | None:
    if not isinstance(usage, Mapping):
        return None
    read = _int(usage.get("cache_read_input_tokens"))
    write = _int(usage.get("cache_creation_input_tokens"))
    return DriverUsage(
        input_tokens=_int(usage.get("input_tokens")) + read + write,
        output_tokens=_int(usage.get("output_tokens")),
        cached_tokens=read,
        cache_write_tokens=write,
    )


def openai_usage(usage: Any) -> DriverUsage | None:
    """Chat Completions (`prompt_tokens`…) and Responses (`input_tokens`…) usage objects."""
    if not isinstance(usage, Mapping):
        return None
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return DriverUsage(
            input_tokens=_int(usage.get("prompt_tokens")),
            output_tokens=_int(usage.get("completion_tokens")),
            cached_tokens=_int(_get(usage, "prompt_tokens_details", "cached_tokens")),
            reasoning_tokens=_int(_get(usage, "completion_tokens_details", "reasoning_tokens")),
        )
    if "input_tokens" in usage or "output_tokens" in usage:
        return DriverUsage(
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cached_tokens=_int(_get(usage, "input_tokens_details", "cached_tokens")),
            reasoning_tokens=_int(_get(usage, "output_tokens_details", "reasoning_tokens")),
        )
    return None


def gemini_usage(meta: Any) -> DriverUsage | None:
    if not isinstance(meta, Mapping):
        return None
    thoughts = _int(meta.get("thoughtsTokenCount"))
    return DriverUsage(
        input_tokens=_int(meta.get("promptTokenCount")) + _int(meta.get("toolUsePromptTokenCount")),
        output_tokens=_int(meta.get("candidatesTokenCount")) + thoughts,
        cached_tokens=_int(meta.get("cachedContentTokenCount")),
        reasoning_tokens=thoughts,
    )


@dataclass
class Answer:
    """What the gateway learnt from one answer."""

    usage: DriverUsage | None = None
    model: str | None = None
    response_id: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    #: The body to record: parsed JSON, or a stream's reassembled message (else its events).
    body: Any = None
    events: int | None = None


def from_json(protocol: str, body: Any) -> Answer:
    """A non-streamed answer (Gemini's JSON-array stream too: its chunks are merged)."""
    if protocol == p.GEMINI and isinstance(body, list):
        return _gemini_chunks(body, events=len(body))
    if not isinstance(body, Mapping):
        return Answer(body=body)
    if protocol == p.ANTHROPIC:
        reason = body.get("stop_reason")
        return Answer(
            usage=anthropic_usage(body.get("usage")),
            model=_str(body.get("model")),
            response_id=_str(body.get("id")),
            finish_reasons=[reason] if isinstance(reason, str) else [],
            body=body,
        )
    if protocol in (p.OPENAI_CHAT, p.OPENAI_RESPONSES, p.OPENAI_MODELS):
        return Answer(
            usage=openai_usage(body.get("usage")),
            model=_str(body.get("model")),
            response_id=_str(body.get("id")),
            finish_reasons=_openai_finish(body),
            body=body,
        )
    if protocol == p.GEMINI:
        return _gemini_chunks([body], events=None)
    return Answer(body=body)


def from_stream(protocol: str, raw: bytes) -> Answer:
    """A streamed answer: its SSE events (a Gemini stream without `alt=sse` is a JSON array)."""
    stripped = raw.lstrip()
    if protocol == p.GEMINI and stripped.startswith(b"["):
        try:
            return from_json(protocol, json.loads(raw))
        except ValueError:
            pass
    events = parse_events(raw)
    if protocol == p.ANTHROPIC:
        return anthropic_stream(events)
    if protocol == p.OPENAI_CHAT:
        return openai_chat_stream(events)
    if protocol == p.OPENAI_RESPONSES:
        return openai_responses_stream(events)
    if protocol == p.GEMINI:
        return _gemini_chunks([data for _, data in json_events(events)], events=len(events))
    return Answer(body=[e.data for e in events], events=len(events))


def json_events(events: Sequence[SSEEvent]) -> Iterator[tuple[Any, Mapping[str, Any]]]:
    """(type, data) of each event whose data is a JSON object; the type is the data's `type`, else
    the SSE event name."""
    for ev in events:
        data = ev.json()
        if isinstance(data, Mapping):
            yield data.get("type") or ev.event, data


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _openai_finish(body: Mapping[str, Any]) -> list[str]:
    choices = body.get("choices")
    if isinstance(choices, list):
        return [
            str(ch["finish_reason"]) for ch in choices if isinstance(ch, Mapping) and ch.get("finish_reason")
        ]
    status = body.get("status")
    return [status] if isinstance(status, str) else []


def anthropic_stream(events: Sequence[SSEEvent]) -> Answer:
    message: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    for kind, data in json_events(events):
        if kind == "message_start" and isinstance(data.get("message"), Mapping):
            message = copy.deepcopy(dict(data["message"]))
            if isinstance(message.get("usage"), Mapping):
                usage.update(message["usage"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), Mapping):
            blocks[_index(data)] = copy.deepcopy(dict(data["content_block"]))
        elif kind == "content_block_delta" and isinstance(data.get("delta"), Mapping):
            i, delta = _index(data), data["delta"]
            block = blocks.setdefault(i, {})
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
            elif dtype == "input_json_delta":
                partial_json[i] = partial_json.get(i, "") + str(delta.get("partial_json", ""))
            elif dtype == "thinking_delta":
                block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
            elif dtype == "signature_delta":
                block["signature"] = str(delta.get("signature", ""))
            elif dtype == "citations_delta":
                block.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "message_delta":
            if isinstance(data.get("delta"), Mapping):
                message.update(data["delta"])
            if isinstance(data.get("usage"), Mapping):
                usage.update({k: v for k, v in data["usage"].items() if v is not None})
    for i, text in partial_json.items():
        try:
            blocks.setdefault(i, {})["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks.setdefault(i, {})["input"] = text
    if blocks:
        message["content"] = [blocks[i] for i in sorted(blocks)]
    if usage:
        message["usage"] = usage
    reason = message.get("stop_reason")
    return Answer(
        usage=anthropic_usage(usage) if usage else None,
        model=_str(message.get("model")),
        response_id=_str(message.get("id")),
        finish_reasons=[reason] if isinstance(reason, str) else [],
        body=message or None,
        events=len(events),
    )


def _index(data: Mapping[str, Any]) -> int:
    return _int_or(data.get("index"), 0)


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def openai_chat_stream(events: Sequence[SSEEvent]) -> Answer:
    out: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    usage: Any = None
    for _, data in json_events(events):
        for key in ("id", "model", "created", "system_fingerprint", "service_tier"):
            if data.get(key) is not None:
                out[key] = data[key]
        out["object"] = "chat.completion"
        if isinstance(data.get("usage"), Mapping):
            usage = data["usage"]
        for ch in data.get("choices") or []:
            if not isinstance(ch, Mapping):
                continue
            i = _int_or(ch.get("index"), 0)
            choice = choices.setdefault(
                i, {"index": i, "message": {"role": "assistant"}, "finish_reason": None}
            )
            if ch.get("finish_reason"):
                choice["finish_reason"] = ch["finish_reason"]
            delta = ch.get("delta")
            if isinstance(delta, Mapping):
                _merge_chat_delta(choice["message"], delta)
    if choices:
        out["choices"] = [choices[i] for i in sorted(choices)]
    if usage is not None:
        out["usage"] = usage
    return Answer(
        usage=openai_usage(usage),
        model=_str(out.get("model")),
        response_id=_str(out.get("id")),
        finish_reasons=[str(c["finish_reason"]) for c in out.get("choices", []) if c.get("finish_reason")],
        body=out or None,
        events=len(events),
    )


def _merge_chat_delta(message: dict[str, Any], delta: Mapping[str, Any]) -> None:
    for key, value in delta.items():
        if key == "tool_calls" and isinstance(value, list):
            calls = message.setdefault("tool_calls", [])
            for tc in value:
                if not isinstance(tc, Mapping):
                    continue
                i = _int_or(tc.get("index"), len(calls))
                while len(calls) <= i:
                    calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                call = calls[i]
                if tc.get("id"):
                    call["id"] = tc["id"]
                if tc.get("type"):
                    call["type"] = tc["type"]
                fn = tc.get("function")
                if isinstance(fn, Mapping):
                    call["function"]["name"] += str(fn.get("name") or "")
                    call["function"]["arguments"] += str(fn.get("arguments") or "")
        elif isinstance(value, str) and key in ("content", "reasoning_content", "reasoning", "refusal"):
            message[key] = str(message.get(key) or "") + value
        elif value is not None:
            message[key] = value


def openai_responses_stream(events: Sequence[SSEEvent]) -> Answer:
    final: Any = None
    for kind, data in json_events(events):
        if (
            isinstance(kind, str)
            and kind.startswith("response.")
            and isinstance(data.get("response"), Mapping)
        ):
            final = data["response"]  # the last response.* snapshot (completed/incomplete/failed)
    if not isinstance(final, Mapping):
        return Answer(events=len(events))
    answer = from_json(p.OPENAI_RESPONSES, final)
    answer.events = len(events)
    return answer


def _gemini_chunks(chunks: list[Any], events: int | None) -> Answer:
    merged: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    meta: Any = None
    for chunk in chunks:
        if not isinstance(chunk, Mapping):
            continue
        if isinstance(chunk.get("usageMetadata"), Mapping):
            meta = chunk["usageMetadata"]  # cumulative: the last one counts
        for key in ("modelVersion", "responseId", "promptFeedback", "createTime"):
            if chunk.get(key) is not None:
                merged[key] = chunk[key]
        for i, cand in enumerate(chunk.get("candidates") or []):
            if not isinstance(cand, Mapping):
                continue
            idx = _int_or(cand.get("index"), i)
            out = candidates.setdefault(idx, {"content": {"role": "model", "parts": []}})
            for key, value in cand.items():
                if key == "content" and isinstance(value, Mapping):
                    if value.get("role"):
                        out["content"]["role"] = value["role"]
                    for part in value.get("parts") or []:
                        _append_part(out["content"]["parts"], part)
                else:
                    out[key] = value
    if candidates:
        merged["candidates"] = [candidates[i] for i in sorted(candidates)]
    if meta is not None:
        merged["usageMetadata"] = meta
    reasons = [str(cd["finishReason"]) for cd in merged.get("candidates", []) if cd.get("finishReason")]
    return Answer(
        usage=gemini_usage(meta),
        model=_str(merged.get("modelVersion")),
        response_id=_str(merged.get("responseId")),
        finish_reasons=reasons,
        body=merged or None,
        events=events,
    )


def _append_part(parts: list[Any], part: Any) -> None:
    """Adjacent text parts of the same kind (thought or not) are joined, as the final answer has them."""
    if (
        isinstance(part, Mapping)
        and set(part) <= {"text", "thought"}
        and parts
        and isinstance(parts[-1], dict)
        and set(parts[-1]) <= {"text", "thought"}
        and "text" in parts[-1]
        and bool(parts[-1].get("thought")) == bool(part.get("thought"))
    ):
        parts[-1]["text"] = str(parts[-1]["text"]) + str(part.get("text", ""))
        return
    parts.append(copy.deepcopy(dict(part)) if isinstance(part, Mapping) else part)
