"""`a2rl.trajectory`: tool calls from each stack's real event stream, shell-command kinds, and
times placed on the driver's calls.

The fixtures under `fixtures/trajectory/` are excerpts of the streams the five stacks wrote in
`tests/e2e/test_stacks_e2e.py` (scripted driver: write `code/train.py` with a heredoc, dump the
environment, train, submit with curl), long strings cut and workspace paths replaced.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from a2rl_operator.grading.store import RunStore

from a2rl.stacks import STACK_NAMES
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from a2rl.trajectory import (
    KINDS,
    AnswerCalls,
    ToolCall,
    answer_tool_calls,
    command_kind,
    parse_trajectory,
    place_on_driver_calls,
    stream_events,
)
from a2rl.trajectory.commands import simple_commands, strip_heredocs, unwrap
from a2rl.trajectory.streams import event_lines

FIXTURES = Path(__file__).parent / "fixtures" / "trajectory"
SCRIPTED_KINDS = ["edit", "shell", "training", "submission"]
SCRIPTED_TOOLS = {
    "claude-code": "Bash",
    "codex": "command_execution",
    "gemini-cli": "run_shell_command",
    "opencode": "bash",
    "openhands": "terminal",
}


def events(stack: str) -> list[dict]:
    return stream_events((FIXTURES / f"{stack}.jsonl").read_bytes())


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_each_stack_stream_gives_the_four_scripted_calls(stack: str) -> None:
    calls = parse_trajectory(stack, events(stack))
    assert [c.kind for c in calls] == SCRIPTED_KINDS
    assert [c.seq for c in calls] == [1, 2, 3, 4]
    assert {c.tool for c in calls} == {SCRIPTED_TOOLS[stack]}
    assert calls[0].detail == "mkdir -p code && cat > code/train.py <<'A2RL_EOF'"
    assert calls[2].detail == "python3 code/train.py"
    assert calls[3].detail.startswith("curl -s -X POST $GRADING_SERVER_URL/submit")


@pytest.mark.parametrize(
    ("stack", "first", "last"),
    [
        (
            "claude-code",
            datetime(2026, 11, 25, 0, 19, 12, 70000, UTC),
            datetime(2026, 11, 25, 0, 20, 2, 302000, UTC),
        ),
        (
            "gemini-cli",
            datetime(2026, 11, 25, 0, 21, 22, 63000, UTC),
            datetime(2026, 11, 25, 0, 22, 12, 525000, UTC),
        ),
        (
            "opencode",
            datetime(2026, 11, 25, 0, 22, 25, 779000, UTC),
            datetime(2026, 11, 25, 0, 23, 16, 318000, UTC),
        ),
        (
            "openhands",
            datetime(2026, 11, 25, 0, 23, 32, 404664, UTC),
            datetime(2026, 11, 25, 0, 24, 23, 817948, UTC),
        ),
    ],
)
def test_stream_times_are_read_as_utc(stack: str, first: datetime, last: datetime) -> None:
    calls = parse_trajectory(stack, events(stack))
    assert (calls[0].at, calls[-1].at) == (first, last)


def test_codex_stream_has_no_times_and_counts_an_item_once() -> None:
    calls = parse_trajectory("codex", events("codex"))
    assert len(calls) == 4  # each command_execution appears as item.started and item.completed
    assert all(c.at is None for c in calls)


def test_unknown_stack_and_foreign_lines_give_nothing() -> None:
    assert parse_trajectory("aider", events("claude-code")) == []
    assert stream_events(b'not json\n[1, 2]\n{"type": "x"}\n\n') == [{"type": "x"}]
    assert parse_trajectory("claude-code", [{"type": "assistant", "message": "??"}, {"no": "type"}]) == []


def test_other_tools_by_name() -> None:
    claude = [
        {
            "type": "assistant",
            "timestamp": "2026-11-25T00:00:01Z",
            "message": {
                "content": [
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "name": "Read", "input": {"file_path": "/w/code/train.py"}},
                    {"type": "tool_use", "name": "Edit", "input": {"file_path": "/w/code/train.py"}},
                    {"type": "tool_use", "name": "TodoWrite", "input": {"todos": []}},
                ]
            },
        }
    ]
    assert [(c.kind, c.detail) for c in parse_trajectory("claude-code", claude)] == [
        ("read", "/w/code/train.py"),
        ("edit", "/w/code/train.py"),
        ("other", "TodoWrite"),
    ]
    codex = [
        {
            "type": "item.completed",
            "item": {"id": "i1", "type": "file_change", "changes": [{"path": "a.py"}]},
        },
        {"type": "item.completed", "item": {"id": "i2", "type": "web_search", "query": "trl sft"}},
        {"type": "item.completed", "item": {"id": "i3", "type": "reasoning", "text": "hm"}},
    ]
    assert [(c.kind, c.detail) for c in parse_trajectory("codex", codex)] == [
        ("edit", "a.py"),
        ("other", "trl sft"),
    ]
    gemini = [{"type": "tool_use", "tool_name": "write_file", "parameters": {"file_path": "code/t.py"}}]
    assert parse_trajectory("gemini-cli", gemini)[0].kind == "edit"
    opencode = [{"type": "tool_use", "part": {"tool": "read", "state": {"input": {"filePath": "x.py"}}}}]
    assert [(c.kind, c.detail, c.at) for c in parse_trajectory("opencode", opencode)] == [
        ("read", "x.py", None)
    ]
    openhands = [
        {"source": "agent", "tool_name": "file_editor", "action": {"command": "view", "path": "/w/a.py"}},
        {"source": "agent", "tool_name": "file_editor", "action": {"command": "create", "path": "/w/b.py"}},
        {"source": "agent", "tool_name": "terminal", "action": {"command": "", "is_input": True}},
        {"source": "agent", "tool_name": "finish", "action": {"message": "done"}},
    ]
    assert [c.kind for c in parse_trajectory("openhands", openhands)] == ["read", "edit", "other", "other"]


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("python3 code/train.py", "training"),
        ("python -u train_sft.py --lr 1e-5 > log.txt 2>&1 &", "training"),
        ("CUDA_VISIBLE_DEVICES=0 nohup timeout 3600 python code/grpo.py", "training"),
        ("cd code && (python train.py > out.log 2>&1 &)", "training"),
        # Detached through a shell of its own, as the stack e2e and real agents do.
        (
            '(setsid sh -c \'python3 code/train.py > train.log 2>&1; echo "finished, exit code $?" '
            "> train.done' </dev/null >/dev/null 2>&1 &); while [ ! -f train.done ]; do sleep 2; done",
            "training",
        ),
        ("nohup bash -lc 'cd code && python sft.py' &", "training"),
        ("sh -c 'curl -s -X POST $GRADING_SERVER_URL/submit -d {}'", "submission"),
        ("sh -c 'ls -la && du -sh output'", "shell"),
        ("torchrun --nproc_per_node 2 run.py", "training"),
        ("accelerate launch --num_processes 1 run.py", "training"),
        ("python -m trl sft --model_name_or_path models/base", "training"),
        ("trl dpo --config c.yaml", "training"),
        ("uv run python finetune.py", "training"),
        ("bash scripts/train.sh", "training"),
        ("/bin/bash -lc 'python3 code/train.py'", "training"),
        ('curl -s -X POST $GRADING_SERVER_URL/submit -d \'{"model_path":"output/v1"}\'', "submission"),
        ("python -c \"import requests; requests.post(url + '/submit', json={})\"", "submission"),
        ("python train.py && curl -X POST http://127.0.0.1:8000/submit", "submission"),
        ("mkdir -p code && cat > code/train.py <<'EOF'\npython x.py\ncurl /submit\nEOF", "edit"),
        ("sed -i 's/1e-4/1e-5/' code/train.py", "edit"),
        ("echo hi | tee notes.txt", "edit"),
        ("env | sort > code/env.txt", "shell"),
        ("python eval.py", "shell"),
        ("curl -s $GRADING_SERVER_URL/submissions", "shell"),
        ("python -c 'import train'", "shell"),
        ("pip install trl", "shell"),
        ("nvidia-smi", "shell"),
        ('echo "unbalanced python train.py', "shell"),
    ],
)
def test_command_kind(command: str, kind: str) -> None:
    assert command_kind(command) == kind


def test_command_helpers() -> None:
    assert unwrap("/bin/bash -lc 'ls -la'") == "ls -la"
    assert unwrap("bash -lc \"echo 'a'") == "echo 'a'"  # a cut command: the wrapper by pattern
    assert unwrap("ls -la") == "ls -la"
    assert strip_heredocs("cat > a <<EOF\nbody\nEOF\nls\ncat <<-'X'\nmore") == "cat > a <<EOF\nls\ncat <<-'X'"
    assert simple_commands("a 1 && b | c; d > f") == [["a", "1"], ["b"], ["c"], ["d", ">", "f"]]


def test_answer_tool_calls_per_protocol() -> None:
    anthropic = {"content": [{"type": "text"}, {"type": "tool_use", "name": "Bash"}]}
    chat = {
        "choices": [
            {"message": {"tool_calls": [{"function": {"name": "bash"}}, {"function": {"name": "x"}}]}}
        ]
    }
    responses = {"output": [{"type": "reasoning"}, {"type": "function_call", "name": "exec_command"}]}
    gemini = {
        "candidates": [
            {"content": {"parts": [{"text": "t"}, {"functionCall": {"name": "run_shell_command"}}]}}
        ]
    }
    assert answer_tool_calls("anthropic-messages", anthropic) == ["Bash"]
    assert answer_tool_calls("openai-chat", chat) == ["bash", "x"]
    assert answer_tool_calls("openai-responses", responses) == ["exec_command"]
    assert answer_tool_calls("gemini", gemini) == ["run_shell_command"]
    assert answer_tool_calls("gemini", "not a body") == []
    assert answer_tool_calls(None, anthropic) == []


def test_untimed_calls_are_placed_on_the_driver_answers_that_asked_for_them() -> None:
    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(6)]
    calls = [ToolCall(seq=n, tool="command_execution", kind="shell", detail="") for n in (1, 2, 3, 4)]
    answers = [
        AnswerCalls(finished_at=t[0], tools=("exec_command",)),
        AnswerCalls(finished_at=t[1], tools=()),  # a text answer
        AnswerCalls(finished_at=t[2], tools=("write_stdin",)),  # a poll: no item of its own
        AnswerCalls(finished_at=t[3], tools=("exec_command", "exec_command")),
    ]
    placed = place_on_driver_calls(calls, answers)
    assert [c.at for c in placed] == [t[0], t[3], t[3], None]  # the 4th was never asked for
    timed = [ToolCall(seq=1, tool="Bash", kind="shell", detail="", at=t[5])]
    assert place_on_driver_calls(timed, answers)[0].at == t[5]


def test_kinds_are_the_six_documented() -> None:
    assert KINDS == ("edit", "shell", "training", "submission", "read", "other")


def test_the_event_stream_is_the_json_object_lines_of_the_agent_output(tmp_path: Path) -> None:
    # Local runs and a cluster's archived agent log give the same `agent/trajectory.jsonl`.
    output = b'starting\n{"type": "assistant"}\n[1, 2]\nnot json {\n{"type": "result"}\n'
    assert event_lines(output) == b'{"type": "assistant"}\n{"type": "result"}\n'
    assert event_lines(b"no events\n") == b""
    store = LocalStore(tmp_path)
    layout = RunLayout("team-a", "cc", "0123")
    key = RunStore(store, layout).write_agent_trajectory(output.decode())
    assert key == layout.agent_trajectory and store.get_bytes(key) == event_lines(output)
