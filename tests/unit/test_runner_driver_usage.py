"""run.json's `driver_tokens` / `driver_cost_usd` and the summary's driver line, from the
gateway's `driver/summary.json` (local mode)."""

from __future__ import annotations

from pathlib import Path

from a2rl_runner.driver_usage import driver_line, metered, read_driver_summary

from a2rl.api.benchrun import BenchRun
from a2rl.records.driver import DriverBudgetState, DriverSummary
from a2rl.records.run import run_record
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore

LAYOUT = RunLayout("local", "stack-codex", "0123456789ab")


def summary(**budget: object) -> DriverSummary:
    return DriverSummary(
        calls=6,
        input_tokens=7200,
        output_tokens=240,
        cached_tokens=1200,
        total_tokens=7440,
        cost_usd=0.01234567,
        budget=DriverBudgetState(**budget),
    )


def benchrun() -> BenchRun:
    spec = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"stack": "codex"},
        "driver": {"provider": "openai", "model": "gpt-5"},
        "budget": {"wallTimeSeconds": 600, "driverTokens": 100000},
    }
    return BenchRun.model_validate({"metadata": {"name": "stack-codex"}, "spec": spec})


def test_run_json_gets_the_metered_totals(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    assert read_driver_summary(store, LAYOUT) is None and metered(None) == {}
    store.put_json(LAYOUT.driver_summary, summary().to_json())
    usage = metered(read_driver_summary(store, LAYOUT))
    assert usage == {"driver_tokens": 7440, "driver_cost_usd": 0.012346}
    record = run_record(benchrun(), LAYOUT, base_model_digest="d", evaluator_version="v", **usage)
    assert (record.driver_tokens, record.driver_cost_usd) == (7440, 0.012346)
    without = run_record(benchrun(), LAYOUT, base_model_digest="d", evaluator_version="v", **metered(None))
    assert "driver_tokens" not in without.to_json() and "driver_cost_usd" not in without.to_json()


def test_driver_line() -> None:
    assert driver_line(None) == "driver      no calls recorded"
    assert driver_line(summary()) == (
        "driver      6 calls, 7440 tokens (7200 in / 240 out / 1200 cached), $0.0123"
    )
    spent = summary(exhausted=True, refused_calls=2)
    assert driver_line(spent).endswith("$0.0123; budget exhausted, 2 calls refused")
