"""GPU quota through real Kueue (v0.17.1, `tests/testenv/kueue.py`) beside the real control plane,
with the operator (grading on) as its own ServiceAccount.

Three runs of one GPU each against the ClusterQueue's two: Kueue admits two, the third waits
with Kueue's own reason in its `Queued` condition and is admitted once one of the others ends,
every clock of its budget starting after that admission; the eval and report Jobs of a run go
through the same queue, with the run's priority. A higher-priority run preempts a lower one,
which is never `Running` while evicted and ends `Failed`/`Preempted` through the normal end of a
run, Kueue never starting it again. A run asking for a resource its ClusterQueue lacks is named by
Kueue's reason and ends `NotScheduled` at the operator's queueing limit. kwok plays the
kubelet: the tests decide when pods end. Its wall time: docs/testenv.md ("Measurements").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from a2rl.constants import (
    ENV_QUEUE_TIMEOUT,
    LABEL_COMPONENT,
    LABEL_KUEUE_PRIORITY,
    LABEL_KUEUE_QUEUE,
    LABEL_RUN_UID,
)
from a2rl.store.base import ObjectStore
from tests.support.grading_fixtures import grading_operator
from tests.support.grading_support import (
    create_run,
    finish_pod,
    layout_of,
    play,
    record_submission,
    run_name,
    running_pod,
    submit,
    wait_state,
)
from tests.support.operator_install import OperatorProcess
from tests.support.operator_support import condition, get_run, wait_run
from tests.testenv.kueue import FLAVOR_NODE_LABELS, KueueServer, cluster_queue, workload_priority_class

pytestmark = [pytest.mark.cluster, pytest.mark.minio, pytest.mark.kueue]

PRIORITY = "a2rl-normal"
QUOTA_MESSAGE = "insufficient unused quota for nvidia.com/gpu"
#: The operator's queueing limit: well above the other tests' waits (seconds), and the last test's
#: run waits for it from the module's start, beside them (`unschedulable`).
QUEUE_TIMEOUT_S = 25
MISSING = "resource example.com/tpu unavailable in ClusterQueue"


@pytest.fixture(scope="module")
def operator(
    kueue: KueueServer,
    volumes: None,
    store: ObjectStore,
    admin: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The grading operator (tests/support/grading_fixtures.py) with the queueing limit, started
    once Kueue's CRDs exist."""
    with grading_operator(admin, tmp_path_factory, {ENV_QUEUE_TIMEOUT: str(QUEUE_TIMEOUT_S)}) as proc:
        yield proc


