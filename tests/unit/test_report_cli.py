"""`a2rl report` and run lookup (`a2rl.runs`) on real LocalStore trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from a2rl_cli import main

from a2rl.errors import A2rlError
from a2rl.launch import a2rl_argv
from a2rl.runs import find_run, latest_run, list_runs
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from tests.support.report_runs import RunWriter, sample_run


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def three_runs(store: LocalStore, tmp: Path) -> tuple[RunWriter, RunWriter, RunWriter]:
    old = sample_run(tmp, store, name="sft", uid="aaaaaaaaaaaa", start_offset_s=0)
    new = sample_run(tmp, store, name="sft", uid="bbbbbbbbbbbb", start_offset_s=7200)
    other = sample_run(tmp, store, name="grpo-try", uid="cccccccccccc", start_offset_s=3600)
    return old, new, other


def test_list_and_latest(store: LocalStore, tmp_path: Path) -> None:
    old, new, other = three_runs(store, tmp_path)
    store.put_json("baselines/arith/abc/arith-1.json", {"score": 1.0})  # not a run
    assert [r.prefix for r in list_runs(store)] == [old.layout.prefix, other.layout.prefix, new.layout.prefix]
    assert latest_run(store) == new.layout


def test_find_run_resolution_rules(store: LocalStore, tmp_path: Path) -> None:
    old, new, other = three_runs(store, tmp_path)
    assert find_run(store, "local/sft-aaaaaaaaaaaa") == old.layout
    assert find_run(store, "sft-aaaaaaaaaaaa") == old.layout
    assert find_run(store, "aaaaaaaaaaaa") == old.layout
    assert find_run(store, "sft") == new.layout  # a name: the newest run with it
    assert find_run(store, "grpo-try") == other.layout
    with pytest.raises(A2rlError, match=r"no run 'sft-aaaaaaaaaab'.*did you mean: sft-aaaaaaaaaaaa"):
        find_run(store, "sft-aaaaaaaaaab")
    with pytest.raises(A2rlError, match="no run 'local/nothing-123'"):
        find_run(store, "local/nothing-123")


def test_find_run_in_an_empty_store(store: LocalStore) -> None:
    with pytest.raises(A2rlError, match="no runs in store"):
        find_run(store, "sft")
    with pytest.raises(A2rlError, match="no runs in store"):
        latest_run(store)


def test_kubernetes_uid_runs_are_found(store: LocalStore, tmp_path: Path) -> None:
    uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    w = sample_run(tmp_path, store, name="my-run", uid=uid)
    assert list_runs(store)[0].layout == RunLayout("local", "my-run", uid)
    assert find_run(store, f"my-run-{uid}") == w.layout
    assert find_run(store, "my-run") == w.layout


def test_cli_latest_json_builds_and_stores_the_report(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _old, new, _other = three_runs(store, tmp_path)
    assert main(["report", "--latest", "--json", "--store", str(store.root)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"baseline_score", "best_score", "submissions"} <= set(report)
    assert report["run"]["prefix"] == new.layout.prefix
    assert report["best_score"] == 42.5 and len(report["submissions"]) == 5
    assert store.exists(f"{new.layout.report_dir}/report.json")


def test_cli_markdown_reuses_a_finished_report_unless_regenerate(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = sample_run(tmp_path, store)
    assert main(["report", "demo", "--md", "--store", str(store.root)]) == 0
    assert "| Score | baseline 5.0 → best 42.5 (#3), Δ +37.5 |" in capsys.readouterr().out
    # A later result (the in-flight evaluation finishing) only shows after --regenerate.
    store.put_json(w.layout.submission_result(5), {"index": 5, "score": 60.0, "error": None})
    assert main(["report", "demo", "--md", "--store", str(store.root)]) == 0
    assert "| Score | baseline 5.0 → best 42.5 (#3), Δ +37.5 |" in capsys.readouterr().out
    assert main(["report", "demo", "--md", "--regenerate", "--store", str(store.root)]) == 0
    assert "| Score | baseline 5.0 → best 60.0 (#5), Δ +55.0 |" in capsys.readouterr().out


def test_cli_rebuilds_a_report_of_a_run_still_going(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = sample_run(tmp_path, store)
    w.run_json(ended=None)
    assert main(["report", "--json", "--store", str(store.root)]) == 0
    assert json.loads(capsys.readouterr().out)["total_submissions"] == 5
    w.submission(6, 1600, None, 1.0)
    assert main(["report", "--json", "--store", str(store.root)]) == 0
    assert json.loads(capsys.readouterr().out)["total_submissions"] == 6


def test_cli_errors_are_one_line(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A home of its own: a run earlier in the session left a last store, which the message names.
    monkeypatch.setenv("A2RL_HOME", str(tmp_path / "home"))
    assert main(["report", "--latest", "--store", str(store.root)]) == 2
    assert capsys.readouterr().err.strip() == f"a2rl: error: no runs in store {store.uri}"
    sample_run(tmp_path, store)
    assert main(["report", "nope", "--store", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("a2rl: error: no run 'nope'") and err.count("\n") == 1
    assert main(["report", "demo", "--latest", "--store", str(store.root)]) == 2
    assert "either RUN or --latest" in capsys.readouterr().err


def test_console_script_prints_json(store: LocalStore, tmp_path: Path) -> None:
    sample_run(tmp_path, store)
    env = {**os.environ, "A2RL_HOME": str(tmp_path / "home")}
    script = Path(sys.executable).with_name("a2rl")
    command = [str(script)] if script.exists() else a2rl_argv()
    proc = subprocess.run(
        [*command, "report", "--latest", "--json", "--store", store.uri],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["baseline_score"] == 5.0 and report["improvement"] == 37.5
