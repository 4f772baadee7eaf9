"""The operator's probes and pod defaults on the real control plane.

- Readiness follows the API server, liveness does not: the operator talks to the API server
  through a TCP forwarder the test cuts and heals; `/readyz` turns 503 within seconds of the cut
  and 200 again after it, while `/healthz` answers 200 throughout and the process keeps running
  (a kubelet would not restart it for a control-plane blip).
- The operator configured as the chart configures it (`A2RL_POD_DEFAULTS`,
  `A2RL_IMAGE_PULL_SECRETS`) creates pods that carry the defaults, as the API server stored them
  (PriorityClass and RuntimeClass resolved by their admission plugins, `restricted` admitted).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from a2rl.constants import ENV_IMAGE_PULL_SECRETS, ENV_POD_DEFAULTS, LABEL_COMPONENT, LABEL_RUN_UID
from tests.support.grading_support import create_run, run_name
from tests.support.operator_install import (
    OperatorProcess,
    install_crds,
    install_rbac,
    serviceaccount_kubeconfig,
)
from tests.support.operator_support import OPERATOR_NS, REPO, RESTRICTED, started_operator
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

SUFFIX = uuid.uuid4().hex[:6]
PRIORITY = {"workspace": f"a2rl-ws-{SUFFIX}", "gateway": f"a2rl-gw-{SUFFIX}"}
RUNTIME = f"a2rl-sandbox-{SUFFIX}"
KEY_SECRET = "driver-key"


def _defaults(kind: str) -> dict[str, Any]:
    return {
        "nodeSelector": {"a2rl.dev/pool": f"{kind}-pool"},
        "tolerations": [{"key": f"a2rl.dev/{kind}", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchExpressions": [{"key": "tier", "operator": "In", "values": [kind]}]
                        },
                    }
                ]
            }
        },
        "priorityClassName": PRIORITY[kind],
        "imagePullSecrets": [{"name": f"{kind}-pull"}],
    }


POD_DEFAULTS = {
    "workspace": {**_defaults("workspace"), "runtimeClassName": RUNTIME},
    "gateway": _defaults("gateway"),
}


@pytest.fixture(scope="module")
def classes(admin: client.ApiClient) -> Iterator[None]:
    """The PriorityClasses and the RuntimeClass the defaults name (admission refuses unknown ones)."""
    sched, node = client.SchedulingV1Api(admin), client.NodeV1Api(admin)
    for name in PRIORITY.values():
        sched.create_priority_class({"metadata": {"name": name}, "value": 1000})
    node.create_runtime_class({"metadata": {"name": RUNTIME}, "handler": "runc"})
    yield
    for name in PRIORITY.values():
        sched.delete_priority_class(name)
    node.delete_runtime_class(RUNTIME)


@pytest.fixture(scope="module")
def operator(
    classes: None,
    control_plane: Any,
    minio: Any,
    admin: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    env = {
        "AWS_ENDPOINT_URL": minio.endpoint,
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        ENV_POD_DEFAULTS: json.dumps(POD_DEFAULTS),
        ENV_IMAGE_PULL_SECRETS: json.dumps([{"name": "global-pull"}]),
    }
    args = ["--store-uri", "s3://a2rl-defaults/runs", "--no-scoped-store-credentials",
            "--workspace-size", "1Gi", "--store-egress", "127.0.0.1/32:9000",
            "--apiserver-egress", "127.0.0.1/32:6443"]  # fmt: skip
    with started_operator(admin, tmp_path_factory.mktemp("defaults-operator"), args, env=env) as proc:
        yield proc


def _pod(core: client.CoreV1Api, ns: str, selector: str) -> dict[str, Any]:
    from tests.testenv.controlplane import wait_for

    def created() -> dict[str, Any] | None:
        pods = core.list_namespaced_pod(ns, label_selector=selector).items
        return core.api_client.sanitize_for_serialization(pods[0]) if pods else None

    pod: dict[str, Any] = wait_for(created, timeout=60, what=f"pod {selector}")
    return pod


def test_the_pods_it_creates_carry_the_pod_defaults(
    operator: OperatorProcess, admin: client.ApiClient, make_namespace: Any
) -> None:
    ns = make_namespace(labels=RESTRICTED)
    core = client.CoreV1Api(admin)
    core.create_namespaced_secret(ns, {"metadata": {"name": KEY_SECRET}, "stringData": {"api-key": "k"}})
    name = run_name()
    uid = create_run(
        admin,
        ns,
        name,
        agent={"stack": "claude-code"},
        driver={
            "provider": "anthropic",
            "model": "m",
            "baseUrl": "http://10.1.2.3:8000",
            "secretRef": {"name": KEY_SECRET, "key": "api-key"},
        },
        budget={"wallTimeSeconds": 600, "graceSeconds": 5},
    )["metadata"]["uid"]
    pods = {
        kind: _pod(core, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}={component}")["spec"]
        for kind, component in (("workspace", "agent"), ("gateway", "gateway"))
    }
    for kind, pod in pods.items():
        want = POD_DEFAULTS[kind]
        assert pod["nodeSelector"] == want["nodeSelector"], kind
        assert want["tolerations"][0] in pod["tolerations"], kind  # beside DefaultTolerationSeconds'
        assert pod["affinity"] == want["affinity"], kind
        assert (pod["priorityClassName"], pod["priority"]) == (want["priorityClassName"], 1000), kind
        assert pod["imagePullSecrets"] == [{"name": "global-pull"}, {"name": f"{kind}-pull"}], kind
    assert pods["workspace"]["runtimeClassName"] == RUNTIME
    assert "runtimeClassName" not in pods["gateway"]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_readiness_follows_the_api_server_and_liveness_does_not(
    control_plane: Any, admin: client.ApiClient, make_namespace: Any, tmp_path: Path
) -> None:
    from tests.testenv.controlplane import free_port, wait_for

    install_crds(admin, REPO / "crds")
    install_rbac(admin, OPERATOR_NS)
    ns = make_namespace()  # watched alone: this operator must not touch other tests' runs
    kubeconfig = serviceaccount_kubeconfig(
        admin, OPERATOR_NS, "a2rl-operator", tmp_path / "operator.kubeconfig"
    )
    proxy = TcpProxy(("127.0.0.1", control_plane.ports["apiserver"]))
    proxy.start()
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"  # the cert names 127.0.0.1
    kubeconfig.write_text(yaml.safe_dump(doc))
    proc = OperatorProcess(kubeconfig, tmp_path / "operator.log", args=["-n", ns], port=free_port())
    try:
        proc.start()  # returns once /readyz answers 200
        proxy.stop()
        wait_for(
            lambda: _status(proc.readyz) == 503, timeout=20, what="/readyz 503 with the API server cut off"
        )
        with urllib.request.urlopen(proc.healthz, timeout=5) as resp:
            assert resp.status == 200
        try:
            urllib.request.urlopen(proc.readyz, timeout=5)
        except urllib.error.HTTPError as exc:
            reason = json.load(exc)["reason"]
        assert "API server" in reason, reason
        for _ in range(3):  # stays alive through the outage: liveness keeps answering
            assert _status(proc.healthz) == 200
            assert proc.proc is not None and proc.proc.poll() is None
        proxy.start()  # the same port: the network heals
        wait_for(
            lambda: _status(proc.readyz) == 200, timeout=30, what="/readyz 200 once the API server is back"
        )
        assert _status(proc.healthz) == 200
    finally:
        proc.stop()
        proxy.stop()
        print("--- operator log tail ---\n" + proc.log_tail(30))
