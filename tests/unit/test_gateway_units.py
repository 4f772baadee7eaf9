"""The driver gateway's pure parts: SSE parsing, usage per protocol (JSON and streams), stream
reassembly, pricing and the price file, budget decisions, error shapes, redaction, routing,
credentials and configuration."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from a2rl_gateway import protocols as p
from a2rl_gateway.budget import Limits, exhausted_reason, refusal_message
from a2rl_gateway.config import GatewayConfig, new_run_token, read_upstream_key
from a2rl_gateway.errors import error_body
from a2rl_gateway.pricing import BUILTIN_PRICES, Price, cost, load_prices, lookup
from a2rl_gateway.redact import (
    REDACTED,
    may_hold_secrets,
    redact_headers,
    redact_patterns,
    redact_query,
    redact_url,
    redact_value,
    scrub_record,
)
from a2rl_gateway.spans import span_result_attributes
from a2rl_gateway.sse import SSEParser, parse_events
from a2rl_gateway.usage import anthropic_usage, from_json, from_stream, gemini_usage, openai_usage

from a2rl import constants as c
from a2rl.errors import A2rlError
from a2rl.records.driver import DriverCallRecord, DriverUsage


def sse(*events: tuple[str | None, object]) -> bytes:
    out = b""
    for name, data in events:
        if name:
            out += f"event: {name}\n".encode()
        out += f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
    return out


# --- SSE ---------------------------------------------------------------------------------------
def test_sse_parser_joins_events_split_anywhere_and_every_line_ending() -> None:
    stream = b': keep-alive\r\nevent: a\r\ndata: {"x": 1}\r\n\r\ndata: line1\rdata: line2\r\rdata: [DONE]\n\n'
    whole = parse_events(stream)
    assert [(e.event, e.data) for e in whole] == [("a", '{"x": 1}'), (None, "line1\nline2"), (None, "[DONE]")]
    assert whole[0].json() == {"x": 1} and whole[2].json() is None
    for size in (1, 2, 3, 7):
        parser = SSEParser()
        got = []
        for i in range(0, len(stream), size):
            got += parser.feed(stream[i : i + size])
        got += parser.close()
        assert got == whole, size


def test_sse_parser_keeps_an_unterminated_last_event() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"a": 2}') == []
    assert [e.data for e in parser.close()] == ['{"a": 2}']


# --- usage from JSON bodies ----------------------------------------------------------------------
def test_anthropic_usage_counts_cache_reads_and_writes_as_input() -> None:
    u = anthropic_usage(
        {
            "input_tokens": 10,
            "output_tokens": 7,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20,
        }
    )
    assert u == DriverUsage(input_tokens=130, output_tokens=7, cached_tokens=100, cache_write_tokens=20)
    assert u is not None and u.total_tokens == 137


def test_openai_usage_chat_and_responses() -> None:
    chat = openai_usage(
        {
            "prompt_tokens": 50,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 32},
            "completion_tokens_details": {"reasoning_tokens": 4},
        }
    )
    assert chat == DriverUsage(input_tokens=50, output_tokens=9, cached_tokens=32, reasoning_tokens=4)
    resp = openai_usage(
        {
            "input_tokens": 60,
            "output_tokens": 11,
            "input_tokens_details": {"cached_tokens": 16},
            "output_tokens_details": {"reasoning_tokens": 3},
        }
    )
    assert resp == DriverUsage(input_tokens=60, output_tokens=11, cached_tokens=16, reasoning_tokens=3)
    assert openai_usage(None) is None and openai_usage({"other": 1}) is None


def test_gemini_usage_counts_thoughts_as_output() -> None:
    u = gemini_usage(
        {
            "promptTokenCount": 40,
            "candidatesTokenCount": 5,
            "thoughtsTokenCount": 6,
            "cachedContentTokenCount": 8,
        }
    )
    assert u == DriverUsage(input_tokens=40, output_tokens=11, cached_tokens=8, reasoning_tokens=6)


def test_from_json_reads_model_id_and_finish_reason() -> None:
    a = from_json(
        p.ANTHROPIC,
        {
            "id": "msg_1",
            "model": "claude-x",
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 4},
        },
    )
    assert (a.model, a.response_id, a.finish_reasons, a.usage) == (
        "claude-x",
        "msg_1",
        ["end_turn"],
        DriverUsage(input_tokens=3, output_tokens=4),
    )
    g = from_json(
        p.GEMINI,
        {
            "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 1},
            "modelVersion": "gemini-2.5-flash",
        },
    )
    assert g.model == "gemini-2.5-flash" and g.finish_reasons == ["STOP"] and g.usage is not None
    assert from_json(p.ANTHROPIC, "not json").usage is None


# --- streams: usage and reassembly --------------------------------------------------------------
def test_anthropic_stream_usage_and_reassembly() -> None:
    raw = sse(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_9",
                    "model": "claude-sonnet-4-5-20250929",
                    "content": [],
                    "usage": {"input_tokens": 12, "cache_read_input_tokens": 30, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"command": '},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '"ls"}'},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 25}},
        ),
        ("message_stop", {"type": "message_stop"}),
    )
    a = from_stream(p.ANTHROPIC, raw)
    assert a.usage == DriverUsage(input_tokens=42, output_tokens=25, cached_tokens=30)
    assert (
        a.model == "claude-sonnet-4-5-20250929"
        and a.response_id == "msg_9"
        and a.finish_reasons == ["tool_use"]
    )
    assert a.body["content"] == [
        {"type": "text", "text": "Hello"},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
    ]
    assert a.events == 10


def test_openai_chat_stream_usage_and_reassembly() -> None:
    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {
            "id": "c1",
            "model": "gpt-5-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    raw = sse(
        (None, chunk({"role": "assistant", "content": ""})),
        (None, chunk({"content": "Hi "})),
        (
            None,
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "sh", "arguments": '{"a"'},
                        }
                    ]
                }
            ),
        ),
        (None, chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]})),
        (None, chunk({}, "tool_calls")),
        (
            None,
            {
                "id": "c1",
                "model": "gpt-5-mini",
                "choices": [],
                "usage": {
                    "prompt_tokens": 20,
                    "completion_tokens": 6,
                    "prompt_tokens_details": {"cached_tokens": 10},
                },
            },
        ),
        (None, "[DONE]"),
    )
    a = from_stream(p.OPENAI_CHAT, raw)
    assert a.usage == DriverUsage(input_tokens=20, output_tokens=6, cached_tokens=10)
    msg = a.body["choices"][0]["message"]
    assert msg["content"] == "Hi " and msg["tool_calls"][0]["function"] == {
        "name": "sh",
        "arguments": '{"a": 1}',
    }
    assert a.finish_reasons == ["tool_calls"] and a.model == "gpt-5-mini"


def test_openai_chat_stream_without_usage_has_none() -> None:
    raw = sse(
        (None, {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "x"}}]}),
        (None, "[DONE]"),
    )
    assert from_stream(p.OPENAI_CHAT, raw).usage is None


def test_openai_responses_stream_takes_the_completed_response() -> None:
    final = {
        "id": "resp_1",
        "model": "gpt-5",
        "status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}],
        "usage": {"input_tokens": 30, "output_tokens": 8, "input_tokens_details": {"cached_tokens": 4}},
    }
    raw = sse(
        (
            "response.created",
            {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        ),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "ok"}),
        ("response.completed", {"type": "response.completed", "response": final}),
    )
    a = from_stream(p.OPENAI_RESPONSES, raw)
    assert a.usage == DriverUsage(input_tokens=30, output_tokens=8, cached_tokens=4)
    assert a.body == final and a.events == 3 and a.finish_reasons == ["completed"]


def test_gemini_stream_sse_and_json_array_take_the_last_usage_and_join_text() -> None:
    chunks = [
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1},
            "modelVersion": "gemini-2.5-pro",
        },
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2},
        },
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"functionCall": {"name": "run", "args": {}}}]},
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4, "cachedContentTokenCount": 3},
        },
    ]
    for raw in (sse(*[(None, ch) for ch in chunks]), json.dumps(chunks).encode()):
        a = from_stream(p.GEMINI, raw)
        assert a.usage == DriverUsage(input_tokens=9, output_tokens=4, cached_tokens=3)
        parts = a.body["candidates"][0]["content"]["parts"]
        assert parts == [{"text": "Hello"}, {"functionCall": {"name": "run", "args": {}}}]
        assert a.finish_reasons == ["STOP"] and a.model == "gemini-2.5-pro"


# --- pricing -------------------------------------------------------------------------------------
def test_price_lookup_takes_the_longest_prefix_of_a_dated_name() -> None:
    assert lookup(BUILTIN_PRICES, "gpt-5-mini-2025-08-07") == ("gpt-5-mini", BUILTIN_PRICES["gpt-5-mini"])
    assert lookup(BUILTIN_PRICES, "claude-sonnet-4-5-20250929")[0] == "claude-sonnet-4-5"  # type: ignore[index]
    assert lookup(BUILTIN_PRICES, "models/gemini-2.5-flash")[0] == "gemini-2.5-flash"  # type: ignore[index]
    assert lookup(BUILTIN_PRICES, "anthropic/claude-haiku-4-5")[0] == "claude-haiku-4-5"  # type: ignore[index]
    assert lookup(BUILTIN_PRICES, "gpt-5x") is None and lookup(BUILTIN_PRICES, None) is None


def test_cost_prices_cached_and_cache_write_tokens_apart() -> None:
    price = Price(input=2.0, output=10.0, cached_input=0.5, cache_write=3.0)
    usage = DriverUsage(
        input_tokens=1_000_000, output_tokens=100_000, cached_tokens=400_000, cache_write_tokens=100_000
    )
    # 500k plain * 2 + 400k cached * 0.5 + 100k write * 3 + 100k out * 10, per million
    assert price.cost(usage) == pytest.approx(1.0 + 0.2 + 0.3 + 1.0)
    assert Price(1.0, 1.0).cost(usage) == pytest.approx(1.1)  # cached/write default to the input price


def test_unknown_model_costs_zero_and_is_flagged() -> None:
    assert cost(BUILTIN_PRICES, "my-local-model", DriverUsage(input_tokens=10)) == (0.0, False)
    c_, priced = cost(BUILTIN_PRICES, "gpt-4o", DriverUsage(input_tokens=1_000_000))
    assert priced and c_ == pytest.approx(2.5)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_price_file_extends_and_overrides(tmp_path: Path, suffix: str) -> None:
    doc = {
        "models": {
            "my-model": {"input": 1, "output": 2, "cached_input": 0.1},
            "gpt-4o": {"input": 0, "output": 0},
        }
    }
    path = tmp_path / f"prices{suffix}"
    path.write_text(
        json.dumps(doc)
        if suffix == ".json"
        else "models:\n  my-model: {input: 1, output: 2, cached_input: 0.1}\n"
        "  gpt-4o: {input: 0, output: 0}\n"
    )
    table = load_prices(path)
    assert table["my-model"] == Price(1.0, 2.0, 0.1, None)
    assert cost(table, "gpt-4o-2024-08-06", DriverUsage(input_tokens=10**6)) == (0.0, True)
    assert "claude-opus-4" in table


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1, 2]", "'models' mapping"),
        ("models: {m: {input: 1}}", "models.m.output is required"),
        ("models: {m: {input: -1, output: 1}}", "models.m.input must be a number ≥ 0"),
        ("models: {m: {input: 1, output: 1, extra: 2}}", "unknown field(s) extra"),
        ("models: {m: {input: yes, output: 1}}", "models.m.input must be a number"),
        ("models: [", "is not valid"),
    ],
)
def test_bad_price_file_is_one_line_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(A2rlError, match=r"prices\.yaml") as info:
        load_prices(path)
    assert problem in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(A2rlError, match="cannot read"):
        load_prices(tmp_path / "missing.yaml")


# --- budget --------------------------------------------------------------------------------------
def test_budget_decisions() -> None:
    assert exhausted_reason(Limits(), 10**9, 10**6) is None
    assert exhausted_reason(Limits(tokens=100), 99, 0) is None
    reason = exhausted_reason(Limits(tokens=100), 100, 0)
    assert reason == "the run's driver budget (100 tokens) is exhausted: 100 tokens used"
    assert exhausted_reason(Limits(cost_usd=0.5), 0, 0.49) is None
    assert "driver budget ($0.5) is exhausted" in (exhausted_reason(Limits(cost_usd=0.5), 0, 0.5) or "")
    assert exhausted_reason(Limits(tokens=0), 0, 0) is not None  # a zero budget allows no call
    assert refusal_message(reason).startswith(reason)


# --- error shapes --------------------------------------------------------------------------------
def test_error_bodies_have_each_providers_shape() -> None:
    assert error_body(p.ANTHROPIC, 403, "m") == {
        "type": "error",
        "error": {"type": "permission_error", "message": "m"},
    }
    assert error_body(p.ANTHROPIC, 401, "m")["error"]["type"] == "authentication_error"
    assert error_body(p.OPENAI_CHAT, 401, "m") == {
        "error": {"message": "m", "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
    }
    assert error_body(p.OPENAI_RESPONSES, 403, "m")["error"]["code"] == "driver_budget_exhausted"
    assert error_body(p.GEMINI, 403, "m") == {
        "error": {"code": 403, "message": "m", "status": "PERMISSION_DENIED"}
    }
    assert error_body(p.GEMINI, 401, "m")["error"]["status"] == "UNAUTHENTICATED"


# --- redaction -----------------------------------------------------------------------------------
def test_redaction_of_headers_query_urls_and_values() -> None:
    secret = "sk-live-0123456789abcdef"
    headers = redact_headers(
        [
            ("Authorization", "Bearer x"),
            ("x-api-key", "k"),
            ("X-Goog-Api-Key", "g"),
            ("User-Agent", f"ua {secret}"),
        ],
        [secret],
    )
    assert headers == {
        "Authorization": REDACTED,
        "x-api-key": REDACTED,
        "X-Goog-Api-Key": REDACTED,
        "User-Agent": f"ua {REDACTED}",
    }
    assert redact_query("/v1beta/models/m:streamGenerateContent?alt=sse&key=tok") == (
        "/v1beta/models/m:streamGenerateContent?alt=sse&key=[redacted]"
    )
    assert redact_url("https://user:pw@host:8443/v1?key=abc") == "https://host:8443/v1?key=[redacted]"
    value = {"a": [secret, {"b": f"x{secret}y", secret: 1}], "n": 3}
    assert redact_value(value, [secret]) == {"a": [REDACTED, {"b": f"x{REDACTED}y", REDACTED: 1}], "n": 3}
    assert redact_value("short", ["sho"]) == "short"  # too short to scrub from text


# --- routing, URLs, credentials ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("provider", "method", "path", "protocol", "operation", "model"),
    [
        ("anthropic", "POST", "/v1/messages", p.ANTHROPIC, "chat", None),
        ("anthropic", "POST", "/v1/messages/count_tokens", p.ANTHROPIC, "count_tokens", None),
        ("anthropic", "GET", "/v1/models", p.ANTHROPIC, "list_models", None),
        ("openai", "POST", "/v1/chat/completions", p.OPENAI_CHAT, "chat", None),
        ("openai-compatible", "POST", "/v1/responses", p.OPENAI_RESPONSES, "chat", None),
        ("openai", "GET", "/v1/models/gpt-5", p.OPENAI_MODELS, "list_models", "gpt-5"),
        (
            "gemini",
            "POST",
            "/v1beta/models/gemini-2.5-pro:generateContent",
            p.GEMINI,
            "generate_content",
            "gemini-2.5-pro",
        ),
        ("gemini", "POST", "/v1beta/models/g:streamGenerateContent", p.GEMINI, "generate_content", "g"),
        ("gemini", "POST", "/v1/models/g:countTokens", p.GEMINI, "count_tokens", "g"),
        ("gemini", "GET", "/v1beta/models", p.GEMINI, "list_models", None),
    ],
)
def test_route(
    provider: str, method: str, path: str, protocol: str, operation: str, model: str | None
) -> None:
    ep = p.route(provider, method, path)
    assert ep is not None and (ep.protocol, ep.operation, ep.path_model) == (protocol, operation, model)
    assert ep.path_stream == path.endswith(":streamGenerateContent")


@pytest.mark.parametrize(
    ("provider", "method", "path"),
    [
        ("anthropic", "POST", "/v1/chat/completions"),
        ("openai", "POST", "/v1/messages"),
        ("openai", "POST", "/v1/batches"),
        ("openai", "POST", "/v1/files"),
        ("gemini", "POST", "/v1beta/models/g:embedContent"),
        ("openai", "DELETE", "/v1/models/x"),
    ],
)
def test_route_refuses_what_is_not_served(provider: str, method: str, path: str) -> None:
    assert p.route(provider, method, path) is None


def test_error_protocol_follows_the_endpoint() -> None:
    assert p.error_protocol("openai", "/v1/messages") == p.ANTHROPIC
    assert p.error_protocol("anthropic", "/v1beta/models/x:generateContent") == p.GEMINI
    assert p.error_protocol("gemini", "/v1/chat/completions") == p.OPENAI_CHAT
    assert p.error_protocol("anthropic", "/v1/models") == p.ANTHROPIC


@pytest.mark.parametrize(
    ("base", "path", "want"),
    [
        ("https://api.openai.com/v1", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
        ("https://api.openai.com/v1/", "/v1/responses", "https://api.openai.com/v1/responses"),
        ("https://api.anthropic.com", "/v1/messages", "https://api.anthropic.com/v1/messages"),
        ("http://vllm:8000/v1", "/v1/models", "http://vllm:8000/v1/models"),
        ("http://proxy/openai", "/v1/chat/completions", "http://proxy/openai/v1/chat/completions"),
        (
            "https://generativelanguage.googleapis.com",
            "/v1beta/models/m:generateContent",
            "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent",
        ),
        ("https://g.example/v1beta", "/v1beta/models", "https://g.example/v1beta/models"),
    ],
)
def test_upstream_url(base: str, path: str, want: str) -> None:
    assert p.upstream_url(base, path) == want
    assert p.upstream_url(base, path, "alt=sse") == want + "?alt=sse"


def test_presented_tokens_from_every_place_a_client_puts_its_key() -> None:
    assert p.presented_tokens([("X-Api-Key", "a")], "") == ["a"]
    assert p.presented_tokens([("authorization", "Bearer  b ")], "") == ["b"]
    assert p.presented_tokens([("x-goog-api-key", "c")], "alt=sse&key=d") == ["c", "d"]
    assert p.presented_tokens([("Authorization", "Basic e")], "") == []
    assert p.forwarded_query("alt=sse&key=d") == "alt=sse"


def test_forward_headers_swap_credentials_for_the_real_key() -> None:
    incoming = [
        ("Host", "127.0.0.1:9"),
        ("x-api-key", "run-token"),
        ("Authorization", "Bearer run-token"),
        ("Content-Type", "text/plain"),
        ("Content-Encoding", "gzip"),
        ("Content-Length", "99"),
        ("Accept-Encoding", "gzip"),
        ("Connection", "keep-alive"),
        ("anthropic-beta", "x"),
    ]
    # the body's own headers are the gateway's (it sends the body it read: plain JSON)
    out = p.forward_headers("anthropic", incoming, "REAL")
    assert out == {
        "anthropic-beta": "x",
        "anthropic-version": p.ANTHROPIC_VERSION,
        "Accept-Encoding": "identity",
        "x-api-key": "REAL",
    }
    assert p.forward_headers("openai", incoming, "REAL")["Authorization"] == "Bearer REAL"
    assert p.forward_headers("gemini", incoming, "REAL")["x-goog-api-key"] == "REAL"
    assert "Authorization" not in p.forward_headers("openai-compatible", incoming, None)


def test_streamed_chat_requests_ask_for_usage() -> None:
    ep = p.route("openai", "POST", "/v1/chat/completions")
    assert ep is not None
    body = {"model": "m", "stream": True}
    assert p.with_stream_usage(ep, body) == {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    kept = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    assert p.with_stream_usage(ep, kept) is kept
    plain = {"model": "m"}
    assert p.with_stream_usage(ep, plain) is plain


def test_client_base_url() -> None:
    assert p.client_base_url("openai", "http://127.0.0.1:9/") == "http://127.0.0.1:9/v1"
    assert p.client_base_url("anthropic", "http://127.0.0.1:9") == "http://127.0.0.1:9"
    assert p.client_base_url("gemini", "http://127.0.0.1:9") == "http://127.0.0.1:9"


# --- configuration -------------------------------------------------------------------------------
def test_config_round_trips_through_its_environment(tmp_path: Path) -> None:
    cfg = GatewayConfig(
        provider="openai-compatible",
        token=new_run_token(),
        base_url="http://vllm:8000/v1",
        model="qwen",
        store_uri="file:///s",
        run_prefix="local/r-0123456789ab",
        port=0,
        socket_path=tmp_path / "gw.sock",
        limits=Limits(tokens=1000, cost_usd=0.25),
        prices_file=tmp_path / "p.yaml",
        key_source="stdin",
    )
    assert GatewayConfig.from_env(cfg.to_env()) == cfg
    assert cfg.token not in repr(cfg)


def test_config_defaults_and_errors(tmp_path: Path) -> None:
    tok = new_run_token()
    assert GatewayConfig(provider="anthropic", token=tok, port=0).base_url == "https://api.anthropic.com"
    with pytest.raises(A2rlError, match="needs a baseUrl"):
        GatewayConfig(provider="openai-compatible", token=tok, port=0)
    with pytest.raises(A2rlError, match="must be one of"):
        GatewayConfig(provider="azure", token=tok, port=0)
    with pytest.raises(A2rlError, match="Unix socket"):
        GatewayConfig(provider="openai", token=tok)
    with pytest.raises(A2rlError, match="too short"):
        GatewayConfig(provider="openai", token="x", port=0)
    with pytest.raises(A2rlError, match="set A2RL_GATEWAY_PROVIDER, A2RL_GATEWAY_TOKEN"):
        GatewayConfig.from_env({})
    env = {c.ENV_GATEWAY_PROVIDER: "openai", c.ENV_GATEWAY_TOKEN: tok, c.ENV_GATEWAY_PORT: "0"}
    with pytest.raises(A2rlError, match="A2RL_DRIVER_TOKENS must be a number"):
        GatewayConfig.from_env({**env, c.ENV_DRIVER_TOKENS: "lots"})
    with pytest.raises(A2rlError, match="A2RL_DRIVER_COST_USD must be a finite number"):
        GatewayConfig.from_env({**env, c.ENV_DRIVER_COST_USD: "-1"})


def test_read_upstream_key(tmp_path: Path) -> None:
    assert read_upstream_key(None) is None
    assert read_upstream_key("stdin", io.BytesIO(b"sk-abc\n")) == "sk-abc"
    (tmp_path / "key").write_text("sk-file\n")
    assert read_upstream_key(f"file:{tmp_path / 'key'}") == "sk-file"
    with pytest.raises(A2rlError, match="is empty"):
        read_upstream_key("stdin", io.BytesIO(b"\n"))
    with pytest.raises(A2rlError, match="must be 'stdin' or 'file:<path>'"):
        read_upstream_key("env:X")


def test_span_attributes_follow_the_genai_conventions() -> None:
    rec = DriverCallRecord(
        index=1,
        status=200,
        response_model="gpt-5-2025",
        response_id="r1",
        finish_reasons=["stop"],
        usage=DriverUsage(input_tokens=10, output_tokens=2, cached_tokens=4),
        cost_usd=0.001,
    )
    attrs = span_result_attributes(rec)
    assert attrs["gen_ai.usage.input_tokens"] == 10 and attrs["gen_ai.usage.output_tokens"] == 2
    assert (
        attrs["gen_ai.usage.cache_read.input_tokens"] == 4 and attrs["gen_ai.response.model"] == "gpt-5-2025"
    )
    assert "error.type" not in attrs
    refused = span_result_attributes(DriverCallRecord(index=2, status=403, refused="budget_exhausted"))
    assert refused["error.type"] == "budget_exhausted"


@pytest.mark.parametrize(
    "secret",
    ["upstream-key-0123456789", 'key-with-"quote"-and-\\', "ключ-не-ascii-0123", "key-\x7f-del-0123456"],
    ids=["plain", "escaped", "unicode", "del"],
)
def test_a_record_is_walked_only_when_its_text_may_hold_a_secret(secret: str) -> None:
    clean = {"request_body": {"messages": [{"content": "train a model"}]}, "path": "/v1/messages"}
    assert not may_hold_secrets(json.dumps(clean, sort_keys=True), [secret])
    assert scrub_record(clean, [secret]) == clean
    for doc in (
        {"request_body": {"messages": [{"content": f"my key is {secret}!"}]}},
        {"headers": {f"x-{secret}": "v"}},  # object keys too
        {"tool": "printed sk-proj-abcdefghijklmnopqrstuvwx"},  # a credential's shape, no known secret
    ):
        text = json.dumps(doc, sort_keys=True)
        assert may_hold_secrets(text, [secret])
        as_written = DriverCallRecord(index=0, request_body=doc).model_dump_json(ensure_ascii=True)
        assert may_hold_secrets(as_written, [secret])  # the gateway's writer encodes records so
        scrubbed = scrub_record(doc, [secret])
        assert scrubbed == redact_patterns(redact_value(doc, [secret])) != doc
        assert secret not in json.dumps(scrubbed, ensure_ascii=False) and REDACTED in json.dumps(scrubbed)
