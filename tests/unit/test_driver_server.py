"""The scripted driver server (tests/support/driver_server.py) with plain HTTP clients: each wire
protocol, streaming and not, tool-call round trips, side calls, waiting on a running command, the
usage and the request log. The real CLIs against it: tests/e2e/test_driver_server_clis.py."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.driver_server import (
    SUBMIT_COMMAND,
    DriverServer,
    Script,
    Step,
    SubmitStub,
    Usage,
    default_script,
    iter_sse,
    shell_arguments,
    still_running,
    write_file_command,
)

# The shell tools as the real stacks declare them (abridged from their requests; the versions
# in docs/agents.md, "Driving the stacks offline").
CLAUDE_BASH = {
    "type": "object",
    "properties": {
        "command": {"description": "The command to execute", "type": "string"},
        "timeout": {
            "description": "Optional timeout in milliseconds (max 600000 for a foreground command)",
            "type": "number",
        },
        "description": {"description": "Clear, concise description…", "type": "string"},
        "run_in_background": {"type": "boolean"},
    },
    "required": ["command"],
    "additionalProperties": False,
}
CODEX_EXEC_COMMAND = {
    "type": "object",
    "properties": {
        "cmd": {"type": "string", "description": "Shell command to execute."},
        "login": {"type": "boolean"},
        "workdir": {"type": "string"},
        "yield_time_ms": {
            "type": "number",
            "description": (
                "Wait before yielding output. Defaults to 10000 ms; effective range is 250-30000 ms."
            ),
        },
    },
    "required": ["cmd"],
    "additionalProperties": False,
}
CODEX_WRITE_STDIN = {
    "type": "object",
    "properties": {
        "session_id": {"type": "number"},
        "chars": {"type": "string"},
        "yield_time_ms": {"type": "number"},
    },
    "required": ["session_id"],
}
CODEX_SHELL_ARGV = {  # older Codex releases
    "type": "object",
    "properties": {"command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"}},
    "required": ["command"],
}
GEMINI_RUN_SHELL = {
    "type": "object",
    "properties": {
        "command": {"type": "string"},
        "description": {"type": "string"},
        "dir_path": {"type": "string"},
        "is_background": {"type": "boolean"},
    },
    "required": ["command"],
}
OPENCODE_BASH = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command to execute"},
        "timeout": {
            "type": "integer",
            "exclusiveMinimum": 0,
            "maximum": 9007199254740991,
            "description": "Optional timeout in milliseconds",
        },
        "workdir": {"type": "string"},
    },
    "required": ["command"],
}
OPENHANDS_TERMINAL = {
    "type": "object",
    "properties": {
        "command": {"type": "string"},
        "is_input": {"type": "boolean"},
        "timeout": {"type": "number", "description": "Optional. Sets a maximum time limit (in seconds)…"},
        "security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH", "UNKNOWN"]},
    },
    "required": ["command", "security_risk"],
}

THREE = Script.of(["echo one", "echo two", "echo three"], usage=Usage(1000, 50, 300))


@pytest.fixture
def server() -> Iterator[DriverServer]:
    with DriverServer(THREE) as s:
        yield s


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def post_sse(url: str, body: Any) -> list[tuple[str | None, Any]]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        return list(iter_sse(iter(r.readline, b"")))


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


# -- Anthropic Messages ---------------------------------------------------------------------


def anthropic_body(results: list[str], stream: bool = False, tools: bool = True) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "train and submit"}]
    for i, r in enumerate(results):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {}}],
            }
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": r}]}
        )
    body: dict[str, Any] = {"model": "claude-x", "max_tokens": 100, "messages": messages, "stream": stream}
    if tools:
        body["tools"] = [
            {"name": "Read", "input_schema": {"type": "object"}},
            {"name": "Bash", "input_schema": CLAUDE_BASH},
        ]
    return body


def test_anthropic_round_trip_plays_each_step_then_ends_the_turn(server: DriverServer) -> None:
    url = f"{server.url}/v1/messages?beta=true"
    results: list[str] = []
    for k, command in enumerate(["echo one", "echo two", "echo three"]):
        reply = post(url, anthropic_body(results), {"x-api-key": "k1", "anthropic-version": "2023-06-01"})
        assert reply["stop_reason"] == "tool_use"
        (block,) = reply["content"]
        assert block["type"] == "tool_use" and block["name"] == "Bash"
        assert block["input"] == {
            "command": command,
            "timeout": 600000,
            "description": "Run the scripted command",
        }
        assert reply["usage"] == {
            "input_tokens": 700,
            "output_tokens": 50,
            "cache_read_input_tokens": 300,
            "cache_creation_input_tokens": 0,
        }
        results.append(f"out {k}")
    reply = post(url, anthropic_body(results))
    assert reply["stop_reason"] == "end_turn"
    assert reply["content"] == [{"type": "text", "text": THREE.final_text}]
    assert server.steps_played() == [0, 1, 2] and server.finished()
    assert server.usage_total() == Usage(4000, 200, 1200)
    assert server.header_values("x-api-key") == {"k1"}
    assert server.model_calls()[-1].tool_results == ["out 0", "out 1", "out 2"]


def test_anthropic_stream_has_the_event_sequence_and_json_deltas(server: DriverServer) -> None:
    events = post_sse(f"{server.url}/v1/messages", anthropic_body([], stream=True))
    kinds = [e for e, _ in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1] == "content_block_start" and kinds[-3] == "content_block_stop"
    assert all(d["type"] == e for e, d in events)
    start = events[1][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "Bash" and start["input"] == {}
    deltas = [d["delta"] for e, d in events if e == "content_block_delta"]
    assert len(deltas) > 1 and all(d["type"] == "input_json_delta" for d in deltas)
    assert json.loads("".join(d["partial_json"] for d in deltas))["command"] == "echo one"
    assert events[0][1]["message"]["usage"]["output_tokens"] == 0
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use"
    assert final["usage"]["input_tokens"] == 700 and final["usage"]["output_tokens"] == 50

    text = post_sse(f"{server.url}/v1/messages", anthropic_body(["a", "b", "c"], stream=True))
    deltas = [d["delta"] for e, d in text if e == "content_block_delta"]
    assert all(d["type"] == "text_delta" for d in deltas)
    assert "".join(d["text"] for d in deltas) == THREE.final_text
    assert text[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert [r.stream for r in server.model_calls()] == [True, True]


def test_a_request_without_the_shell_tool_is_a_side_call(server: DriverServer) -> None:
    reply = post(f"{server.url}/v1/messages", anthropic_body([], tools=False))
    assert reply["content"][0]["text"] == THREE.side_text
    (rec,) = server.model_calls()
    assert rec.kind == "side" and rec.usage == THREE.side_usage and server.steps_played() == []
    # Side calls do not move the script: the next agent request still gets step 0.
    assert (
        post(f"{server.url}/v1/messages", anthropic_body([]))["content"][0]["input"]["command"] == "echo one"
    )


def test_count_tokens_and_model_listing(server: DriverServer) -> None:
    assert post(f"{server.url}/v1/messages/count_tokens", anthropic_body([]))["input_tokens"] == 1000
    listing = get(f"{server.url}/v1/models")
    assert listing["data"][0]["id"] and listing["models"][0]["name"].startswith("models/")
    assert get(f"{server.url}/v1beta/models/gemini-x")["name"] == "models/gemini-x"
    assert server.usage_total() == Usage()  # no model response, no usage


# -- OpenAI Chat Completions ----------------------------------------------------------------


def chat_body(results: list[str], stream: bool = False, include_usage: bool = True) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "train"}]
    for i, r in enumerate(results):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": r},
        ]
    body: dict[str, Any] = {
        "model": "scripted",
        "messages": messages,
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": OPENCODE_BASH}}],
        "stream": stream,
    }
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def test_chat_completions_round_trip(server: DriverServer) -> None:
    reply = post(f"{server.url}/v1/chat/completions", chat_body([]))
    (choice,) = reply["choices"]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "echo one", "timeout": 1800000}
    assert reply["usage"] == {
        "prompt_tokens": 1000,
        "completion_tokens": 50,
        "total_tokens": 1050,
        "prompt_tokens_details": {"cached_tokens": 300},
    }
    reply = post(f"{server.url}/v1/chat/completions", chat_body(["1", "2", "3"]))
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["choices"][0]["message"]["content"] == THREE.final_text


def test_chat_completions_stream_with_and_without_a_usage_chunk(server: DriverServer) -> None:
    events = post_sse(f"{server.url}/v1/chat/completions", chat_body(["1"], stream=True))
    assert events[-1] == (None, "[DONE]")
    chunks = [d for _, d in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    calls = [tc for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls", [])]
    assert calls[0]["id"] == "call_a2rl_1" and calls[0]["function"]["name"] == "bash"
    args = "".join(tc["function"]["arguments"] for tc in calls)
    assert json.loads(args)["command"] == "echo two"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls" and "usage" not in chunks[-2]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 1000

    events = post_sse(
        f"{server.url}/v1/chat/completions", chat_body(["1", "2", "3"], True, include_usage=False)
    )
    chunks = [d for _, d in events[:-1]]
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    assert text == THREE.final_text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 50  # usage rides on the last chunk
    assert server.usage_total() == Usage(2000, 100, 600)


# -- OpenAI Responses -----------------------------------------------------------------------


def responses_body(results: list[str], stream: bool = False, tools: Any = None) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text"}]}]
    for i, r in enumerate(results):
        items += [
            {"type": "function_call", "call_id": f"c{i}", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": r},
        ]
    if tools is None:
        tools = [
            {"type": "function", "name": "exec_command", "parameters": CODEX_EXEC_COMMAND},
            {"type": "function", "name": "write_stdin", "parameters": CODEX_WRITE_STDIN},
        ]
    return {"model": "gpt-x", "input": items, "tools": tools, "stream": stream}


def test_responses_stream_events_and_usage(server: DriverServer) -> None:
    events = post_sse(f"{server.url}/v1/responses", responses_body([], stream=True))
    kinds = [e for e, _ in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * (len(kinds) - 6),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    deltas = "".join(d["delta"] for e, d in events if (e or "").endswith("arguments.delta"))
    done = next(d for e, d in events if e == "response.output_item.done")["item"]
    assert done["type"] == "function_call" and done["name"] == "exec_command" and done["arguments"] == deltas
    assert json.loads(deltas) == {"cmd": "echo one", "yield_time_ms": 30000}
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed" and completed["output"] == [done]
    assert completed["usage"]["input_tokens"] == 1000
    assert completed["usage"]["input_tokens_details"]["cached_tokens"] == 300

    events = post_sse(f"{server.url}/v1/responses", responses_body(["1", "2", "3"], stream=True))
    text = "".join(d["delta"] for e, d in events if e == "response.output_text.delta")
    assert text == THREE.final_text
    assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == THREE.final_text


def test_responses_non_streaming_and_local_shell(server: DriverServer) -> None:
    reply = post(f"{server.url}/v1/responses", responses_body(["1"]))
    assert reply["object"] == "response" and reply["status"] == "completed"
    assert json.loads(reply["output"][0]["arguments"])["cmd"] == "echo two"
    reply = post(f"{server.url}/v1/responses", responses_body([], tools=[{"type": "local_shell"}]))
    (item,) = reply["output"]
    assert item["type"] == "local_shell_call"
    assert item["action"]["type"] == "exec" and item["action"]["command"] == ["bash", "-lc", "echo one"]


def test_a_still_running_command_is_waited_for_before_the_next_step(server: DriverServer) -> None:
    running = "Chunk ID: a\nWall time: 30.0 seconds\nProcess running with session ID 4242\nOutput:\nstart\n"
    exited = "Chunk ID: b\nWall time: 2.8 seconds\nProcess exited with code 0\nOutput:\ndone\n"
    reply = post(f"{server.url}/v1/responses", responses_body([running]))
    assert reply["output"][0]["name"] == "write_stdin"
    assert json.loads(reply["output"][0]["arguments"]) == {
        "session_id": 4242,
        "chars": "",
        "yield_time_ms": 30000,
    }
    reply = post(f"{server.url}/v1/responses", responses_body([running, running]))
    assert reply["output"][0]["name"] == "write_stdin"
    reply = post(f"{server.url}/v1/responses", responses_body([running, running, exited]))
    assert json.loads(reply["output"][0]["arguments"])["cmd"] == "echo two"
    assert [r.kind for r in server.model_calls()] == ["poll", "poll", "step"]
    oh = "ls\n[The command has no new output after 30 seconds. You may wait longer to see additional output…]"
    assert still_running(oh) == ("terminal", {"command": "", "is_input": False, "timeout": 1800})
    assert still_running(exited) is None


def test_an_until_step_is_played_again_until_its_result_says_so() -> None:
    """How a script waits for a command the stack moved to the background: the training step with
    its own shell timeout, then a bounded wait step played until its result says the training ended."""
    script = Script(
        steps=[
            Step("python3 train.py", timeout_s=5),
            Step("sleep 5; cat train.done", until="finished"),
            Step("curl submit"),
        ]
    )
    moved = "Command did not complete within its 5s timeout and was moved to the background (ID: b1)."
    with DriverServer(script) as driver:
        commands = []
        for results in ([], [moved], [moved, "not yet"], [moved, "not yet", "finished, exit code 0"]):
            reply = post(f"{driver.url}/v1/messages", anthropic_body(results))
            commands.append(reply["content"][0]["input"])
    assert [c["command"] for c in commands] == [
        "python3 train.py",
        "sleep 5; cat train.done",
        ": check 2; sleep 5; cat train.done",
        "curl submit",
    ]
    assert commands[0]["timeout"] == 5000 and commands[1]["timeout"] == 600000  # ms, the tool's maximum
    assert script.step_of([moved, "not yet", "finished", "{}"]) == 3


# -- Gemini ---------------------------------------------------------------------------------


def gemini_body(results: list[str], json_schema: bool = True) -> dict[str, Any]:
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "train"}]}]
    for r in results:
        contents += [
            {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}]},
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": r}}}],
            },
        ]
    decl: dict[str, Any] = {"name": "run_shell_command"}
    if json_schema:
        decl["parametersJsonSchema"] = GEMINI_RUN_SHELL
    else:  # the older `parameters` spelling, with OpenAPI-style capital types
        decl["parameters"] = {
            "type": "OBJECT",
            "properties": {"command": {"type": "STRING"}},
            "required": ["command"],
        }
    return {"contents": contents, "tools": [{"functionDeclarations": [decl]}]}


def test_gemini_generate_content_round_trip(server: DriverServer) -> None:
    url = f"{server.url}/v1beta/models/gemini-x:generateContent"
    reply = post(url, gemini_body([]), {"x-goog-api-key": "gk"})
    (cand,) = reply["candidates"]
    (part,) = cand["content"]["parts"]
    assert part["functionCall"]["name"] == "run_shell_command"
    assert part["functionCall"]["args"] == {"command": "echo one", "description": "Run the scripted command"}
    assert reply["usageMetadata"] == {
        "promptTokenCount": 1000,
        "candidatesTokenCount": 50,
        "totalTokenCount": 1050,
        "cachedContentTokenCount": 300,
    }
    assert post(url, gemini_body(["1"], json_schema=False))["candidates"][0]["content"]["parts"][0][
        "functionCall"
    ]["args"] == {"command": "echo two"}
    assert post(url, gemini_body(["1", "2", "3"]))["candidates"][0]["content"]["parts"] == [
        {"text": THREE.final_text}
    ]
    assert server.header_values("x-goog-api-key") == {"gk"}
    assert {r.model for r in server.model_calls()} == {"gemini-x"}


def test_gemini_stream_and_side_calls(server: DriverServer) -> None:
    events = post_sse(
        f"{server.url}/v1beta/models/g:streamGenerateContent?alt=sse", gemini_body(["1", "2", "3"])
    )
    assert all(e is None for e, _ in events) and len(events) > 1
    text = "".join(p["text"] for _, d in events for p in d["candidates"][0]["content"]["parts"])
    assert text == THREE.final_text
    assert "usageMetadata" in events[-1][1] and events[-1][1]["candidates"][0]["finishReason"] == "STOP"
    assert all("usageMetadata" not in d for _, d in events[:-1])
    # A JSON-mode side call ("who speaks next") gets the smallest JSON that fits its schema.
    schema = {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "next_speaker": {"type": "string", "enum": ["user", "model"]},
        },
        "required": ["reasoning", "next_speaker"],
    }
    side = {
        "contents": [{"role": "user", "parts": [{"text": "who next?"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema},
    }
    reply = post(f"{server.url}/v1beta/models/g:generateContent", side)
    answer = json.loads(reply["candidates"][0]["content"]["parts"][0]["text"])
    assert answer == {"reasoning": "Scripted run", "next_speaker": "user"}
    assert post(f"{server.url}/v1beta/models/g:countTokens", side) == {"totalTokens": 1000}
    assert [r.kind for r in server.model_calls()] == ["final", "side"]


# -- The script, the arguments, the log -----------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (CLAUDE_BASH, {"command": "ls", "timeout": 600000, "description": "Run the scripted command"}),
        (CODEX_EXEC_COMMAND, {"cmd": "ls", "yield_time_ms": 30000}),
        (CODEX_SHELL_ARGV, {"command": ["bash", "-lc", "ls"]}),
        (GEMINI_RUN_SHELL, {"command": "ls", "description": "Run the scripted command"}),
        (OPENCODE_BASH, {"command": "ls", "timeout": 1800000}),
        (OPENHANDS_TERMINAL, {"command": "ls", "security_risk": "LOW", "timeout": 1800}),
    ],
)
def test_shell_arguments_fit_each_stacks_schema(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    assert shell_arguments(schema, "ls") == expected


def test_default_script_writes_runs_and_submits(tmp_path: Path) -> None:
    train = 'print("it\'s $HOME `x` \\\\ trained")\n'
    script = default_script(train)
    assert [s.command for s in script.steps][1:] == ["python3 code/train.py", SUBMIT_COMMAND]
    subprocess.run(["bash", "-c", script.steps[0].command], cwd=tmp_path, check=True)
    assert (tmp_path / "code" / "train.py").read_text() == train
    with pytest.raises(ValueError, match="delimiter"):
        write_file_command("a.txt", "x\nA2RL_EOF\n")
    with SubmitStub() as stub:
        env = {"PATH": "/usr/bin:/bin", "GRADING_SERVER_URL": stub.url}
        out = subprocess.run(
            ["bash", "-c", SUBMIT_COMMAND], env=env, capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout)["status"] == "accepted"
        assert stub.submissions == [{"path": "/submit", "body": {"model_path": "output/v1"}}]


def test_script_from_json_with_per_step_usage() -> None:
    script = Script.from_json(
        {
            "steps": ["a", {"command": "b", "usage": {"input": 5, "output": 2}}],
            "final_text": "bye",
            "usage": {"input": 10, "output": 1, "cached": 3},
            "timeout_s": 60,
        }
    )
    assert script.steps == [Step("a"), Step("b", Usage(5, 2, 0))]
    assert script.step_usage(0) == Usage(10, 1, 3) and script.step_usage(1) == Usage(5, 2, 0)
    assert script.step_usage(2) == Usage(10, 1, 3) and script.final_text == "bye" and script.timeout_s == 60


def test_api_key_is_enforced_with_each_providers_error_shape(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with DriverServer(THREE, api_key="right", log_path=log) as s:
        cases = [
            ("/v1/messages", anthropic_body([]), {"x-api-key": "wrong"}, "type"),
            ("/v1/chat/completions", chat_body([]), {"Authorization": "Bearer wrong"}, "error"),
            ("/v1beta/models/g:generateContent", gemini_body([]), {"x-goog-api-key": "wrong"}, "error"),
        ]
        for path, body, headers, key in cases:
            with pytest.raises(urllib.error.HTTPError) as err:
                post(s.url + path, body, headers)
            assert err.value.code == 401 and key in json.loads(err.value.read())
        assert (
            post(s.url + "/v1/messages", anthropic_body([]), {"x-api-key": "right"})["stop_reason"]
            == "tool_use"
        )
        assert post(s.url + "/v1beta/models/g:generateContent?key=right", gemini_body([]))["candidates"]
        assert [r.status for r in s.records] == [401, 401, 401, 200, 200]
        assert s.usage_total() == Usage(2000, 100, 600)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["status"] for x in lines] == [401, 401, 401, 200, 200]
    assert lines[3]["headers"]["x-api-key"] == "right" and lines[3]["usage"] == {
        "input": 1000,
        "output": 50,
        "cached": 300,
    }


def test_unknown_paths_are_logged_with_a_404(server: DriverServer) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        post(f"{server.url}/v1/embeddings", {"input": "x"})
    assert err.value.code == 404
    assert server.paths() == ["POST /v1/embeddings"] and server.records[0].body == {"input": "x"}


def test_chunked_request_bodies_are_read(server: DriverServer) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    raw = json.dumps(chat_body([])).encode()
    conn.request("POST", "/v1/chat/completions", body=iter([raw[:50], raw[50:]]), encode_chunked=True)
    reply = json.loads(conn.getresponse().read())
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    conn.close()


def test_module_runs_as_a_command(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": ["echo hi"]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.driver_server", "--script", str(script), "--port", "0"],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "1 steps" in line
        url = line.split(" on ")[1].split()[0]
        reply = post(f"{url}/v1/chat/completions", chat_body([]))
        assert (
            json.loads(reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["command"]
            == "echo hi"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    ("status", "anthropic", "openai", "gemini"),
    [
        (400, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT"),
        (403, "permission_error", "insufficient_quota", "PERMISSION_DENIED"),
        (429, "rate_limit_error", "insufficient_quota", "RESOURCE_EXHAUSTED"),
    ],
)
def test_fail_after_answers_with_the_providers_error_and_no_usage(
    status: int, anthropic: str, openai: str, gemini: str
) -> None:
    with DriverServer(THREE, fail_after=1, fail_status=status, fail_message="budget gone") as s:
        assert post(f"{s.url}/v1/messages", anthropic_body([]))["stop_reason"] == "tool_use"
        cases = [
            ("/v1/messages", anthropic_body(["1"], stream=True), lambda e: e["error"]["type"] == anthropic),
            ("/v1/chat/completions", chat_body(["1"], stream=True), lambda e: e["error"]["type"] == openai),
            ("/v1/responses", responses_body(["1"], stream=True), lambda e: e["error"]["type"] == openai),
            (
                "/v1beta/models/g:generateContent",
                gemini_body(["1"]),
                lambda e: e["error"]["status"] == gemini,
            ),
        ]
        for path, body, shape in cases:
            with pytest.raises(urllib.error.HTTPError) as err:
                post(s.url + path, body)
            assert err.value.code == status
            payload = json.loads(err.value.read())
            assert shape(payload) and "budget gone" in json.dumps(payload)
        assert [r.kind for r in s.records] == ["step", "error", "error", "error", "error"]
        assert [r.tools_declared != [] for r in s.errors_sent()] == [True] * 4
        assert s.usage_total() == Usage(1000, 50, 300)  # errors carry no usage


def test_gemini_snake_case_requests_as_litellm_sends_them(server: DriverServer) -> None:
    """litellm (OpenHands on a gemini driver) posts to `<base>/models/<m>:generateContent` with
    snake_case fields; the API accepts them, and so does the server."""
    body: dict[str, Any] = {
        "contents": [
            {"role": "user", "parts": [{"text": "train"}]},
            {"role": "model", "parts": [{"function_call": {"name": "terminal", "args": {}}}]},
            {
                "role": "user",
                "parts": [{"function_response": {"name": "terminal", "response": {"out": "1"}}}],
            },
        ],
        "system_instruction": {"parts": [{"text": "be an agent"}]},
        "tools": [{"function_declarations": [{"name": "terminal", "parameters": OPENHANDS_TERMINAL}]}],
        "generationConfig": {"max_output_tokens": 100},
    }
    reply = post(f"{server.url}/models/gemini-x:generateContent", body, {"x-goog-api-key": "k"})
    call = reply["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert call["name"] == "terminal" and call["args"]["command"] == "echo two"
    side = {
        "contents": [{"role": "user", "parts": [{"text": "json please"}]}],
        "generation_config": {
            "response_mime_type": "application/json",
            "response_schema": {"type": "OBJECT", "properties": {"ok": {"type": "BOOLEAN"}}},
        },
    }
    text = post(f"{server.url}/models/gemini-x:generateContent", side)["candidates"][0]["content"]["parts"][0]
    assert json.loads(text["text"]) == {"ok": False}
