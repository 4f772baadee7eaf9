"""`a2rl run -q` with an agent that cannot be started: one line on stderr naming the reason (it
used to be exit 127 and nothing at all with `-q`), in the sandbox and without it. Whole runs
through the real CLI (a subprocess); the baseline of the tiny model is evaluated once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from a2rl_runner.sandbox.setup import SandboxUnavailableError, check_bubblewrap

from a2rl.launch import a2rl_argv


def _sandbox_flags() -> list[pytest.ParameterSet]:
    try:
        check_bubblewrap()
        sandboxed = pytest.param([], id="sandbox")
    except SandboxUnavailableError as exc:
        sandboxed = pytest.param([], id="sandbox", marks=pytest.mark.skip(reason=str(exc)))
    return [sandboxed, pytest.param(["--no-sandbox"], id="no-sandbox")]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("a2rl-home")  # one store: the baseline is cached after the first run


def _run(home: Path, tmp_path: Path, flags: list[str], **agent: object) -> subprocess.CompletedProcess[str]:
    doc = {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "nostart"},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": agent,
            "budget": {"wallTimeSeconds": 60, "graceSeconds": 1},
            "evaluation": {"limit": 5},
        },
    }
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump(doc))
    argv = a2rl_argv("run", "-q", *flags, "--store", str(home / "store"), str(file))
    env = {**os.environ, "A2RL_HOME": str(home)}
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600, env=env)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stderr  # the run happened and is recorded as failed
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("a2rl: error: the agent could not be started: ")
    return lines[0]


@pytest.mark.parametrize("flags", _sandbox_flags())
def test_missing_working_dir_is_named(home: Path, tmp_path: Path, flags: list[str]) -> None:
    line = _one_line(_run(home, tmp_path, flags, command=["python", "-c", "print(1)"], workingDir="nothere"))
    assert "spec.agent.workingDir='nothere' is not a directory" in line


@pytest.mark.parametrize("flags", _sandbox_flags())
def test_command_that_cannot_execute_is_named(home: Path, tmp_path: Path, flags: list[str]) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)  # exists (so validation passes), cannot be executed
    line = _one_line(_run(home, tmp_path, flags, command=[str(script)]))
    assert line.endswith(f"cannot start agent command '{script}': Permission denied")
