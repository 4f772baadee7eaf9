"""Loading and validating BenchRun files: every problem as one `path: message` line."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_tasks import TASKS

from a2rl.api.docgen import EXAMPLE
from a2rl.api.load import load_benchcampaign, load_benchrun, load_resource, parse_yaml, validate_document
from a2rl.errors import A2rlError, InvalidDocumentError

VALID: dict[str, Any] = {
    "apiVersion": "a2rl.dev/v1alpha1",
    "kind": "BenchRun",
    "metadata": {"name": "demo"},
    "spec": {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"command": ["python", "train.py"]},
        "budget": {"wallTimeSeconds": 600},
    },
}


def edited(path: str, value: Any) -> dict[str, Any]:
    """VALID with the dotted `path` set to `value` (or deleted when value is DELETE)."""
    doc = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return doc


DELETE = object()


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_document_has_no_problems() -> None:
    assert validate_document(VALID, "x.yaml") == []


def test_documented_example_is_valid(tmp_path: Path) -> None:
    run = load_benchrun(write(tmp_path, EXAMPLE))
    assert run.metadata.name == "arith-sft" and run.spec.task == "arith"
    assert run.spec.resources.cpu == "2"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (edited("spec.budget.wallTimeSeconds", 0), "spec.budget.wallTimeSeconds: must be ≥ 1 (got 0)"),
        (edited("spec.budget.wallTimeSeconds", -5), "spec.budget.wallTimeSeconds: must be ≥ 1 (got -5)"),
        (edited("spec.budget.maxSubmissions", 0), "spec.budget.maxSubmissions: must be ≥ 1 (got 0)"),
        (edited("spec.budget.graceSeconds", 7200), "spec.budget.graceSeconds: must be ≤ 3600 (got 7200)"),
        (
            edited("spec.budget.wallTimeSeconds", "600"),
            'spec.budget.wallTimeSeconds: must be an integer (got "600")',
        ),
        (edited("spec.seed", 1.5), "spec.seed: must be an integer (got 1.5)"),
        (
            edited("spec.agent.command", "python train.py"),
            'spec.agent.command: must be a list (got "python train.py")',
        ),
        (
            edited("spec.agent.command", []),
            "spec.agent.command: set command (the program to run) or stack (one of claude-code, codex, ",
        ),
        (edited("spec.agent.command", ["python", 3]), "spec.agent.command[1]: must be a string (got 3)"),
        (edited("spec.budget", None), "spec.budget: must be a mapping (got null)"),
        (edited("spec.budget", DELETE), "spec.budget: required field is missing"),
        (edited("spec.baseModel.source", DELETE), "spec.baseModel.source: required field is missing"),
        (edited("spec.task", ""), "spec.task: must not be empty"),
        (edited("spec.task", "gsm9k"), "spec.task: unknown task 'gsm9k' (known: "),
        (edited("spec.budgett", {}), "spec.budgett: unknown field (did you mean budget?)"),
        (
            edited("spec.budget.wall_time_seconds", 5),
            "spec.budget.wall_time_seconds: unknown field (did you mean wallTimeSeconds?)",
        ),
        (edited("spec.colour", "red"), "spec.colour: unknown field"),
        (
            edited("spec.evaluation", {"backend": "tpu"}),
            "spec.evaluation.backend: must be one of 'auto', 'transformers' or 'vllm' (got \"tpu\")",
        ),
        (
            edited("spec.resources", {"memory": "lots"}),
            'spec.resources.memory: must be a Kubernetes quantity such as 2, 500m or 16Gi (got "lots")',
        ),
        (
            edited("spec.agent.env", [{"name": "TASK", "value": "x"}]),
            "spec.agent.env[0].name: TASK is set by a2rl and cannot be overridden",
        ),
        (
            edited("spec.agent.env", [{"name": "A"}, {"name": "A"}]),
            "spec.agent.env[1].name: duplicate variable A",
        ),
        (edited("metadata.name", "My_Run"), "metadata.name: must be a lowercase DNS subdomain"),
        (
            edited(
                "spec.driver", {"provider": "openai", "model": "m", "secretRef": {"name": "Key", "key": "k"}}
            ),
            "spec.driver.secretRef.name: must be a lowercase DNS label",
        ),
        (
            edited("metadata.name", "a.b"),
            "metadata.name: must be a DNS label of at most 63 characters (no dots), got 'a.b'",
        ),
        (edited("apiVersion", "a2rl.dev/v1"), 'apiVersion: must be a2rl.dev/v1alpha1 (got "a2rl.dev/v1")'),
        (edited("apiVersion", DELETE), "apiVersion: required field is missing (expected a2rl.dev/v1alpha1)"),
        (edited("kind", "Run"), 'kind: must be one of BenchRun, BenchSubmission (got "Run")'),
        (edited("kind", DELETE), "kind: required field is missing"),
        (edited("spec", DELETE), "spec: required field is missing"),
        (edited("metadata", DELETE), "metadata: required field is missing"),
    ],
)
def test_each_problem_names_the_field_as_written(doc: dict[str, Any], expected: str) -> None:
    problems = validate_document(doc, "run.yaml", TASKS)
    assert any(p.startswith(expected) for p in problems), problems


def test_every_problem_is_listed_at_once() -> None:
    doc = edited("spec.budget", {"wallTimeSeconds": 0, "maxSubmissions": -1, "extra": 1})
    doc["spec"]["task"] = "nope"
    problems = validate_document(doc, "run.yaml", TASKS)
    assert [p.split(":")[0] for p in problems] == [
        "spec.budget.wallTimeSeconds",
        "spec.budget.maxSubmissions",
        "spec.budget.extra",
        "spec.task",
    ]


@pytest.mark.parametrize("data", [None, [1, 2], "text", 3])
def test_non_mapping_document(data: Any) -> None:
    assert validate_document(data, "x")[0].startswith("<document>: must be a mapping")


def test_unquoted_yaml_timestamps_validate_as_date_times(tmp_path: Path) -> None:
    text = """\