@pytest.fixture(scope="module")
def unschedulable(
    operator: OperatorProcess, kueue: KueueServer, control_plane: Any, admin: client.ApiClient
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(namespace, name, the run as first seen waiting) of a run asking for a resource the default
    ClusterQueue lacks, created when the module starts so that its wait for the queueing limit
    runs beside the other tests."""
    from tests.testenv.controlplane import wait_for

    ns, name = f"t-{uuid.uuid4().hex[:8]}", run_name()
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    control_plane.create("/api/v1/namespaces", body)
    wait_for(lambda: control_plane.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), timeout=30)
    tpu = {"cpu": "1", "memory": "1Gi", "gpus": 1, "gpuResourceName": "example.com/tpu"}
    create_run(admin, ns, name, queueName=kueue.local_queue(ns), resources=tpu)

    def named() -> dict[str, Any] | None:
        run = get_run(admin, ns, name)
        return run if MISSING in (condition(run, "Queued") or {}).get("message", "") else None

    waiting = wait_for(named, timeout=30, what="the missing resource named in the run's Queued condition")
    yield ns, name, waiting
    control_plane.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture(scope="module")
def priority(kueue: KueueServer) -> Iterator[str]:
    kueue.apply(workload_priority_class(PRIORITY, 100))
    yield PRIORITY


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def workload_of(kueue: KueueServer, ns: str, job_uid: str) -> dict[str, Any] | None:
    found = [
        w for w in kueue.workloads(ns) if w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == job_uid
    ]
    return found[0] if found else None


def kueue_condition(workload: dict[str, Any] | None, type_: str) -> str | None:
    conds = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conds if c["type"] == type_), None)


def job_of(admin: client.ApiClient, ns: str, name: str) -> Any:
    return client.BatchV1Api(admin).read_namespaced_job(name, ns)


def admitted_through_kueue(
    admin: client.ApiClient, kueue: KueueServer, ns: str, job_name: str
) -> dict[str, Any]:
    """The Job's Workload once Kueue admitted it (and so unsuspended the Job)."""
    from tests.testenv.controlplane import wait_for

    def admitted() -> dict[str, Any] | None:
        job = job_of(admin, ns, job_name)
        workload = workload_of(kueue, ns, job.metadata.uid)
        return workload if kueue_condition(workload, "Admitted") == "True" and not job.spec.suspend else None

    found: dict[str, Any] = wait_for(admitted, timeout=30, what=f"Kueue to admit Job {job_name}")
    return found


@pytest.mark.usefixtures("unschedulable")
def test_three_one_gpu_runs_share_two_gpus_and_every_job_goes_through_the_queue(
    operator: OperatorProcess,
    admin: client.ApiClient,
    kueue: KueueServer,
    kueue_queue: str,
    priority: str,
    namespace: str,
    store: ObjectStore,
    tmp_path: Path,
) -> None:
    from tests.testenv.controlplane import wait_for
    from tests.testenv.fixtures import complete_pod

    ns, core = namespace, client.CoreV1Api(admin)
    names = [run_name() for _ in range(3)]
    for name in names:
        create_run(admin, ns, name, queueName=kueue_queue, priorityClassName=priority,
                   resources={"cpu": "1", "memory": "1Gi", "gpus": 1},
                   evaluation={"cpu": "1", "memory": "1Gi", "limit": 4})  # fmt: skip

    def split() -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        runs = [get_run(admin, ns, n) for n in names]
        running = [r for r in runs if (condition(r, "AgentRunning") or {}).get("status") == "True"]
        waiting = [r for r in runs if QUOTA_MESSAGE in (condition(r, "Queued") or {}).get("message", "")]
        return (running, waiting[0]) if len(running) == 2 and len(waiting) == 1 else None

    running, queued = wait_for(split, timeout=45, what="two runs running and one queued by Kueue")
    # The third waits, in Kueue's words, not failed; its Job suspended with a Workload not admitted.
    third = queued["metadata"]["name"]
    cond = condition(queued, "Queued")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "WaitingForAdmission"
    assert cond["message"].startswith(f"waiting for Kueue to admit the workspace Job (queue {kueue_queue}): ")
    assert queued["status"]["phase"] == "Queued" and condition(queued, "Failed") is None
    assert (condition(queued, "Admitted") or {}).get("status") == "False"
    job = job_of(admin, ns, f"{third}-workspace")
    assert job.spec.suspend is True
    assert (
        job.metadata.labels[LABEL_KUEUE_QUEUE] == kueue_queue
        and job.metadata.labels[LABEL_KUEUE_PRIORITY] == priority
    )
    assert kueue_condition(workload_of(kueue, ns, job.metadata.uid), "QuotaReserved") == "False"
    # The admitted ones: Kueue put its flavor's node labels into the pod, at the class's priority.
    for run in running:
        assert run["status"]["phase"] == "Running"
        assert (condition(run, "Admitted") or {}).get("reason") == "Admitted"
        wjob = job_of(admin, ns, f"{run['metadata']['name']}-workspace")
        workload = workload_of(kueue, ns, wjob.metadata.uid)
        assert workload is not None and workload["spec"]["priority"] == 100
        assert workload["spec"]["priorityClassRef"]["name"] == priority
        (pod,) = core.list_namespaced_pod(
            ns, label_selector=f"{LABEL_RUN_UID}={run['metadata']['uid']}"
        ).items
        assert FLAVOR_NODE_LABELS.items() <= (pod.spec.node_selector or {}).items()

    # An eval Job of a running run: created suspended in the queue, admitted by Kueue.
    first = running[0]
    name = first["metadata"]["name"]
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    submit(admin, record_submission(store, first, 1, model))
    wait_state(admin, ns, f"{name}-00001", "Evaluating")
    eval_workload = admitted_through_kueue(admin, kueue, ns, f"{name}-eval-00001")
    assert eval_workload["spec"]["priorityClassRef"]["name"] == priority
    eval_job = job_of(admin, ns, f"{name}-eval-00001")
    assert eval_job.metadata.labels[LABEL_KUEUE_QUEUE] == kueue_queue

    def pod_of(job_name: str) -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={job_name}").items
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    eval_pod = wait_for(lambda: pod_of(f"{name}-eval-00001"), timeout=30, what="the eval pod running")
    # The run ends: its agent finishes, the evaluation fails (no result), the report Job queues too.
    (agent_pod,) = core.list_namespaced_pod(
        ns, label_selector=f"{LABEL_RUN_UID}={first['metadata']['uid']},{LABEL_COMPONENT}=agent"
    ).items
    complete_pod(admin, ns, agent_pod.metadata.name, "succeeded")
    complete_pod(admin, ns, eval_pod.metadata.name, "failed")
    wait_state(admin, ns, f"{name}-00001", "Failed")
    report_workload = admitted_through_kueue(admin, kueue, ns, f"{name}-report")
    assert report_workload["spec"]["priorityClassRef"]["name"] == priority

    # Its GPU is free: Kueue admits the third run, which runs.
    run = wait_run(admin, ns, third, "AgentRunning", timeout=30)
    assert (condition(run, "Queued") or {}).get("status") == "False"
    assert (condition(run, "Admitted") or {}).get("reason") == "Admitted"
    assert run["status"]["phase"] == "Running"
    # Its full budget, whatever the wait: every clock of it starts at the admission, not at creation.
    run = wait_for(lambda: (r := get_run(admin, ns, third))["status"].get("queueWaitSeconds") and r,
                   timeout=20, what="the third run's queue wait")  # fmt: skip
    waited = run["status"]["queueWaitSeconds"]
    job = job_of(admin, ns, f"{third}-workspace")
    workload = workload_of(kueue, ns, job.metadata.uid) or {}
    admitted_at = at(next(c["lastTransitionTime"] for c in workload["status"]["conditions"]
                          if c["type"] == "Admitted"))  # fmt: skip
    created = job.metadata.creation_timestamp
    assert waited >= 1 and (admitted_at - created).total_seconds() >= waited - 1
    # The Job's deadline (activeDeadlineSeconds) counts from its status.startTime, which Kubernetes
    # sets when Kueue unsuspends it; the agent's clock (status.startTime: its container's start;
    # the submission deadline is that + wallTimeSeconds) and its deadline probe (initialDelaySeconds
    # = the budget, from the container's start) start later still.
    assert job.status.start_time >= admitted_at and job.spec.active_deadline_seconds > 3600
    assert at(run["status"]["startTime"]) >= admitted_at >= created + timedelta(seconds=waited - 1)
    (agent_pod,) = core.list_namespaced_pod(
        ns, label_selector=f"{LABEL_RUN_UID}={run['metadata']['uid']},{LABEL_COMPONENT}=agent"
    ).items
    agent = next(c for c in agent_pod.spec.containers if c.name == "agent")
    assert agent.liveness_probe.initial_delay_seconds == run["spec"]["budget"]["wallTimeSeconds"]
    assert "failed with an exception" not in operator.log_path.read_text(), operator.log_tail()


def test_a_higher_priority_run_preempts_a_lower_one_which_ends_preempted_and_never_runs_again(
    operator: OperatorProcess,
    admin: client.ApiClient,
    kueue: KueueServer,
    namespace: str,
    store: ObjectStore,
    tmp_path: Path,
) -> None:
    """Its own ClusterQueue (2 GPUs, lower priority preemptible): the first test's runs may still
    hold the default queue's quota while their namespace goes. The victim's agent had started:
    its run ends `Failed`/`Preempted` through the normal end of a run (run.json, the report), its
    Workload deactivated, so Kueue never starts it again, even once the GPUs are free."""
    from tests.testenv.controlplane import wait_for
    from tests.testenv.fixtures import complete_pod

    ns, core = namespace, client.CoreV1Api(admin)
    kueue.apply(cluster_queue("a2rl-preempt"))
    queue = kueue.local_queue(ns, "preempt", "a2rl-preempt")
    kueue.apply(workload_priority_class("a2rl-low", 10))
    kueue.apply(workload_priority_class("a2rl-high", 1000))
    gpu = {"cpu": "1", "memory": "1Gi", "gpus": 1}
    low = [run_name(), run_name()]
    for name in low:
        create_run(admin, ns, name, queueName=queue, priorityClassName="a2rl-low", resources=gpu)
    for name in low:
        wait_run(admin, ns, name, "AgentRunning", timeout=30)
    high = run_name()
    create_run(admin, ns, high, queueName=queue, priorityClassName="a2rl-high", resources=gpu)
    seen: list[dict[str, Any]] = []  # every state of the low runs seen while waiting

    def preempted() -> dict[str, Any] | None:
        for name in low:
            r = get_run(admin, ns, name)
            seen.append(r)
            if (condition(r, "AgentFinished") or {}).get("reason") == "Preempted":
                return r
        return None

    victim = wait_for(preempted, timeout=30, what="a low-priority run preempted")
    wait_run(admin, ns, high, "AgentRunning", timeout=30)  # the high-priority run runs
    name, uid = victim["metadata"]["name"], victim["metadata"]["uid"]
    # Never Running while evicted: the run ends (Grading, then Failed), its agent's time said.
    assert victim["status"]["phase"] in ("Grading", "Failed")
    finished = condition(victim, "AgentFinished") or {}
    assert finished["status"] == "True" and "evicted by Kueue after the agent ran" in finished["message"]
    assert "Preempted" in finished["message"] and victim["status"]["startTime"]
    for type_ in ("AgentRunning", "WorkspaceReady", "Admitted", "Queued"):
        assert (condition(victim, type_) or {}).get("status") == "False", type_
    for r in seen:
        running = (condition(r, "AgentRunning") or {}).get("status") == "True"
        assert r["status"].get("phase") != "Running" or running, r["status"]
    # Kueue will never start it again: its Workload deactivated, its Job suspended.
    job = job_of(admin, ns, f"{name}-workspace")
    evicted_at = next(c.last_transition_time for c in job.status.conditions if c.type == "Suspended")
    wait_for(lambda: (workload_of(kueue, ns, job.metadata.uid) or {}).get("spec", {}).get("active") is False,
             timeout=20, what="the victim's Workload deactivated")  # fmt: skip
    wait_for(
        lambda: get_run(admin, ns, name)["status"].get("evictions") == 1, timeout=20, what="evictions: 1"
    )
    # The normal end of a run: run.json says preempted, how long the agent ran and how it queued.
    run = wait_run(admin, ns, name, "Graded", "False", "Reporting", timeout=30)
    layout = layout_of(run)
    run_json = store.get_json(layout.run_json)
    assert run_json["end_reason"] == "preempted" and run_json["evictions"] == 1
    assert run_json["queue_wait_seconds"] >= 0 and run_json["started_at"] and run_json["ended_at"]
    rpod = running_pod(admin, ns, f"batch.kubernetes.io/job-name={name}-report")
    reported = play(admin, rpod, "report", {"/tmp": tmp_path / "report-scratch"})
    assert reported.returncode == 0, reported.stderr
    finish_pod(admin, rpod, reported)
    run = wait_run(admin, ns, name, "Failed", reason="Preempted", timeout=30)
    assert (
        run["status"]["phase"] == "Failed"
        and (condition(run, "Graded") or {}).get("reason") == "ReportWritten"
    )
    headline = store.get_json(f"{layout.report_dir}/report.json")["headline"]
    assert (headline["end_reason"], headline["evictions"]) == ("preempted", 1)
    assert "| Queue | waited " in store.get_bytes(f"{layout.report_dir}/report.md").decode()

    # The high-priority run ends and its GPU is free: a new low-priority run is admitted and runs,
    # the preempted one stays stopped (no pod created after its eviction, its Job suspended).
    high_uid = get_run(admin, ns, high)["metadata"]["uid"]
    (pod,) = core.list_namespaced_pod(
        ns, label_selector=f"{LABEL_RUN_UID}={high_uid},{LABEL_COMPONENT}=agent"
    ).items
    complete_pod(admin, ns, pod.metadata.name, "succeeded")
    probe = run_name()
    create_run(admin, ns, probe, queueName=queue, priorityClassName="a2rl-low", resources=gpu)
    wait_run(admin, ns, probe, "AgentRunning", timeout=30)
    pods = core.list_namespaced_pod(ns, label_selector=f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent").items
    assert all(p.metadata.creation_timestamp < evicted_at for p in pods), [p.metadata.name for p in pods]
    assert job_of(admin, ns, f"{name}-workspace").spec.suspend is True
    assert get_run(admin, ns, name)["status"]["phase"] == "Failed"
    assert "failed with an exception" not in operator.log_path.read_text(), operator.log_tail()


def test_a_run_kueue_cannot_admit_names_the_missing_resource_and_fails_not_scheduled_at_the_limit(
    admin: client.ApiClient, kueue: KueueServer, unschedulable: tuple[str, str, dict[str, Any]]
) -> None:
    """A run asking for a resource its ClusterQueue lacks waits with Kueue's reason; at the
    operator's queueing limit it ends `Failed` (`NotScheduled`) and Kueue will never start it."""
    ns, name, waiting = unschedulable
    queued = condition(waiting, "Queued") or {}
    assert (queued.get("status"), queued.get("reason")) == ("True", "WaitingForAdmission")
    assert queued["message"].endswith(f"couldn't assign flavors to pod set main: {MISSING}")
    assert waiting["status"]["phase"] == "Queued" and condition(waiting, "Failed") is None
    run = wait_run(admin, ns, name, "Failed", reason="NotScheduled", timeout=QUEUE_TIMEOUT_S + 30)
    message = (condition(run, "Failed") or {}).get("message", "")
    assert message.startswith(f"not admitted by Kueue within the queueing limit ({QUEUE_TIMEOUT_S} s)")
    assert MISSING in message and run["status"]["phase"] == "Failed"
    assert (condition(run, "Queued") or {}).get("reason") == "NotScheduled"
    assert (condition(run, "Graded") or {}).get("reason") == "NotScheduled"
    # Kueue will never start it: its Workload deactivated, its Job still suspended.
    job = job_of(admin, ns, f"{name}-workspace")
    workload = workload_of(kueue, ns, job.metadata.uid)
    assert workload is not None and workload["spec"]["active"] is False
    assert job.spec.suspend is True
