"""The report of a run driven by an LLM agent stack: the `driver` section (from the gateway's
summary and call records), the `trajectory` section (the stack's tool calls), their Markdown/HTML,
the tool calls on the timeline; and reports of other runs left exactly as they were."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from a2rl_grader.report.history import load_history
from a2rl_grader.report.metrics import build_report, report_json_bytes
from a2rl_grader.report.render import render_html, render_markdown
from a2rl_grader.report.write import read_report, write_report

from a2rl.records.driver import DriverBudgetState, DriverCallRecord, DriverSummary, DriverTotals, DriverUsage
from a2rl.records.report import ReportRecord
from a2rl.store.local import LocalStore
from tests.support.report_runs import CLASSIC_KEYS, T0, RunWriter, iso, sample_run

FIXTURES = Path(__file__).parent / "fixtures" / "trajectory"


def call(index: int, t: float, latency: float, **fields: Any) -> DriverCallRecord:
    defaults: dict[str, Any] = {
        "started_at": iso(t),
        "finished_at": iso(t + latency),
        "first_byte_s": latency / 2,
        "latency_s": latency,
        "protocol": "openai-responses",
        "request_model": "gpt-5",
        "response_model": "gpt-5-2025-08-07",
        "status": 200,
        "usage": DriverUsage(input_tokens=1000, output_tokens=100, cached_tokens=400),
        "cost_usd": 0.002,
        "response_body": {"output": [{"type": "function_call", "name": "exec_command"}]},
    }
    return DriverCallRecord(index=index, **(defaults | fields))


def write_driver(w: RunWriter, calls: list[DriverCallRecord], summary: DriverSummary | None) -> None:
    for record in calls:  # one object a call, as runs recorded before the batches (still read)
        w.store.put_json(f"{w.layout.driver_calls}/{record.index:05d}.json", record.to_json())
    if summary is not None:
        w.store.put_json(w.layout.driver_summary, summary.to_json())


def stack_run(tmp: Path, stack: str = "codex", **run: Any) -> RunWriter:
    w = sample_run(tmp)
    agent = {
        "command": [],
        "image": f"ghcr.io/a2rl/agent-{stack}:1",
        "stack": stack,
        "stack_version": "0.169.0",
        "mode": "sft-only",
    }
    w.run_json(agent=agent, **run)
    return w


def codex_calls() -> list[DriverCallRecord]:
    """Four answers asking for one command each (at 10, 20, 30 and 60 s), a text answer, and one
    call refused by the spent budget."""
    text = {"output": [{"type": "message", "content": []}]}
    return [
        call(1, 10, 0.1),
        call(2, 20, 0.2),
        call(3, 30, 0.3),
        call(4, 60, 0.4),
        call(5, 90, 1.0, response_body=text),
        call(
            6, 95, 0.01, status=403, refused="budget_exhausted", usage=None, cost_usd=0.0, response_body=None
        ),
    ]


def codex_summary() -> DriverSummary:
    return DriverSummary(
        provider="openai",
        model="gpt-5",
        calls=6,
        errors=1,
        input_tokens=5000,
        output_tokens=500,
        cached_tokens=2000,
        total_tokens=5500,
        cost_usd=0.01,
        latency_s=2.01,
        per_model={
            "gpt-5-2025-08-07": DriverTotals(calls=5, input_tokens=5000, output_tokens=500, cost_usd=0.01)
        },
        budget=DriverBudgetState(
            driver_tokens=5000,
            exhausted=True,
            exhausted_at=iso(90),
            reason="the run's driver budget (5000 tokens) is exhausted: 5500 tokens used",
            refused_calls=1,
        ),
    )


def with_trajectory(w: RunWriter, stack: str) -> None:
    w.store.put_bytes(w.layout.agent_trajectory, (FIXTURES / f"{stack}.jsonl").read_bytes())


def test_driver_section_from_the_summary_and_the_call_records(tmp_path: Path) -> None:
    w = stack_run(tmp_path)
    write_driver(w, codex_calls(), codex_summary())
    d = build_report(load_history(w.store, w.layout)).driver
    assert d is not None
    assert (d.provider, d.model, d.calls, d.errors) == ("openai", "gpt-5", 6, 1)
    assert (d.refused_calls, d.refused) == (1, {"budget_exhausted": 1})
    assert (d.input_tokens, d.output_tokens, d.cached_tokens, d.total_tokens) == (5000, 500, 2000, 5500)
    assert d.cost_usd == 0.01
    # Nearest rank over the five forwarded calls (the refusal left out): 0.1 0.2 0.3 0.4 1.0.
    assert (d.latency_p50_s, d.latency_p95_s) == (0.3, 1.0)
    assert (d.first_byte_p50_s, d.first_byte_p95_s) == (0.15, 0.5)
    assert (d.first_call_s, d.last_call_s) == (10.0, 95.0)
    [row] = d.per_model
    assert (row.model, row.calls, row.input_tokens, row.cost_usd) == ("gpt-5-2025-08-07", 5, 5000, 0.01)
    assert (row.latency_p50_s, row.latency_p95_s) == (0.3, 1.0)
    b = d.budget
    assert (b.driver_tokens, b.driver_cost_usd, b.tokens_used_ratio) == (5000, None, 1.1)
    assert (b.exhausted, b.exhausted_s, b.refused_calls) == (True, 90.0, 1)
    assert b.exhausted_at == (T0 + timedelta(seconds=90)).isoformat()


def test_without_a_summary_the_calls_are_added_up_and_the_limits_come_from_the_spec(tmp_path: Path) -> None:
    w = stack_run(tmp_path, spec={"budget": {"driverTokens": 100000, "driverCostUSD": 0.5}})
    write_driver(w, codex_calls(), None)
    d = build_report(load_history(w.store, w.layout)).driver
    assert d is not None
    assert (d.calls, d.errors, d.input_tokens, d.output_tokens, d.cached_tokens) == (6, 1, 5000, 500, 2000)
    assert d.cost_usd == 0.01
    assert [(r.model, r.calls) for r in d.per_model] == [("gpt-5-2025-08-07", 5)]
    b = d.budget
    assert (b.driver_tokens, b.driver_cost_usd) == (100000, 0.5)
    assert (b.tokens_used_ratio, b.cost_used_ratio, b.exhausted) == (0.055, 0.02, False)


def test_trajectory_section_with_stream_times(tmp_path: Path) -> None:
    w = stack_run(tmp_path, stack="claude-code")
    events = [
        {"type": "system", "subtype": "init"},
        {
            "type": "assistant",
            "timestamp": iso(40),
            "message": {
                "content": [{"type": "tool_use", "name": "Bash", "input": {"command": "python train.py"}}]
            },
        },
        {
            "type": "assistant",
            "timestamp": iso(100),
            "message": {"content": [{"type": "tool_use", "name": "Read", "input": {"file_path": "log.txt"}}]},
        },
    ]
    w.store.put_bytes(w.layout.agent_trajectory, "".join(json.dumps(e) + "\n" for e in events).encode())
    t = build_report(load_history(w.store, w.layout)).trajectory
    assert t is not None
    assert (t.stack, t.events, t.tool_calls, t.timing) == ("claude-code", 3, 2, "stream")
    assert t.kinds == {"edit": 0, "shell": 0, "training": 1, "submission": 0, "read": 1, "other": 0}
    assert t.tools == {"Bash": 1, "Read": 1}
    assert [(c.index, c.elapsed_s, c.kind, c.detail) for c in t.calls] == [
        (1, 40.0, "training", "python train.py"),
        (2, 100.0, "read", "log.txt"),
    ]


def test_a_codex_stream_is_placed_on_the_driver_calls(tmp_path: Path) -> None:
    w = stack_run(tmp_path)
    write_driver(w, codex_calls(), codex_summary())
    with_trajectory(w, "codex")
    t = build_report(load_history(w.store, w.layout)).trajectory
    assert t is not None
    assert (t.tool_calls, t.timing) == (4, "driver")
    assert t.kinds == {"edit": 1, "shell": 1, "training": 1, "submission": 1, "read": 0, "other": 0}
    assert [(c.kind, c.elapsed_s) for c in t.calls] == [
        ("edit", 10.1),
        ("shell", 20.2),
        ("training", 30.3),
        ("submission", 60.4),
    ]


def test_a_stream_without_a_driver_keeps_its_calls_untimed(tmp_path: Path) -> None:
    w = stack_run(tmp_path)
    with_trajectory(w, "codex")
    report = build_report(load_history(w.store, w.layout))
    assert report.driver is None
    assert report.trajectory is not None and report.trajectory.timing == "none"
    assert [c.elapsed_s for c in report.trajectory.calls] == [None] * 4


def spans() -> list[dict[str, Any]]:
    """A root span opened at 0 s, an `agent` step from 5 s to 1790 s."""
    ns = int(T0.timestamp() * 1e9)
    root = {"trace_id": "t1", "span_id": "r", "name": "benchrun", "service": "a2rl-runner", "start": iso(0)}
    agent = {
        "trace_id": "t1",
        "span_id": "a",
        "parent_span_id": "r",
        "name": "agent",
        "service": "a2rl-runner",
    }
    root |= {"start_time_unix_nano": ns, "end_time_unix_nano": ns + 1800 * 10**9}
    agent |= {"start_time_unix_nano": ns + 5 * 10**9, "end_time_unix_nano": ns + 1790 * 10**9}
    return [root, agent]


def test_markdown_and_html_show_driver_trajectory_and_timeline(tmp_path: Path) -> None:
    w = stack_run(tmp_path)
    write_driver(w, codex_calls(), codex_summary())
    with_trajectory(w, "codex")
    report = build_report(load_history(w.store, w.layout), spans())
    md = render_markdown(report)
    assert "| Agent | codex 0.169.0 (sft-only mode) |" in md  # the stack, not its image
    assert "## Driver" in md and "## Agent trajectory" in md
    assert "| Calls | 6 (1 errors, 1 refused: budget_exhausted 1) |" in md
    assert "| Tokens in / out / cached | 5000 / 500 / 2000 |" in md
    assert "| Latency p50 / p95 | 0.3 s / 1.0 s |" in md
    assert "| Budget | 5000 tokens (1.1 used) |" in md
    assert "yes, at 1:30 (the run's driver budget (5000 tokens) is exhausted" in md
    assert "| gpt-5-2025-08-07 | 5 | 0 | 5000 | 500 | 0 | $0.0100 | 0.3 | 1.0 |" in md
    assert "| training | 1 |" in md
    assert "| 3 | 0:30 | training | command_execution | python3 code/train.py |" in md
    timeline = md[md.index("## Timeline") :].split("\n## ")[0]
    rows = [line for line in timeline.splitlines() if line.startswith("| ")][1:]
    assert [r.split(" | ")[0] for r in rows] == [
        "| agent",
        "| tool call 1: edit",
        "| tool call 2: shell",
        "| tool call 3: training",
        "| tool call 4: submission",
    ]
    # Times since the run's start (m:ss); no step failed, so no status column (OpenTelemetry's UNSET).
    assert "| tool call 4: submission | agent (command_execution) | 1:00 | - | - |" in timeline
    assert "| step | service | start | duration s | spans under it |" in timeline and "UNSET" not in timeline
    page = render_html(report)
    assert "<h2>Driver</h2>" in page and "<h2>Agent trajectory</h2>" in page
    assert "<td>tool call 3: training</td>" in page
    assert "budget_exhausted 1" in page


def test_write_report_round_trips_the_new_sections(tmp_path: Path) -> None:
    w = stack_run(tmp_path)
    write_driver(w, codex_calls(), codex_summary())
    with_trajectory(w, "codex")
    report = write_report(w.store, w.layout)
    assert report.driver is not None and report.trajectory is not None
    stored = json.loads(w.store.get_bytes(f"{w.layout.report_dir}/report.json"))
    assert set(stored) == CLASSIC_KEYS | {"driver", "trajectory"}
    assert stored["trajectory"]["kinds"]["submission"] == 1
    assert read_report(w.store, w.layout) == report
    assert report_json_bytes(ReportRecord.from_json(stored)) == report_json_bytes(report)


def test_a_report_without_driver_or_stream_is_unchanged(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    report = build_report(load_history(w.store, w.layout))
    assert set(report.to_json()) == CLASSIC_KEYS
    md, page = render_markdown(report), render_html(report)
    assert "## Driver" not in md and "## Agent trajectory" not in md and "tool call" not in md
    assert "<h2>Driver</h2>" not in page and "Agent trajectory" not in page
    assert "Evaluation protocol" not in md  # a run recorded before protocols existed
    # A stack's run without any driver record or stream has neither section either.
    bare = stack_run(tmp_path / "bare")
    assert set(build_report(load_history(bare.store, bare.layout)).to_json()) == CLASSIC_KEYS


def test_the_same_store_gives_the_same_bytes(tmp_path: Path) -> None:
    w = stack_run(tmp_path)
    write_driver(w, codex_calls(), codex_summary())
    with_trajectory(w, "codex")
    first = report_json_bytes(build_report(load_history(w.store, w.layout), spans()))
    again = report_json_bytes(build_report(load_history(LocalStore(w.store.root), w.layout), spans()))
    assert first == again


def test_the_evaluation_protocol_is_in_the_run_section_and_the_summary(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    w.run_json(protocol="reference")
    report = build_report(load_history(w.store, w.layout))
    assert report.run.protocol == "reference"
    assert "| Evaluation protocol | reference |" in render_markdown(report)


def test_a_training_the_stack_moved_to_the_background_is_reported(tmp_path: Path) -> None:
    """Claude Code moves a command still running at its shell timeout to the background and the
    agent goes on (a submission right after may precede the model): the report says so."""
    w = stack_run(tmp_path, stack="claude-code")
    moved = (
        "Command did not complete within its 5s timeout and was moved to the background (ID: bk7m2q9x). "
        "Output is being written to: /tmp/claude-0/tasks/bk7m2q9x.output. It is running now: do not "
        "start a second copy while it runs."
    )

    def bash(at: int, call_id: str, command: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}
        return {"type": "assistant", "timestamp": iso(at), "message": {"content": [block]}}

    def result(call_id: str, text: str) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": [{"type": "text", "text": text}]}
        return {"type": "user", "message": {"role": "user", "content": [block]}}

    events = [
        bash(40, "toolu_01", "python3 code/train.py > train.log 2>&1"),
        result("toolu_01", moved),
        bash(50, "toolu_02", "sleep 60 && tail train.log"),
        result("toolu_02", "Command running in background with ID: bq1. Output is being written to: x"),
        bash(120, "toolu_03", "curl -s -X POST $GRADING_SERVER_URL/submit -d '{}'"),
        result("toolu_03", '{"submission_id": 1}'),
    ]
    w.store.put_bytes(w.layout.agent_trajectory, "".join(json.dumps(e) + "\n" for e in events).encode())
    report = build_report(load_history(w.store, w.layout))
    t = report.trajectory
    assert t is not None and t.backgrounded == 1  # the agent's own `run_in_background` does not count
    assert [c.backgrounded for c in t.calls] == [True, None, None]
    assert "backgrounded" not in t.calls[1].to_json()
    md = render_markdown(report)
    assert "1 still-running command(s) moved to the background by the stack (training 1)" in md
    assert "| 1 | 0:40 | training | Bash | ⧗ python3 code/train.py > train.log 2>&1 |" in md
    assert "moved to the background by the stack" in render_html(report)


def test_a_stream_with_nothing_backgrounded_has_no_background_fields(tmp_path: Path) -> None:
    w = stack_run(tmp_path, stack="claude-code")
    with_trajectory(w, "claude-code")
    stored = build_report(load_history(w.store, w.layout)).to_json()["trajectory"]
    assert "backgrounded" not in stored and not any("backgrounded" in c for c in stored["calls"])
