"""The driver gateway in front of the shared scripted driver (`tests.support.driver_server`), each
protocol playing the whole default script (three shell tool calls, then the final text), streamed
and not, as a stack would: the metered tokens equal the usage the driver sent, the driver saw the
real key and never the run's token, and the recorded answers hold the reassembled tool calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2rl_gateway import Gateway, GatewayConfig, new_run_token

from a2rl.records.base import load_record
from a2rl.records.driver import DriverSummary
from a2rl.records.driver_calls import iter_driver_calls
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from tests.support.driver_server import DriverServer, default_script
from tests.unit.test_gateway_server import auth_headers, request

KEY = "sk-driver-MARKER-5b1e8c0d9a"
PREFIX = "local/gwd-0123456789ab"
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def anthropic_body(k: int, stream: bool) -> tuple[str, dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "train a model"}]
    for i in range(k):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "x"}}],
            }
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}]}
        )
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "stream": stream,
        "messages": messages,
        "tools": [{"name": "Bash", "input_schema": SCHEMA}],
    }
    return "/v1/messages", body


def chat_body(k: int, stream: bool) -> tuple[str, dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "train a model"}]
    for i in range(k):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "x"}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})
    body = {
        "model": "gpt-5-mini",
        "stream": stream,
        "messages": messages,
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}],
    }
    return "/v1/chat/completions", body


def responses_body(k: int, stream: bool) -> tuple[str, dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "train a model"}]
    for i in range(k):
        items.append(
            {
                "type": "function_call",
                "call_id": f"r{i}",
                "name": "shell_command",
                "arguments": '{"command": "x"}',
            }
        )
        items.append({"type": "function_call_output", "call_id": f"r{i}", "output": "ok"})
    body = {
        "model": "gpt-5",
        "stream": stream,
        "input": items,
        "tools": [{"type": "function", "name": "shell_command", "parameters": SCHEMA}],
    }
    return "/v1/responses", body


def gemini_body(k: int, stream: bool) -> tuple[str, dict[str, Any]]:
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "train a model"}]}]
    for _ in range(k):
        contents.append(
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "run_shell_command", "args": {"command": "x"}}}],
            }
        )
        contents.append(
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "ok"}}}],
            }
        )
    verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
    body = {
        "contents": contents,
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parametersJsonSchema": SCHEMA}]}],
    }
    return f"/v1beta/models/gemini-2.5-pro:{verb}", body


CASES = {
    "anthropic": ("anthropic", anthropic_body),
    "openai-chat": ("openai", chat_body),
    "openai-responses": ("openai", responses_body),
    "compatible-chat": ("openai-compatible", chat_body),
    "gemini": ("gemini", gemini_body),
}


@pytest.fixture
def driver() -> Iterator[DriverServer]:
    with DriverServer(default_script(), api_key=KEY) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_default_script_through_the_gateway_is_metered_exactly(
    driver: DriverServer, tmp_path: Path, case: str, stream: bool
) -> None:
    provider, build = CASES[case]
    store = LocalStore(tmp_path / "store")
    base = driver.url + ("/v1" if provider.startswith("openai") else "")
    cfg = GatewayConfig(provider=provider, token=new_run_token(), base_url=base, run_prefix=PREFIX, port=0)
    gw = Gateway(cfg, upstream_key=KEY, store=store)
    gw.start()
    try:
        steps = len(driver.script.steps)
        for k in range(steps + 1):  # step k answers a conversation with k tool results; then the final text
            path, body = build(k, stream)
            reply = request(gw.url, "POST", path, body, auth_headers(provider, cfg.token))
            assert reply.status == 200, reply.body
        path, body = build(0, stream)
        body.pop("tools")  # a side call (a title, a summary): no shell tool declared
        assert request(gw.url, "POST", path, body, auth_headers(provider, cfg.token)).status == 200
    finally:
        assert gw.stop(10)
    assert driver.steps_played() == list(range(steps)) and driver.finished()
    sent = driver.usage_total()
    summary = load_record(store, RunLayout.from_prefix(PREFIX).driver_summary, DriverSummary)
    assert (summary.input_tokens, summary.output_tokens, summary.cached_tokens) == (
        sent.input,
        sent.output,
        sent.cached,
    )
    assert summary.calls == steps + 2 and summary.errors == 0 and summary.usage_missing_calls == 0
    # the driver got the real key in the provider's header, never the run's token
    seen = json.dumps([r.to_json() for r in driver.records])
    assert KEY in seen and cfg.token not in seen
    # each step's record holds the tool call the driver played (reassembled from a stream)
    layout = RunLayout.from_prefix(PREFIX)
    played = [r for r in driver.model_calls() if r.kind == "step"]
    assert len(played) == steps
    recorded = {r.index: r for r in iter_driver_calls(store, layout)}
    for n, step in enumerate(played, start=1):
        rec = recorded[n]
        assert rec.stream is stream and rec.usage is not None and rec.status == 200
        assert tool_arguments(provider, case, rec.response_body) == step.tool_arguments


def tool_arguments(provider: str, case: str, body: Any) -> Any:
    """The arguments of the (one) tool call in a recorded answer."""
    if provider == "anthropic":
        [call] = [b for b in body["content"] if b.get("type") == "tool_use"]
        return call["input"]
    if provider == "gemini":
        [call] = [p["functionCall"] for p in body["candidates"][0]["content"]["parts"] if "functionCall" in p]
        return call["args"]
    if case.endswith("responses"):
        [call] = [o for o in body["output"] if o.get("type") == "function_call"]
        return json.loads(call["arguments"])
    [call] = body["choices"][0]["message"]["tool_calls"]
    return json.loads(call["function"]["arguments"])
