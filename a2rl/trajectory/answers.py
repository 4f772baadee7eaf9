"""`answer_tool_calls`: the tools a driver answer asked the agent's stack to call, in order.

Read from a `driver/calls/` `response_body` (streams are stored reassembled into the
protocol's non-streaming shape, docs/gateway.md): Anthropic `content[]` `tool_use` blocks, Chat
Completions `choices[].message.tool_calls[]`, Responses `output[]` function/custom/local-shell
calls, Gemini `candidates[].content.parts[].functionCall`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RESPONSES_CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def answer_tool_calls(protocol: str | None, body: object) -> list[str]:
    """Tool names called in `body`, the answer of a call in `protocol` ([] when none or unknown)."""
    answer = _dict(body)
    if protocol == "anthropic-messages":
        return [
            str(b.get("name"))
            for b in map(_dict, _list(answer.get("content")))
            if b.get("type") == "tool_use"
        ]
    if protocol == "openai-chat":
        return [
            str(_dict(call.get("function")).get("name"))
            for choice in map(_dict, _list(answer.get("choices")))
            for call in map(_dict, _list(_dict(choice.get("message")).get("tool_calls")))
        ]
    if protocol == "openai-responses":
        items = map(_dict, _list(answer.get("output")))
        return [str(i.get("name") or i.get("type")) for i in items if i.get("type") in RESPONSES_CALL_TYPES]
    if protocol == "gemini":
        return [
            str(_dict(part.get("functionCall")).get("name"))
            for candidate in map(_dict, _list(answer.get("candidates")))
            for part in map(_dict, _list(_dict(candidate.get("content")).get("parts")))
            if "functionCall" in part
        ]
    return []
