"""A stack run's driver gateway on the real control plane (kwok nodes, MinIO): the operator as its
least-privilege ServiceAccount creates the gateway's Job, Service, token Secret and NetworkPolicy
beside the workspace; the upstream key's Secret is mounted in the gateway pod and nowhere in the
workspace pod; the workspace policy allows, beyond what a run without a stack gets, only the
gateway pod on its port — as the API server reads the selectors, against the real pods."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from a2rl.constants import CLUSTER_GATEWAY_PORT, LABEL_COMPONENT, LABEL_RUN_UID
from tests.support.grading_support import create_run, run_name, running_pod
from tests.support.operator_install import OperatorProcess
from tests.support.operator_support import RESTRICTED, wait_run

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

KEY_SECRET = "driver-key"


def stack_run(admin: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return create_run(
        admin,
        ns,
        name,
        agent={"stack": "claude-code"},
        driver={
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "baseUrl": "http://10.1.2.3:8000",
            "secretRef": {"name": KEY_SECRET, "key": "api-key"},
        },
        budget={"wallTimeSeconds": 600, "graceSeconds": 5, "driverTokens": 5000},
    )


def selected(core: client.CoreV1Api, ns: str, selector: dict[str, Any]) -> set[str]:
    """The pods the API server selects with a policy's podSelector."""
    labels = selector.get("matchLabels") or selector["match_labels"]  # wire or client-model form
    text = ",".join(f"{k}={v}" for k, v in labels.items())
    return {p.metadata.name for p in core.list_namespaced_pod(ns, label_selector=text).items}


def test_a_stack_run_gets_its_gateway_pod_service_secret_and_policies(
    operator: OperatorProcess, admin: client.ApiClient, make_namespace: Any
) -> None:
    ns = make_namespace(labels=RESTRICTED)  # the gateway pod passes `restricted` too
    core, net = client.CoreV1Api(admin), client.NetworkingV1Api(admin)
    core.create_namespaced_secret(
        ns, {"metadata": {"name": KEY_SECRET}, "stringData": {"api-key": "sk-upstream-marker"}}
    )
    name, plain = run_name(), run_name()
    uid = stack_run(admin, ns, name)["metadata"]["uid"]
    plain_uid = create_run(admin, ns, plain)["metadata"]["uid"]
    wait_run(admin, ns, name, "AgentRunning")
    wait_run(admin, ns, plain, "AgentRunning")
    gw_pod = running_pod(admin, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=gateway")
    ws_pod = running_pod(admin, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent")
    plain_pod = running_pod(admin, ns, f"{LABEL_RUN_UID}={plain_uid},{LABEL_COMPONENT}=agent")

    # Every object owned by the run.
    service = core.read_namespaced_service(f"{name}-gateway", ns)
    token = core.read_namespaced_secret(f"{name}-gateway-token", ns)
    for obj in (service, token, client.BatchV1Api(admin).read_namespaced_job(f"{name}-gateway", ns)):
        assert [o.uid for o in obj.metadata.owner_references] == [uid]
    assert service.spec.ports[0].port == CLUSTER_GATEWAY_PORT

    # The key: a volume of the gateway pod; not referenced anywhere in the workspace pod.
    volumes = {v["name"]: v for v in gw_pod["spec"]["volumes"]}
    assert volumes["driver-key"]["secret"]["secretName"] == KEY_SECRET
    assert KEY_SECRET not in json.dumps(ws_pod["spec"])
    assert f"{name}-gateway-token" in json.dumps(ws_pod["spec"])  # the agent's token, by reference
    # The Service selects the gateway pod and nothing else.
    assert selected(core, ns, {"matchLabels": service.spec.selector}) == {gw_pod["metadata"]["name"]}

    # The workspace policy: what a run without a stack gets, plus the gateway pod on its port.
    ws_policy = net.read_namespaced_network_policy(f"{name}-workspace", ns).to_dict()["spec"]
    plain_policy = net.read_namespaced_network_policy(f"{plain}-workspace", ns).to_dict()["spec"]
    assert ws_policy["ingress"] in (None, []) and ws_policy["policy_types"] == ["Ingress", "Egress"]
    extra = [r for r in ws_policy["egress"] if r not in plain_policy["egress"]]
    assert len(ws_policy["egress"]) == len(plain_policy["egress"]) + 1
    (rule,) = extra
    assert [(p["protocol"], p["port"]) for p in rule["ports"]] == [("TCP", CLUSTER_GATEWAY_PORT)]
    (peer,) = rule["to"]
    assert peer["namespace_selector"] is None and peer["ip_block"] is None
    assert selected(core, ns, peer["pod_selector"]) == {gw_pod["metadata"]["name"]}
    assert selected(core, ns, ws_policy["pod_selector"]) == {ws_pod["metadata"]["name"]}
    assert plain_pod["metadata"]["name"] not in selected(core, ns, ws_policy["pod_selector"])

    # The gateway policy: only the run's own workspace pod may connect; egress to DNS, the store,
    # the upstream (the IP of its baseUrl, its port) — no API server.
    gw_policy = net.read_namespaced_network_policy(f"{name}-gateway", ns).to_dict()["spec"]
    assert selected(core, ns, gw_policy["pod_selector"]) == {gw_pod["metadata"]["name"]}
    (ingress,) = gw_policy["ingress"]
    (source,) = ingress["_from"]
    assert selected(core, ns, source["pod_selector"]) == {ws_pod["metadata"]["name"]}
    assert [(p["protocol"], p["port"]) for p in ingress["ports"]] == [("TCP", CLUSTER_GATEWAY_PORT)]
    peers = {
        ((p["ip_block"] or {}).get("cidr"), port["port"])
        for r in gw_policy["egress"]
        for p in r["to"]
        for port in r["ports"]
    }
    assert {("10.1.2.3/32", 8000), ("127.0.0.1/32", 9000)} <= peers  # the upstream, the store
    assert ("127.0.0.1/32", 6443) not in peers  # the operator's --apiserver-egress: not here
    assert len(gw_policy["egress"]) == 3  # DNS, the store, the upstream
