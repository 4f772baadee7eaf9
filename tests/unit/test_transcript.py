"""The run's transcript: secret redaction, the builder over recorded gateway calls (Anthropic
Messages, OpenAI Chat Completions, Responses, Gemini), the escaped HTML page and write_report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from a2rl_grader.report.transcript import render_transcript_html
from a2rl_grader.report.write import write_report

from a2rl.records.driver import DriverCallRecord, DriverUsage
from a2rl.records.driver_calls import encode_batch
from a2rl.redaction import REDACTED, redact_secrets
from a2rl.trajectory.transcript import (
    MAX_TEXT_BYTES,
    TEXT,
    THINKING,
    TOOL_CALL,
    TOOL_RESULT,
    build_transcript,
    cap,
)
from tests.support.report_runs import T0, iso, sample_run

# Realistic shapes, not real credentials.
OPENAI_KEY = "sk-proj-4fQ8zT1mW9xK2bN7vR3cY6hJ0pL5sD8gA1eU4iO7-Zq2_Xw9"
ANTHROPIC_KEY = "sk-ant-api03-Xy7Qm2Lp9Rt4Vw8Zb1Nc6Hd3Jf5Kg0Ms2Qa7We4Rt9Yu1Io8Pa3Sd6Fg-AbCdEfAA"
TOGETHER_KEY = "tgp_v1_Qm8Zr2Xp4Lw7Tn1Vb5Kc9Hd3Jf6Gs0Ya2Ue8Io4Pq1"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
RUN_TOKEN = "a2rl-run-3JxV0q9mYtR8L2kP4wZs1nB7cD5fH6gT0uE9iO2aQ"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SCRIPT = "<script>alert('pwned')</script>"


# --- redaction --------------------------------------------------------------------------------
def test_redaction_scrubs_key_shapes_and_known_secrets() -> None:
    text = (
        f"export OPENAI_API_KEY={OPENAI_KEY}\nANTHROPIC_API_KEY='{ANTHROPIC_KEY}'\n"
        f"together: {TOGETHER_KEY}; aws_access_key_id = {AWS_KEY_ID}\n"
        f"curl -H 'Authorization: Bearer {JWT}' -H 'x-api-key: {RUN_TOKEN}'\n"
        "my upstream secret: hunter2-upstream-passphrase"
    )
    out = redact_secrets(text, secrets=["hunter2-upstream-passphrase", "short"])
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, TOGETHER_KEY, AWS_KEY_ID, RUN_TOKEN, JWT, "hunter2"):
        assert secret not in out
    assert "export OPENAI_API_KEY=[redacted]" in out
    assert f"Authorization: Bearer {REDACTED}'" in out
    assert out.count(REDACTED) == 7


def test_redaction_leaves_ordinary_text_alone() -> None:
    text = (
        "The bearer of this document, task-specific sk-learn notes, AKIA is a prefix; "
        "python -m pip install scikit-learn && short"
    )
    assert redact_secrets(text, secrets=["short"]) == text  # a known secret under 8 chars stays
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nafter"
    assert redact_secrets(pem) == f"{REDACTED}\nafter"


def test_cap_cuts_on_bytes_and_says_how_many() -> None:
    assert cap("short") == ("short", 0)
    text, cut = cap("é" * MAX_TEXT_BYTES)  # 2 bytes each
    assert len(text.encode()) == MAX_TEXT_BYTES and cut == MAX_TEXT_BYTES


# --- recorded gateway calls -------------------------------------------------------------------
def record(index: int, protocol: str, request: Any, response: Any, **kw: Any) -> DriverCallRecord:
    fields: dict[str, Any] = {
        "index": index,
        "started_at": iso(60.0 * index),
        "finished_at": iso(60.0 * index + 4.5),
        "provider": "anthropic" if protocol.startswith("anthropic") else "openai",
        "protocol": protocol,
        "operation": "chat",
        "method": "POST",
        "status": 200,
        "request_model": "claude-sonnet-4-5",
        "response_model": "claude-sonnet-4-5-20250929",
        "usage": DriverUsage(input_tokens=1200, output_tokens=80),
        "request_body": request,
        "response_body": response,
    }
    fields.update(kw)
    return DriverCallRecord(**fields)


TRAIN_OUTPUT = f"step 100 loss 0.412\n{SCRIPT}\nsaved checkpoint to /workspace/out\nkey={OPENAI_KEY}"
ANTHROPIC_SYSTEM = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
ANTHROPIC_USER = {"role": "user", "content": [{"type": "text", "text": "Improve the model; submit it."}]}
ANTHROPIC_TOOL_USE = {
    "type": "tool_use",
    "id": "toolu_01A9",
    "name": "Bash",
    "input": {"command": "python train.py --epochs 1", "description": "Train"},
}


def anthropic_calls() -> list[DriverCallRecord]:
    first_reply = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "thinking", "thinking": "Train first.", "signature": "EqQBCkYIBBgCKkA"},
            {"type": "text", "text": "I'll train once."},
            ANTHROPIC_TOOL_USE,
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1200, "output_tokens": 80},
    }
    second_request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "system": ANTHROPIC_SYSTEM,
        "messages": [
            ANTHROPIC_USER,
            {"role": "assistant", "content": first_reply["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A9", "content": TRAIN_OUTPUT},
                    {"type": "text", "text": "<system-reminder>todo list empty</system-reminder>"},
                ],
            },
        ],
    }
    second_reply = {
        "id": "msg_02",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "Loss 0.41; submitting."}],
        "stop_reason": "end_turn",
    }
    first_request = {
        "model": "claude-sonnet-4-5",
        "system": ANTHROPIC_SYSTEM,
        "messages": [ANTHROPIC_USER],
        "stream": True,
    }
    return [
        record(1, "anthropic-messages", first_request, first_reply, stream=True),
        record(2, "anthropic-messages", second_request, second_reply, stream=True),
    ]


def test_anthropic_steps_show_new_messages_reply_and_tool_output() -> None:
    steps = build_transcript(anthropic_calls())
    assert [s.index for s in steps] == [1, 2]
    first, second = steps
    assert not first.continued and [m.role for m in first.inputs] == ["system", "user"]
    (reply,) = first.reply
    assert [b.kind for b in reply.blocks] == [THINKING, TEXT, TOOL_CALL]
    call = reply.blocks[2]
    assert (
        call.name == "Bash"
        and call.call_id == "toolu_01A9"
        and call.text == "command: python train.py --epochs 1\ndescription: Train"
    )
    # The second call shows only the tool result (and the reminder), not the history again.
    assert second.continued and [m.role for m in second.inputs] == ["user"]
    result, reminder = second.inputs[0].blocks
    assert result.kind == TOOL_RESULT and result.call_id == "toolu_01A9" and result.name == "Bash"
    assert "step 100 loss 0.412" in result.text and SCRIPT in result.text
    assert OPENAI_KEY not in result.text and REDACTED in result.text
    assert reminder.kind == TEXT and second.reply[0].blocks[0].text == "Loss 0.41; submitting."
    assert second.started_at == iso(120.0)


def test_openai_chat_tool_calls_and_tool_messages() -> None:
    tool_call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "shell", "arguments": '{"command": ["bash", "-lc", "python train.py"]}'},
    }
    system = {"role": "system", "content": "You are a coding agent."}
    user = {"role": "user", "content": "Fine-tune the model."}
    first = record(
        1,
        "openai-chat",
        {"model": "gpt-5", "messages": [system, user]},
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": [tool_call]},
                    "finish_reason": "tool_calls",
                }
            ],
        },
    )
    assistant = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    tool = {"role": "tool", "tool_call_id": "call_abc", "content": TRAIN_OUTPUT}
    second = record(
        2,
        "openai-chat",
        {"model": "gpt-5", "messages": [system, user, assistant, tool]},
        {"choices": [{"message": {"role": "assistant", "content": "Done: loss 0.41."}}]},
    )
    count = record(3, "anthropic-messages", {}, {"input_tokens": 5}, operation="count_tokens")
    a, b = build_transcript([second, count, first])
    call = a.reply[0].blocks[0]
    assert call.kind == TOOL_CALL and call.name == "shell" and '"python train.py"' in call.text
    assert [m.role for m in b.inputs] == ["tool"]
    assert b.inputs[0].blocks[0].call_id == "call_abc" and SCRIPT in b.inputs[0].blocks[0].text
    assert b.reply[0].blocks[0].text == "Done: loss 0.41."


def test_responses_and_gemini_tool_round_trips() -> None:
    responses = record(
        1,
        "openai-responses",
        {
            "instructions": "You are Codex.",
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                {
                    "type": "function_call",
                    "name": "shell",
                    "arguments": '{"command":["ls"]}',
                    "call_id": "c1",
                },
                {"type": "function_call_output", "call_id": "c1", "output": "train.py\n"},
            ],
        },
        {
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
            ]
        },
    )
    gemini = record(
        2,
        "gemini",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}],
                },
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"name": "run_shell_command", "response": {"output": "x.py"}}}
                    ],
                },
            ]
        },
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "I see x.py"}]}}]},
    )
    r, g = build_transcript([responses, gemini])
    kinds = [b.kind for m in r.inputs for b in m.blocks]
    assert kinds == [TEXT, TEXT, TOOL_CALL, TOOL_RESULT] and r.reply[0].blocks[0].text == "ok"
    assert [m.role for m in g.inputs] == ["user", "assistant", "user"]
    assert g.inputs[2].blocks[0].kind == TOOL_RESULT and '"x.py"' in g.inputs[2].blocks[0].text
    assert g.reply[0].role == "assistant" and g.reply[0].blocks[0].text == "I see x.py"


def test_notes_for_unreassembled_streams_refusals_and_long_texts() -> None:
    raw_stream = "event: message_start\ndata: {...}\n\n"
    long_output = "x" * (MAX_TEXT_BYTES + 500)
    request = {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": long_output}]}]}
    streamed = record(1, "anthropic-messages", request, raw_stream, stream=True)
    refused = record(2, "anthropic-messages", request, {"error": {}}, status=403, refused="budget_exhausted")
    a, b = build_transcript([streamed, refused])
    assert a.note is not None and "streamed, content not kept" in a.note and not a.reply
    assert a.inputs[0].blocks[0].cut == 500
    assert b.note == "refused by the gateway: budget_exhausted"


# --- the page ---------------------------------------------------------------------------------
def test_html_escapes_hostile_agent_text() -> None:
    steps = build_transcript(anthropic_calls())
    page = render_transcript_html(steps, "run <b>x</b>", T0)
    assert SCRIPT not in page and "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page and "<script" not in page
    assert "2:00 call 2" in page and "tool call: Bash" in page and "step 100 loss 0.412" in page
    assert OPENAI_KEY not in page


def test_write_report_writes_and_links_the_transcript(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    calls = anthropic_calls()
    w.store.put_bytes(w.layout.driver_call_batch(1), encode_batch(json.dumps(r.to_json()) for r in calls))
    write_report(w.store, w.layout)
    page = w.store.get_bytes(f"{w.layout.report_dir}/transcript.html").decode()
    assert "step 100 loss 0.412" in page and "&lt;script&gt;" in page and "1:00 call 1" in page
    assert "href='transcript.html'" in w.store.get_bytes(f"{w.layout.report_dir}/report.html").decode()
    assert "(transcript.html)" in w.store.get_bytes(f"{w.layout.report_dir}/report.md").decode()
