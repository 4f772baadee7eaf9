"""A stack run in real containers: Claude Code (the real CLI, from its image) in the workspace pod,
the run's driver gateway in its own pod (the recorder image's `a2rl gateway serve`), reached through
its Service's ClusterIP (kube-proxy on the node), and a scripted Anthropic upstream on the host's
end of the node's link, which only the gateway pod is given the key of.

The one scripted step is what a hostile agent does first: it writes a file, then dumps its
environment and tries the key's file into the workspace, which the recorder snapshots into the
store. The step's answer spends the driver budget, so the gateway refuses the stack's next call and
the run ends `DriverBudgetExhausted`; it is graded (the baseline, from the store's cache when the
tier's first run put it there) and its report written. The key is then searched for everywhere the
run left something: the store (code snapshots, logs, calls, report) and every pod's spec. Last, the
BenchRun is deleted: its gateway pod, still serving, goes at once (its PID 1 handles SIGTERM).

A second run is deleted while the stack runs a long step: its pods go in seconds, not at the end of
the workspace pod's grace (55 s here, 85 s with the default drain), because the agent
container's PID 1 is the launcher, which passes SIGTERM on to the stack (`a2rl.contracts.pid1`).
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, LABEL_COMPONENT, LABEL_RUN_UID
from a2rl.records.driver_calls import iter_driver_calls
from a2rl.store.base import ObjectStore
from a2rl.store.cas import TreeManifest, restore_tree
from tests.node.conftest import RealCluster, _log, follow, run_images
from tests.support.driver_server import DriverServer, Script
from tests.support.grading_support import create_run, layout_of
from tests.support.helm import Helm
from tests.support.operator_support import RESTRICTED, condition
from tests.testenv import hostnet
from tests.testenv.controlplane import wait_for
from tests.testenv.node_install import NODE_STACK, image_ref

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

#: Shaped like a real Anthropic key (what a leak scanner or an attacker greps for).
UPSTREAM_KEY = "sk-ant-api03-" + secrets.token_urlsafe(70) + "AA"
#: The agent's one step: a file of its own, then its environment and the key file's path, as an
#: agent hunting for the provider key would try them.
STEP = (
    "echo played > code/hello.txt; env > code/env.txt; "
    "cat /var/run/secrets/driver/key > code/key.txt 2>&1; ls -la /var/run/secrets >> code/key.txt 2>&1; true"
)


def stack_run(cluster: RealCluster, upstream: DriverServer, **budget: int) -> dict[str, Any]:
    """A claude-code BenchRun driven by `upstream` through its gateway pod, in a new restricted
    namespace whose Secret `anthropic` holds the key (the gateway pod's only)."""
    api = cluster.admin
    ns = cluster.namespace(RESTRICTED)
    client.CoreV1Api(api).create_namespaced_secret(
        ns, {"metadata": {"name": "anthropic"}, "stringData": {"ANTHROPIC_API_KEY": UPSTREAM_KEY}}
    )
    return create_run(
        api,
        ns,
        f"cc-{uuid.uuid4().hex[:6]}",
        agent={"stack": NODE_STACK},
        driver={
            "provider": "anthropic",
            "model": "claude-scripted-1",
            "baseUrl": upstream.url,
            "secretRef": {"name": "anthropic", "key": "ANTHROPIC_API_KEY"},
        },
        budget={"graceSeconds": 10, "maxSubmissions": 1, **budget},
        # The node's 2 CPUs: operator 0.1, recorder 0.5, gateway 0.25, this agent 0.5 (it only runs
        # the CLI); the baseline comes from the store's cache, or an eval pod after the agent.
        resources={"cpu": "500m", "memory": "2Gi"},
        evaluation={"backend": "transformers", "cpu": "500m", "memory": "2Gi", "limit": 40},
        seed=0,
    )


def test_a_stack_run_drives_claude_code_through_its_gateway_pod_in_real_containers(
    real_cluster: RealCluster, installed: Helm, store: ObjectStore, tmp_path: Path
) -> None:
    del installed
    api = real_cluster.admin
    core = client.CoreV1Api(api)
    with DriverServer(Script.of([STEP]), api_key=UPSTREAM_KEY, host=hostnet.HOST_IP) as upstream:
        run = stack_run(real_cluster, upstream, wallTimeSeconds=900, driverTokens=1000)
        ns, name = run["metadata"]["namespace"], run["metadata"]["name"]
        run = follow(api, ns, name, "AgentFinished", timeout=600)
        upstream_calls = upstream.model_calls()
        assert upstream.header_values("x-api-key") == {UPSTREAM_KEY}  # added by the gateway only
        run = follow(api, ns, name, "Succeeded", timeout=600)

    finished = condition(run, "AgentFinished")
    assert finished is not None and finished["reason"] == "DriverBudgetExhausted", run["status"]
    uid = run["metadata"]["uid"]
    images = run_images(real_cluster, ns, uid)
    assert {image_ref(f"agent-{NODE_STACK}"), image_ref("recorder")} <= images

    # The agent reached the gateway at its Service's ClusterIP (pinned in the pod, routed by
    # kube-proxy), not the upstream: the upstream's only client is the gateway pod.
    svc = core.read_namespaced_service(f"{name}-gateway", ns)
    pods = core.list_namespaced_pod(ns, label_selector=f"{LABEL_RUN_UID}={uid}").items
    agent_pod = next(p for p in pods if p.metadata.labels[LABEL_COMPONENT] == "agent")
    gateway_pod = next(p for p in pods if p.metadata.labels[LABEL_COMPONENT] == "gateway")
    pinned = {a.ip for a in agent_pod.spec.host_aliases or []}
    assert svc.spec.cluster_ip in pinned, (svc.spec.cluster_ip, pinned)
    assert {r.client for r in upstream.records} == {gateway_pod.status.pod_ip}
    _log(f"[real node] {name}: {len(upstream_calls)} upstream call(s) from the gateway pod "
         f"{gateway_pod.status.pod_ip}; the agent reached it at {svc.spec.cluster_ip}:8080")  # fmt: skip

    st = run["status"]
    layout = layout_of(run)
    summary = store.get_json(layout.driver_summary)
    assert summary["budget"]["exhausted"] is True and summary["budget"]["refused_calls"] >= 1
    assert st["driverTokens"] == summary["total_tokens"] >= 1000
    calls = list(iter_driver_calls(store, layout))
    assert len(calls) == summary["calls"] > len(upstream_calls)  # the refused calls are recorded too
    report = store.get_json(f"{layout.report_dir}/report.json")
    assert report["baseline_score"] == st["baselineScore"] is not None

    # The step ran in the agent's container and the recorder snapshotted it: the agent's own file,
    # its environment without the key, and no key file to read.
    revisions = sorted(store.list(layout.revisions))
    assert revisions, "no code revision of the run in the store"
    code = tmp_path / "code"
    restore_tree(store, layout, TreeManifest.from_json(store.get_json(revisions[-1])["tree"]), code)
    assert (code / "hello.txt").read_text() == "played\n"
    agent_env = (code / "env.txt").read_text()
    assert "ANTHROPIC_BASE_URL=" in agent_env and f"{name}-gateway" in agent_env, agent_env
    assert "No such file or directory" in (code / "key.txt").read_text()
    for key in store.list(layout.prefix):
        assert UPSTREAM_KEY.encode() not in store.get_bytes(key), key
    for pod in pods:
        assert UPSTREAM_KEY not in json.dumps(api.sanitize_for_serialization(pod)), pod.metadata.name

    # The gateway pod still serves (it idles until its Job's deadline): deleting the BenchRun takes
    # it with it, and `a2rl gateway serve`, its PID 1, handles SIGTERM: gone well within its grace.
    assert gateway_pod.status.phase == "Running"
    grace = gateway_pod.spec.termination_grace_period_seconds
    started = time.monotonic()
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name
    )

    def gateway_gone() -> bool:
        return not core.list_namespaced_pod(
            ns, label_selector=f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=gateway"
        ).items

    wait_for(gateway_gone, timeout=grace + 30, interval=0.2, what="the gateway pod gone with its BenchRun")
    gone = time.monotonic() - started
    _log(f"[real node] {name} deleted: its gateway pod gone in {gone:.1f}s (grace {grace}s)")
    assert gone < grace / 2


