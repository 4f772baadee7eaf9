"""Hostile BenchRun files through the real CLI (`python -m a2rl_cli`, a subprocess): each is one
clear line and exit code 2 from `a2rl run` — never a traceback, a hang or a MemoryError — and a
verdict per file from `a2rl validate` (2 when a file cannot be read, 1 when it is invalid)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli.run_cmd import _start_failure

from a2rl.api.load import MAX_DOCUMENT_BYTES, MAX_YAML_DEPTH
from a2rl.launch import a2rl_argv


def _doc(**agent: Any) -> dict[str, Any]:
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "t"},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": {"command": ["python", "-c", "print('hi')"], **agent},
            "budget": {"wallTimeSeconds": 60},
        },
    }


def _a2rl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "A2RL_HOME": str(tmp_path / "home")}  # nothing may land in ~/.a2rl
    return subprocess.run(a2rl_argv(*args), capture_output=True, text=True, check=False, timeout=60, env=env)


def _run_refuses(tmp_path: Path, file: Path | str) -> str:
    """`a2rl run -q FILE` → exit 2 and exactly one line on stderr; that line."""
    proc = _a2rl(tmp_path, "run", "-q", "--store", str(tmp_path / "store"), str(file))
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("a2rl: error: "), proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "store").exists()  # refused before anything started
    return lines[0]


def _write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _nested(depth: int) -> str:
    doc = _doc()
    text = yaml.safe_dump(doc)
    return text.replace("name: t\n", "name: t\n  labels: " + "[" * depth + "]" * depth + "\n")


def test_deeply_nested_yaml_is_one_line(tmp_path: Path) -> None:
    """Nested YAML (a RecursionError and 3,000 lines of traceback before) is refused by depth."""
    line = _run_refuses(tmp_path, _write(tmp_path, _nested(5000)))
    assert line.endswith(f"nested deeper than {MAX_YAML_DEPTH} levels")
    # Block style nests through a different path in PyYAML: the same answer.
    block = "- " * 3000 + "x\n"  # a sequence in a sequence in …
    assert "nested deeper than" in _run_refuses(tmp_path, _write(tmp_path, block))


def test_alias_bomb_is_one_line(tmp_path: Path) -> None:
    """A few KiB of aliases that expand to 10^9 nodes ("billion laughs") are refused."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    line = _run_refuses(tmp_path, _write(tmp_path, "\n".join(lines)))
    assert "aliases expand the document beyond" in line


def test_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    """`a2rl run /dev/zero` (a MemoryError before): not a regular file, nothing read."""
    line = _run_refuses(tmp_path, "/dev/zero")
    assert line == "a2rl: error: /dev/zero: is a character device, not a YAML file"


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)  # nobody writes to it: opening it for reading would block forever
    assert _run_refuses(tmp_path, fifo).endswith("is a pipe (FIFO), not a YAML file")


def test_directory_is_refused(tmp_path: Path) -> None:
    assert _run_refuses(tmp_path, tmp_path).endswith("is a directory, not a YAML file")


def test_file_over_the_size_cap_is_refused(tmp_path: Path) -> None:
    """A valid document padded past 1 MiB with a comment: the cap is on the file, not the YAML."""
    text = yaml.safe_dump(_doc()) + "#" + "x" * MAX_DOCUMENT_BYTES + "\n"
    line = _run_refuses(tmp_path, _write(tmp_path, text))
    assert line.endswith("larger than 1 MiB, the limit for a BenchRun or BenchSubmission file")


def test_binary_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8 text" in _run_refuses(tmp_path, path)


@pytest.mark.parametrize(
    ("working_dir", "expected"),
    [
        ("../../../etc/x", "must stay inside the workspace: '..' is not allowed"),
        ("code/../../x", "must stay inside the workspace: '..' is not allowed"),
        ("/etc", "must stay inside the workspace: relative to it, or under /workspace/"),
        ("/workspacex", "must stay inside the workspace: relative to it, or under /workspace/"),
        ("code\0", "must not contain NUL characters"),
    ],
)
def test_working_dir_outside_the_workspace_is_refused_at_validation(
    tmp_path: Path, working_dir: str, expected: str
) -> None:
    """`agent.workingDir: ../../../etc/x` passed validation, then the run failed with exit 127
    and no reason; now it is a validation error naming the field."""
    line = _run_refuses(tmp_path, _write(tmp_path, yaml.safe_dump(_doc(workingDir=working_dir))))
    assert f"spec.agent.workingDir: {expected}" in line


