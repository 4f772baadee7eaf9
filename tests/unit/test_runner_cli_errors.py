"""`a2rl run` refuses bad input with one line on stderr (exit code ≠ 0, no traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli import main


def _doc(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"command": ["python", "-c", "print('hi')"]},
        "budget": {"wallTimeSeconds": 60},
    }
    spec.update(spec_overrides)
    return {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchRun", "metadata": {"name": "t"}, "spec": spec}


def _write(tmp_path: Path, doc: dict[str, Any] | str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def _run_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["run", "--quiet", *argv])
    captured = capsys.readouterr()
    assert code != 0
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("a2rl: error: ")
    return lines[0]


def test_invalid_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _run_error(capsys, str(_write(tmp_path, "spec: [unclosed\n  task: arith\n")))
    assert "invalid YAML" in line
    assert "run.yaml" in line


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _run_error(capsys, str(tmp_path / "absent.yaml"))
    assert "no such file" in line


def test_unknown_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _run_error(capsys, str(_write(tmp_path, _doc(task="no-such-task"))))
    assert "spec.task" in line
    assert "unknown task 'no-such-task'" in line


def test_unknown_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(budget={"wallTimeSeconds": 60, "wallTime": 5})
    line = _run_error(capsys, str(_write(tmp_path, doc)))
    assert "spec.budget.wallTime: unknown field" in line


def test_budget_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for budget in (0, -5):
        line = _run_error(capsys, str(_write(tmp_path, _doc(budget={"wallTimeSeconds": budget}))))
        assert "spec.budget.wallTimeSeconds" in line
        assert "must be ≥ 1" in line


def test_several_problems_still_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(task="nope", budget={"wallTimeSeconds": 0})
    line = _run_error(capsys, str(_write(tmp_path, doc)))
    assert "unknown task" in line
    assert "wallTimeSeconds" in line


def test_missing_base_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-model-here"
    doc = _doc(baseModel={"name": "mine", "source": str(missing)})
    line = _run_error(capsys, str(_write(tmp_path, doc)))
    assert line.startswith(f"a2rl: error: base model not found: {missing}")


def test_store_not_writable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Below a regular file: no user (root included) can create the store there.
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    store = blocker / "store"
    line = _run_error(capsys, str(_write(tmp_path, _doc())), "--store", str(store))
    assert line.startswith(f"a2rl: error: store path not writable: {store}")


def test_store_uri_from_spec_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    uri = (blocker / "store").as_uri()
    line = _run_error(capsys, str(_write(tmp_path, _doc(store={"uri": uri}))))
    assert "store path not writable" in line


def test_agent_command_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(agent={"command": ["a2rl-no-such-agent-binary"]})
    line = _run_error(capsys, str(_write(tmp_path, doc)))
    assert "agent command not found" in line


def test_invalid_run_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _run_error(capsys, str(_write(tmp_path, _doc())), "--name", "Bad_Name")
    assert "invalid run name" in line


def test_nothing_recorded_for_rejected_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    _run_error(capsys, str(_write(tmp_path, _doc(task="nope"))), "--store", str(store))
    assert not store.exists() or not any(store.rglob("run.json"))
