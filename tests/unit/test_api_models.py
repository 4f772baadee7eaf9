"""The pydantic API models: camelCase wire format, defaults, and the rules they enforce themselves."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from a2rl.api import BenchRun, BenchRunStatus, BenchSubmission
from a2rl.api.benchrun import BenchRunSpec, BudgetSpec, ObjectMeta, Phase
from a2rl.api.common import Condition
from a2rl.constants import API_GROUP_VERSION


def minimal_run(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": "BenchRun",
        "metadata": {"name": "demo"},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": {"command": ["python", "train.py"]},
            "budget": {"wallTimeSeconds": 600},
            **spec,
        },
    }


def test_wire_round_trip_is_camel_case_and_stable() -> None:
    driver = {"provider": "openai", "model": "m", "baseUrl": "http://gw"}
    run = BenchRun.model_validate(minimal_run(queueName="gpu", driver=driver))
    wire = run.to_wire()
    assert wire["spec"]["baseModel"] == {"name": "tiny", "source": "builtin:tiny"}
    assert wire["spec"]["budget"] == {"wallTimeSeconds": 600, "graceSeconds": 30}
    assert wire["spec"]["queueName"] == "gpu"
    assert wire["spec"]["driver"] == driver
    assert "status" not in wire  # None fields are left out, as Kubernetes stores them
    assert BenchRun.model_validate(wire) == run
    assert BenchRun.model_validate(wire).to_wire() == wire


def test_defaults_fill_every_optional_section() -> None:
    spec = BenchRun.model_validate(minimal_run()).spec
    assert spec.resources.cpu == "2" and spec.resources.memory == "8Gi" and spec.resources.gpus == 0
    assert spec.evaluation.backend == "auto"
    assert spec.agent.image == spec.agent.image_ref and spec.agent.image.startswith(
        "ghcr.io/a2rl/agent-baselines:"
    )
    assert spec.seed == 0 and spec.driver is None and spec.store.uri is None


def test_python_names_still_construct_models() -> None:
    spec = BenchRunSpec(
        task="arith",
        base_model={"name": "tiny", "source": "builtin:tiny"},
        agent={"command": ["true"]},
        budget=BudgetSpec(wall_time_seconds=60, max_submissions=3),
    )
    run = BenchRun(metadata=ObjectMeta(name="x"), spec=spec)
    assert run.to_wire()["spec"]["budget"]["maxSubmissions"] == 3


def test_quantity_accepts_integers_like_kubernetes() -> None:
    run = BenchRun.model_validate(minimal_run(resources={"cpu": 4, "memory": "16Gi"}))
    assert run.spec.resources.cpu == "4"
    with pytest.raises(ValidationError):
        BenchRun.model_validate(minimal_run(resources={"cpu": "four"}))


@pytest.mark.parametrize("name", ["TASK", "GRADING_SERVER_URL", "SEED"])
def test_agent_env_cannot_override_contract_variables(name: str) -> None:
    with pytest.raises(ValidationError, match=f"{name} is set by a2rl"):
        BenchRun.model_validate(minimal_run(agent={"command": ["x"], "env": [{"name": name, "value": "1"}]}))


def test_agent_env_names_are_unique() -> None:
    env = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    with pytest.raises(ValidationError, match="duplicate variable A"):
        BenchRun.model_validate(minimal_run(agent={"command": ["x"], "env": env}))


def test_run_name_must_be_a_dns_label_but_submission_name_may_be_a_subdomain() -> None:
    doc = minimal_run()
    doc["metadata"]["name"] = "a.b"
    with pytest.raises(ValidationError, match="DNS label"):
        BenchRun.model_validate(doc)
    doc["metadata"]["name"] = "x" * 64
    with pytest.raises(ValidationError, match="DNS label"):
        BenchRun.model_validate(doc)
    sub = BenchSubmission.model_validate(
        {
            "metadata": {"name": "run.00001"},
            "spec": {
                "runName": "run",
                "index": 1,
                "modelPath": "output/v1",
                "modelDigest": "a" * 64,
                "manifestUri": "file:///s/submissions/00001/manifest.json",
                "submittedAt": "2026-01-01T00:00:00Z",
            },
        }
    )
    assert sub.spec.submitted_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert sub.to_wire()["spec"]["identicalToBase"] is False


def test_status_serialises_with_conditions_and_phase() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    status = BenchRunStatus(
        phase=Phase.RUNNING,
        submission_count=2,
        best_score=40.0,
        conditions=[
            Condition(type="AgentRunning", status="True", reason="Started", last_transition_time=now)
        ],
    )
    wire = status.to_wire()
    assert wire["phase"] == "Running"
    assert wire["submissionCount"] == 2 and wire["bestScore"] == 40.0
    assert wire["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    with pytest.raises(ValidationError):
        BenchRunStatus.model_validate({"phase": "Sleeping"})
