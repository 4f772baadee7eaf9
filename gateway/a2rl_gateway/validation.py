"""What the gateway requires of a request before it goes upstream, and the most it may cost. Pure.

The meter and the budget rely on a few fields: whether the call streams (a stream of Chat
Completions carries usage only when the gateway asks for it), and how many tokens it may generate.
A lax OpenAI-compatible server (vLLM, SGLang) coerces what it gets — `"stream": "true"` streams,
`"max_tokens": "50"` is 50 — so the gateway accepts these fields only with their exact JSON type
and answers anything else with a 400 in the provider's shape, never forwarding it:

| Protocol | Field | Accepted |
|---|---|---|
| all but Gemini | `stream` | `true`, `false`, `null` or absent |
| Anthropic Messages | `max_tokens` | an integer ≥ 1, `null` or absent (the protocol default) |
| OpenAI Chat | `max_tokens`, `max_completion_tokens` | an integer ≥ 1, `null` or absent |
| OpenAI Chat | `n`, `best_of` (vLLM) | an integer ≥ 1, `null` or absent; `best_of` ≤ `n` |
| OpenAI Chat | `stream_options` | an object (`include_usage` a boolean), `null` or absent |
| OpenAI Responses | `max_output_tokens` | an integer ≥ 1, `null` or absent |
| OpenAI Responses | `background` | `false`, `null` or absent |
| Gemini | `generationConfig` (or `generation_config`, not both) | an object, `null` or absent |
| Gemini | `maxOutputTokens` (or `max_output_tokens`, not both) | an integer ≥ 1, `null` or absent |
| Gemini | `candidateCount` (or `candidate_count`, not both) | an integer ≥ 1, `null` or absent |

`best_of` > `n` would generate answers the usage does not count; a `background` response is
generated after the call has ended and fetched from an endpoint the gateway does not serve.

**The most a call may cost** (`max_usage`), reserved against the budget before it goes upstream:
input tokens ≤ the bytes of its JSON body (a token is at least one byte of the text it encodes;
what a request only refers to — a previous response, an uploaded file, a server-side tool's
results — is not in its body and not in this bound), output tokens ≤ its maximum output (the
field above, else `DEFAULT_MAX_OUTPUT_TOKENS` of its protocol, the longest answer of the
providers' current models) times the answers it asks for (`n`, `candidateCount`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from a2rl.records.driver import DriverUsage
from a2rl_gateway import protocols as p

#: Output tokens a call may generate when it names no maximum (the longest answer of the
#: protocol's current models: Claude Sonnet 4.5 64k, GPT-5 128k, Gemini 2.5 65,536).
DEFAULT_MAX_OUTPUT_TOKENS: dict[str, int] = {
    p.ANTHROPIC: 64_000,
    p.OPENAI_CHAT: 128_000,
    p.OPENAI_RESPONSES: 128_000,
    p.GEMINI: 65_536,
}


class InvalidRequestError(ValueError):
    """A request the gateway refuses with a 400 (the message says which field and why)."""


@dataclass(frozen=True)
class CallShape:
    """What the gateway read from a valid request."""

    stream: bool = False
    #: The output tokens it may generate in all (its maximum times its answers); 0: it generates none.
    max_output_tokens: int = 0


def check(endpoint: p.Endpoint, body: Any) -> CallShape:
    """The request's shape, or `InvalidRequestError` (see the module doc). `body` is the parsed JSON
    (None for a request without one)."""
    if endpoint.operation == "list_models":
        return CallShape()
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    if endpoint.protocol == p.GEMINI:
        return _gemini(endpoint, body)
    stream = _stream(body)
    if not endpoint.generates:
        return CallShape(stream=stream)
    answers = 1
    if endpoint.protocol == p.ANTHROPIC:
        named = _positive(body, "max_tokens")
    elif endpoint.protocol == p.OPENAI_CHAT:
        limits = [v for v in (_positive(body, "max_tokens"), _positive(body, "max_completion_tokens")) if v]
        named = max(limits) if limits else None
        n = _positive(body, "n") or 1
        best_of = _positive(body, "best_of")
        if best_of is not None and best_of > n:
            raise InvalidRequestError(
                f"best_of ({best_of}) greater than n ({n}): its extra answers are not in the usage"
            )
        answers = n
        _stream_options(body)
    elif endpoint.protocol == p.OPENAI_RESPONSES:
        named = _positive(body, "max_output_tokens")
        if body.get("background") not in (None, False):
            raise InvalidRequestError(
                "background responses are not served: they are generated after the call ends and "
                "fetched from an endpoint a2rl's driver gateway does not serve"
            )
    else:
        named = None
    return CallShape(stream=stream, max_output_tokens=_max_output(endpoint, named) * answers)


def max_usage(shape: CallShape, body_bytes: int) -> DriverUsage:
    """The most the call may use (the module doc): what the budget reserves before it goes up."""
    if not shape.max_output_tokens:
        return DriverUsage()
    return DriverUsage(input_tokens=body_bytes, output_tokens=shape.max_output_tokens)


def _max_output(endpoint: p.Endpoint, named: int | None) -> int:
    return named if named is not None else DEFAULT_MAX_OUTPUT_TOKENS[endpoint.protocol]


def _stream(body: Mapping[str, Any]) -> bool:
    value = body.get("stream")
    if value is not None and not isinstance(value, bool):
        raise InvalidRequestError(f"stream must be true or false, not {_shown(value)}")
    return value is True


def _positive(body: Mapping[str, Any], name: str, *, where: str = "") -> int | None:
    if body.get(name) is None:
        return None
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequestError(f"{where}{name} must be a positive integer, not {_shown(value)}")
    return value


def _stream_options(body: Mapping[str, Any]) -> None:
    options = body.get("stream_options")
    if options is None:
        return
    if not isinstance(options, dict):
        raise InvalidRequestError(f"stream_options must be an object, not {_shown(options)}")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise InvalidRequestError(
            f"stream_options.include_usage must be true or false, not {_shown(include)}"
        )


def _one_of(obj: Mapping[str, Any], camel: str, snake: str, where: str = "") -> str | None:
    """Which spelling of a Gemini field the request uses (Google reads both; both is ambiguous)."""
    present = [k for k in (camel, snake) if k in obj]
    if len(present) > 1:
        raise InvalidRequestError(f"{where}{camel} and {where}{snake} are the same field: give one")
    return present[0] if present else None


def _gemini(endpoint: p.Endpoint, body: Mapping[str, Any]) -> CallShape:
    if not endpoint.generates:
        return CallShape(stream=endpoint.path_stream)
    key = _one_of(body, "generationConfig", "generation_config")
    config = body.get(key) if key else None
    named, answers = None, 1
    if config is not None:
        if not isinstance(config, dict):
            raise InvalidRequestError(f"{key} must be an object, not {_shown(config)}")
        where = f"{key}."
        if name := _one_of(config, "maxOutputTokens", "max_output_tokens", where):
            named = _positive(config, name, where=where)
        if name := _one_of(config, "candidateCount", "candidate_count", where):
            answers = _positive(config, name, where=where) or 1
    return CallShape(stream=endpoint.path_stream, max_output_tokens=_max_output(endpoint, named) * answers)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