def test_nul_in_the_agent_command_is_refused(tmp_path: Path) -> None:
    """No process can be started with a NUL in its argv or environment (a ValueError before)."""
    doc = _doc(args=["ok", "bad\0arg"], env=[{"name": "X", "value": "a\0b"}])
    line = _run_refuses(tmp_path, _write(tmp_path, yaml.safe_dump(doc)))
    assert "spec.agent.args[1]: must not contain NUL characters" in line
    assert "spec.agent.env[0].value: must not contain NUL characters" in line


def test_validate_gives_each_file_a_verdict(tmp_path: Path) -> None:
    """`a2rl validate`: unreadable files (exit 2) and invalid ones (exit 1) get one line each
    (the invalid one its problem list); inside-workspace working directories are valid."""
    good = [
        _write(tmp_path, yaml.safe_dump(_doc(workingDir=wd)), f"good{i}.yaml")
        for i, wd in enumerate(["code", "/workspace", "/workspace/code/sub", "./code"])
    ]
    nested = _write(tmp_path, _nested(5000), "nested.yaml")
    escape = _write(tmp_path, yaml.safe_dump(_doc(workingDir="../../../etc/x")), "escape.yaml")
    proc = _a2rl(tmp_path, "validate", *map(str, good))
    assert proc.returncode == 0, proc.stdout
    proc = _a2rl(tmp_path, "validate", str(nested), str(escape))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert f"  invalid YAML at line 5, column 109: nested deeper than {MAX_YAML_DEPTH} levels" in proc.stdout
    assert "spec.agent.workingDir: must stay inside the workspace" in proc.stdout
    proc = _a2rl(tmp_path, "validate", str(escape), "/dev/zero", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert out[-2:] == [
        "/dev/zero: is a character device, not a YAML file",
        f"{tmp_path / 'missing.yaml'}: no such file",
    ]


def test_an_agent_that_cannot_start_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `a2rl run` says (even with -q) when the runner could not start the agent: the reason
    the runner wrote into the agent's log, or the missing working directory by name."""
    from a2rl_runner.run import RunOutcome

    monkeypatch.setenv("A2RL_HOME", str(tmp_path / "home"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log = tmp_path / "home" / "logs" / "t-abc" / "agent.log"
    log.parent.mkdir(parents=True)
    outcome = RunOutcome(
        name="t",
        uid="abc",
        prefix="local/t-abc",
        store_uri="file:///x",
        workspace=workspace,
        end_reason="failed",
        agent_exit_code=127,
        duration_s=0.1,
        interrupted=False,
        scores=None,  # type: ignore[arg-type]
        report=None,
        report_uri=None,
    )
    file = _write(tmp_path, yaml.safe_dump(_doc()))
    log.write_text("a2rl: cannot start agent command '/bin/x': Permission denied\n")
    assert _start_failure(file, outcome) == "cannot start agent command '/bin/x': Permission denied"
    nested = _write(tmp_path, yaml.safe_dump(_doc(workingDir="code/sub")), "sub.yaml")
    log.write_text("bwrap: Can't chdir to /x/code/sub: No such file or directory\n")
    assert _start_failure(nested, outcome) == (
        f"its working directory spec.agent.workingDir='code/sub' is not a directory ({workspace}/code/sub)"
    )
    log.write_text("Traceback (most recent call last):\nValueError: the agent's own failure\n")
    assert _start_failure(file, outcome) is None  # it started, then failed: its own output says why


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "spec: {budget: {wallTimeSeconds: " + "9" * 5000 + "}}\n",
            "cannot read this value (Exceeds the limit",
        ),
        ("metadata: {name: !!timestamp 2001-99-99}\n", "cannot read this value (month must be in 1..12)"),
        ("? [a, b]\n: c\n", "a mapping key must be a scalar, not a list or mapping"),
    ],
    ids=["int-5000-digits", "impossible-timestamp", "list-as-key"],
)
def test_values_pyyaml_cannot_build_are_one_line(tmp_path: Path, text: str, expected: str) -> None:
    """Scalars whose construction raises a plain ValueError/TypeError inside PyYAML (a traceback
    before) are YAML errors with a position."""
    line = _run_refuses(tmp_path, _write(tmp_path, text))
    assert ": invalid YAML at line " in line and expected in line
