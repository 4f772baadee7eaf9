"""The CRD's rules on agent stacks and the driver, enforced by the real kube-apiserver: what
`a2rl validate` refuses, the API server refuses too (CEL), and valid stack runs are accepted with
the CRD's defaults filled in as the models fill them."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.api import BenchRun
from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL
from tests.support.operator_install import install_crds

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
ANTHROPIC = {"provider": "anthropic", "model": "claude-sonnet-4-5"}


def _run(agent: dict[str, Any], driver: dict[str, Any] | None = ANTHROPIC, **budget: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": agent,
        "budget": {"wallTimeSeconds": 60, **budget},
    }
    if driver is not None:
        spec["driver"] = driver
    name = f"st-{uuid.uuid4().hex[:8]}"
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "BenchRun",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def crds(admin: client.ApiClient) -> client.CustomObjectsApi:
    install_crds(admin, REPO / "crds")
    return client.CustomObjectsApi(admin)


def _create(api: client.CustomObjectsApi, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    created: Any = api.create_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, body)
    return created


#: The BenchRun examples (examples/campaign-arith.yaml is a BenchCampaign).
RUN_EXAMPLES = [
    p
    for p in sorted(REPO.glob("examples/*-arith.yaml"))
    if yaml.safe_load(p.read_text())["kind"] == "BenchRun"
]


@pytest.mark.parametrize("example", RUN_EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_accepted_with_the_models_defaults(
    crds: client.CustomObjectsApi, namespace: str, example: Path
) -> None:
    doc = yaml.safe_load(example.read_text())
    created = _create(crds, namespace, copy.deepcopy(doc))
    assert created["spec"] == BenchRun.model_validate(doc).to_wire()["spec"]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (_run({"stack": "claude-code", "command": ["x"]}), "spec.agent", "set exactly one of command"),
        (_run({"image": "x"}, None), "spec.agent", "set exactly one of command"),
        (_run({"stack": "claude-code"}, None), "spec.driver", "an agent stack needs spec.driver"),
        (_run({"stack": "codex"}), "spec.driver.provider", "the stack cannot use this driver provider"),
        (
            _run({"stack": "claude-code", "stackVersion": "2.0.0"}),
            "spec.agent.stackVersion",
            "claude-code 2.1.331",
        ),
        (_run({"command": ["x"], "mode": "rl-only"}, None), "spec.agent", "mode applies to a stack only"),
        (
            _run({"stack": "codex", "args": ["-x"]}, {"provider": "openai", "model": "m"}),
            "spec.agent",
            "args apply",
        ),
        (
            _run({"stack": "openhands"}, {"provider": "openai-compatible", "model": "m"}),
            "spec.driver.baseUrl",
            "baseUrl is required",
        ),
        (_run({"command": ["x"]}, None, driverTokens=5), "spec.budget", "need spec.driver"),
        (_run({"stack": "kodex"}), "spec.agent.stack", "Unsupported value"),
        (
            _run({"stack": "claude-code", "env": [{"name": "ANTHROPIC_API_KEY", "value": "sk-real"}]}),
            "spec.agent.env",
            "nor provider API keys",
        ),
    ],
)
def test_the_api_server_refuses_what_a2rl_validate_refuses(
    crds: client.CustomObjectsApi, namespace: str, body: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValueError):
        BenchRun.model_validate(body)  # the models refuse it too
    with pytest.raises(ApiException) as exc:
        _create(crds, namespace, body)
    assert exc.value.status == 422
    message = json.loads(str(exc.value.body))["message"]
    assert field in message and words in message, message


def test_the_stack_and_driver_are_immutable(crds: client.CustomObjectsApi, namespace: str) -> None:
    body = _run({"stack": "claude-code"})
    created = _create(crds, namespace, body)
    created["spec"]["agent"]["mode"] = "sft-only"
    with pytest.raises(ApiException) as exc:
        crds.replace_namespaced_custom_object(
            API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, body["metadata"]["name"], created
        )
    message = json.loads(str(exc.value.body))["message"]
    assert exc.value.status == 422 and "spec cannot change once created" in message, message
