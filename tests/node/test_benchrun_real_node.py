"""A BenchRun end to end in real containers: the chart installed with helm, the operator running
from its image on the real node, and the run's workspace pod (set-up, recorder sidecar, the
scripted SFT agent), eval Jobs and report Job all as containerd containers of the project's
images, against MinIO on the host; the run graded above its baseline and its report in MinIO.
Midway the operator's pod is deleted (`kubectl delete pod`): as docs/operator.md says, it stops on
SIGTERM at once and its replacement carries the run on.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from a2rl.constants import (
    API_GROUP,
    API_VERSION,
    BENCHSUBMISSION_PLURAL,
    COMPONENT_AGENT,
    LABEL_COMPONENT,
    LABEL_RUN_UID,
    RECORDER_DRAIN_MARGIN_S,
)
from a2rl.store.base import ObjectStore
from tests.node.conftest import RELEASE_NS, RealCluster, _log, follow, operator_pod, run_images
from tests.support.grading_support import create_run, layout_of
from tests.support.helm import Helm
from tests.support.operator_support import RESTRICTED
from tests.testenv.controlplane import wait_for
from tests.testenv.node_install import RECORDER_DRAIN_S, image_ref

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

EVAL_LIMIT = 40
#: The reference agent's SFT in two rounds of a fixed number of steps (so that a loaded machine
#: changes how long the run takes, not what the model learns): what tests/e2e/test_cluster_e2e.py's
#: played pods run, and what improves the tiny model (one round of 250 steps does not, at 40 items).
AGENT_ENV = {"AGENT_MAX_ROUNDS": "2", "AGENT_ROUND_MAX_STEPS": "250", "AGENT_FIRST_ROUND_S": "900",
             "AGENT_ROUND_S": "900", "AGENT_EVAL_ESTIMATE_S": "60"}  # fmt: skip
#: An agent that waits and leaves on SIGTERM (PID 1 without a handler would ignore it).
STOPS_ON_SIGTERM = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(3600)"
)


def test_a_benchrun_runs_in_real_containers_to_a_graded_report(
    real_cluster: RealCluster, installed: Helm, store: ObjectStore
) -> None:
    api = real_cluster.admin
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    first_operator = operator_pod(core)
    assert first_operator.spec.node_name == real_cluster.node.name
    ns = real_cluster.namespace(RESTRICTED)
    name = f"arith-{uuid.uuid4().hex[:6]}"
    create_run(
        api,
        ns,
        name,
        agent={
            "command": ["python", "-m", "a2rl_agents.sft_baseline"],
            "env": [{"name": k, "value": v} for k, v in AGENT_ENV.items()],
        },
        budget={"wallTimeSeconds": 2400, "maxSubmissions": 3, "graceSeconds": 15},
        # The node has 2 CPUs: the operator 0.1, the recorder 0.5, the agent 0.9 and an eval pod 0.5
        # (its fetch-heldout init container's), so submissions are scored while the agent runs.
        resources={"cpu": "900m", "memory": "3Gi"},
        evaluation={"backend": "transformers", "cpu": "500m", "memory": "2Gi", "limit": EVAL_LIMIT},
        seed=0,
    )
    follow(api, ns, name, "AgentRunning", timeout=300)

    # `kubectl delete pod` of the operator mid-run: it stops on SIGTERM, its replacement carries on.
    started = time.monotonic()
    core.delete_namespaced_pod(first_operator.metadata.name, RELEASE_NS)

    def operator_pods() -> list[client.V1Pod]:
        return list(core.list_namespaced_pod(RELEASE_NS).items)

    def old_gone() -> bool:
        return all(p.metadata.name != first_operator.metadata.name for p in operator_pods())

    def ready(pod: client.V1Pod) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])

    wait_for(old_gone, timeout=60, interval=0.2, what="the deleted operator pod gone")
    stopped = time.monotonic() - started
    # Once the old pod is gone, a Ready pod is its replacement.
    second = wait_for(lambda: next((p for p in operator_pods() if ready(p)), None), timeout=120, interval=0.5,
                      what="the operator's replacement Ready")  # fmt: skip
    _log(f"[real node] operator pod deleted mid-run: gone in {stopped:.1f}s (SIGTERM handled as PID 1), "
         f"replacement Ready after {time.monotonic() - started:.1f}s")  # fmt: skip
    # kopf stops on SIGTERM: far less than the pod's 30 s grace (PID 1 without a handler waits it out).
    assert stopped < 15

    run = follow(api, ns, name, "Succeeded", timeout=1500)
    uid = run["metadata"]["uid"]
    st = run["status"]
    kinds = run_images(real_cluster, ns, uid)
    assert {image_ref("agent-baselines"), image_ref("recorder"), image_ref("grader")} <= kinds

    # The recorder's drain told its outcome: the container's termination message, in seconds.
    selector = f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}={COMPONENT_AGENT}"
    (pod,) = core.list_namespaced_pod(ns, label_selector=selector).items
    assert pod.spec.termination_grace_period_seconds == 15 + RECORDER_DRAIN_S + RECORDER_DRAIN_MARGIN_S
    (recorder,) = [c for c in pod.status.init_container_statuses if c.name == "recorder"]
    ended = recorder.state.terminated
    _log(f"[real node] {name}: recorder exit {ended.exit_code}: {ended.message!r}")
    assert ended.exit_code == 0 and ended.message.startswith("drained in "), ended
    assert "everything recorded is in the store" in ended.message
    assert float(ended.message.split()[2]) < RECORDER_DRAIN_S

    subs = custom.list_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHSUBMISSION_PLURAL)["items"]
    scores = {s["spec"]["index"]: (s.get("status") or {}).get("score") for s in subs}
    _log(f"[real node] {name}: submissions {scores}; {st.get('report', {}).get('summary')}")
    assert st["baselineScore"] == scores[0] and st["submissionCount"] >= 1
    assert st["bestScore"] > st["baselineScore"], st
    layout = layout_of(run)
    report = store.get_json(f"{layout.report_dir}/report.json")
    assert report["best_score"] == st["bestScore"] and report["baseline_score"] == st["baselineScore"]
    assert second.spec.node_name == real_cluster.node.name


def test_a_namespace_deleted_with_a_running_run_goes_within_the_pods_grace(
    real_cluster: RealCluster, installed: Helm
) -> None:
    """The namespace controller looks again after half the largest grace of the pods it deleted
    (Kubernetes' `pkg/controller/namespace`): the workspace pod's grace, `graceSeconds` + the
    recorder's one drain deadline + 15 s, bounds how long a namespace of running runs takes to go
    when its containers stop on SIGTERM, as this agent does (before: a 1,320 s grace; a namespace
    of 200 runs took 113-273 s)."""
    del installed
    api = real_cluster.admin
    core = client.CoreV1Api(api)
    ns = real_cluster.namespace(RESTRICTED)
    name = f"idle-{uuid.uuid4().hex[:6]}"
    create_run(
        api,
        ns,
        name,
        agent={"command": ["python", "-c", STOPS_ON_SIGTERM]},
        budget={"wallTimeSeconds": 1800, "graceSeconds": 5},
        resources={"cpu": "500m", "memory": "1Gi"},
        evaluation={"backend": "transformers", "cpu": "500m", "memory": "2Gi", "limit": EVAL_LIMIT},
    )
    run = follow(api, ns, name, "AgentRunning", timeout=300)
    selector = f"{LABEL_RUN_UID}={run['metadata']['uid']},{LABEL_COMPONENT}={COMPONENT_AGENT}"
    (pod,) = core.list_namespaced_pod(ns, label_selector=selector).items
    grace = pod.spec.termination_grace_period_seconds
    assert grace == 5 + RECORDER_DRAIN_S + RECORDER_DRAIN_MARGIN_S
    started = time.monotonic()
    core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=grace + 120, interval=0.5, what=f"namespace {ns} gone")
    gone_s = time.monotonic() - started
    _log(f"[real node] namespace {ns} with a running run deleted: gone in {gone_s:.1f}s "
         f"(workspace pod grace {grace}s)")  # fmt: skip
    assert gone_s < grace
