"""`a2rl validate FILE...`: one verdict per file, every problem listed, exit 1 on problems, 2 when
a file cannot be read."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from a2rl_cli import main

from a2rl.api.docgen import EXAMPLE
from a2rl.launch import a2rl_argv

INVALID = EXAMPLE.replace("wallTimeSeconds: 600", "wallTimeSeconds: 0").replace("task: arith", "task: chess")


def test_valid_and_invalid_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(EXAMPLE)
    bad.write_text(INVALID)
    assert main(["validate", str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: valid (BenchRun arith-sft, task arith)\n"
    assert main(["validate", str(good), str(bad)]) == 1
    capsys.readouterr()
    assert main(["validate", str(good), str(bad), str(tmp_path / "missing.yaml")]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{good}: valid (BenchRun arith-sft, task arith)",
        f"{bad}: 2 problem(s):",
        "  spec.budget.wallTimeSeconds: must be ≥ 1 (got 0)",
        "  spec.task: unknown task 'chess' (known: " + out[3].split("(known: ")[1],
        f"{tmp_path / 'missing.yaml'}: no such file",
    ]


def test_invalid_yaml_never_shows_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed\n")
    proc = subprocess.run(
        a2rl_argv("validate", str(bad)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1].startswith("  invalid YAML at line 2, column 1:")