apiVersion: a2rl.dev/v1alpha1
kind: BenchSubmission
metadata: {name: demo-00001}
spec:
  runName: demo
  index: 1
  modelPath: output/v1
  modelDigest: %s
  manifestUri: file:///store/submissions/00001/manifest.json
  submittedAt: 2026-01-01T10:00:00Z
""" % ("ab" * 32)
    sub = load_resource(write(tmp_path, text))
    assert sub.kind == "BenchSubmission" and sub.spec.submitted_at.year == 2026


def test_invalid_yaml_is_one_line_with_position(tmp_path: Path) -> None:
    path = write(tmp_path, "spec:\n  task: arith\n   budget: 1\n")
    with pytest.raises(InvalidDocumentError) as info:
        load_benchrun(path)
    (problem,) = info.value.problems
    assert problem.startswith("invalid YAML at line 3, column 10:"), problem
    assert "\n" not in problem


def test_duplicate_keys_are_rejected() -> None:
    with pytest.raises(InvalidDocumentError) as info:
        parse_yaml("kind: BenchRun\nkind: BenchRun\n", "x.yaml")
    assert info.value.problems == ["invalid YAML at line 2, column 1: duplicate key 'kind'"]


def test_one_document_per_file(tmp_path: Path) -> None:
    text = yaml.safe_dump(VALID) + "---\n" + yaml.safe_dump(VALID)
    with pytest.raises(InvalidDocumentError) as info:
        load_benchrun(write(tmp_path, text))
    assert info.value.problems == ["expected one document, found 2 (one object per file)"]
    with pytest.raises(InvalidDocumentError, match="no document"):
        load_benchrun(write(tmp_path, "# nothing\n", "empty.yaml"))


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(A2rlError) as info:
        load_benchrun(tmp_path / "absent.yaml")
    assert not isinstance(info.value, InvalidDocumentError)
    assert str(info.value) == f"{tmp_path / 'absent.yaml'}: no such file"
    with pytest.raises(A2rlError, match="is a directory"):
        load_benchrun(tmp_path)


def test_load_benchrun_refuses_a_submission(tmp_path: Path) -> None:
    doc = edited("kind", "BenchSubmission")
    with pytest.raises(InvalidDocumentError) as info:
        load_benchrun(write(tmp_path, yaml.safe_dump(doc)))
    assert info.value.problems == ['kind: must be BenchRun (got "BenchSubmission")']


def test_error_text_lists_source_and_problems(tmp_path: Path) -> None:
    path = write(tmp_path, yaml.safe_dump(edited("spec.budget.wallTimeSeconds", 0)))
    with pytest.raises(InvalidDocumentError) as info:
        load_benchrun(path)
    assert str(info.value) == f"{path}: 1 problem(s):\n  spec.budget.wallTimeSeconds: must be ≥ 1 (got 0)"
    assert info.value.source == str(path)


EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples").glob("**/*.yaml")
    if "invalid" not in p.parts
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_shipped_examples_are_valid(path: Path) -> None:
    kind = yaml.safe_load(path.read_text()).get("kind")
    if kind == "BenchCampaign":
        load_benchcampaign(path, TASKS)
    elif kind in ("BenchRun", "BenchSubmission"):
        load_resource(path)
    else:  # examples/gitops/: a kustomization and an Argo CD Application
        assert kind in ("Kustomization", "Application"), path