def test_a_running_stack_run_deleted_takes_its_pods_in_seconds(
    real_cluster: RealCluster, installed: Helm, store: ObjectStore
) -> None:
    del installed, store
    api = real_cluster.admin
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    long_step = Script.of(["touch code/started; sleep 900"], timeout_s=1200)
    with DriverServer(long_step, api_key=UPSTREAM_KEY, host=hostnet.HOST_IP) as upstream:
        run = stack_run(real_cluster, upstream, wallTimeSeconds=1800)
        ns, name = run["metadata"]["namespace"], run["metadata"]["name"]
        uid = run["metadata"]["uid"]
        selector = f"{LABEL_RUN_UID}={uid}"
        wait_for(upstream.model_calls, timeout=300, what="the stack's first call (the long step)")
        time.sleep(3)  # the step's shell is running `sleep 900` in the agent's container
        (agent_pod,) = [
            p for p in core.list_namespaced_pod(ns, label_selector=selector).items
            if p.metadata.labels[LABEL_COMPONENT] == "agent"
        ]  # fmt: skip
        grace = agent_pod.spec.termination_grace_period_seconds
        started = time.monotonic()
        custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name)

        def run_gone() -> bool:
            try:
                custom.get_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name)
            except client.ApiException as exc:
                return exc.status == 404
            return False

        wait_for(run_gone, timeout=120, interval=0.2, what="the BenchRun gone (its finalizer run)")
        run_s = time.monotonic() - started
        wait_for(lambda: not core.list_namespaced_pod(ns, label_selector=selector).items,
                 timeout=90, interval=0.5, what="the run's pods gone")  # fmt: skip
        pods_s = time.monotonic() - started
    _log(f"[real node] {name} deleted mid-step: BenchRun gone in {run_s:.1f}s, its pods in {pods_s:.1f}s "
         f"(workspace pod grace {grace}s)")  # fmt: skip
    # The grace (graceSeconds + the tier's 30 s drain + its 15 s margin here) is what a PID 1 deaf
    # to SIGTERM would hold the pod for.
    assert pods_s < min(60, grace / 2)
