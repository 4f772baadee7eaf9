"""The operator against the real control plane (etcd + kube-apiserver + KCM + scheduler + kwok).

The operator runs as `a2rl operator` in a subprocess, authenticated as its own ServiceAccount
bound to the ClusterRole from `a2rl_operator.rbac` (the Helm chart's rules), never as admin.
kwok plays the kubelet: pods go Running, and the test decides how they end.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import (
    ANNOTATION_TRACE_CONTEXT,
    API_GROUP,
    API_VERSION,
    BENCHRUN_PLURAL,
    ENV_TRACEPARENT,
    FINALIZER,
    LABEL_RUN_UID,
    RECORDER_DRAIN_MARGIN_S,
)
from a2rl.tracing.context import run_traceparent
from tests.support.operator_install import OperatorProcess
from tests.support.operator_support import (
    RESTRICTED,
    condition,
    get_run,
    persistent_volumes,
    started_operator,
    wait_run,
)
from tests.support.pss import restricted_violations
from tests.testenv.controlplane import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

SETUP_ALLOWANCE_S = 2  # the Job deadline is budget + grace + this; small so the deadline test is quick
RECORDER_DRAIN_TIMEOUT_S = 1  # the deadline adds the recorder's drain budget (this + its margin) too
FINALIZER_TIMEOUT_S = 12  # how long retention may hold a deleted run (small: the bound is tested)
STORE_BUCKET, STORE_PREFIX = "a2rl-e2e", "runs"
KOPF_ANNOTATIONS = {f"{API_GROUP}/last-handled-configuration", f"{API_GROUP}/on_benchrun"}


# `admin` is in tests/support/grading_fixtures.py; this module's operator and volumes are its own.


@pytest.fixture(scope="module")
def volumes(admin: client.ApiClient) -> Iterator[None]:
    """Pre-provisioned PersistentVolumes (the test cluster has no dynamic provisioner)."""
    with persistent_volumes(admin, "e2e-ws", 40):
        yield


@pytest.fixture(scope="module")
def operator(
    volumes: None,
    control_plane: Any,
    minio: Any,
    admin: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    args = ["--store-uri", f"s3://{STORE_BUCKET}/{STORE_PREFIX}",
            "--setup-allowance", str(SETUP_ALLOWANCE_S), "--workspace-size", "1Gi",
            "--recorder-drain-timeout", str(RECORDER_DRAIN_TIMEOUT_S),
            "--store-egress", "10.0.0.9/32:9000",
            "--apiserver-egress", "127.0.0.1/32:6443",
            "--finalizer-timeout", str(FINALIZER_TIMEOUT_S)]  # fmt: skip
    env = {"AWS_ENDPOINT_URL": minio.endpoint, "AWS_ACCESS_KEY_ID": minio.access_key,
           "AWS_SECRET_ACCESS_KEY": minio.secret_key}  # fmt: skip
    with started_operator(admin, tmp_path_factory.mktemp("operator"), args, env=env) as proc:
        yield proc


# --- helpers ---------------------------------------------------------------------------------


def spec(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {
            "image": "ghcr.io/a2rl/agent-baselines:0.1.0",
            "command": ["python", "-m", "a2rl_agents.sft"],
        },
        "budget": {"wallTimeSeconds": 3600, "graceSeconds": 5},
        "resources": {"cpu": "1", "memory": "1Gi", "gpus": 1},
    }
    base.update(overrides)
    return base


def create_run(api: client.ApiClient, ns: str, name: str, **overrides: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "BenchRun",
        "metadata": {"name": name},
        "spec": spec(**overrides),
    }
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, body
    )
    return created


def agent_pod(api: client.ApiClient, ns: str, uid: str, timeout: float = 60) -> Any:
    from tests.testenv.controlplane import wait_for

    core = client.CoreV1Api(api)

    def running() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=f"{LABEL_RUN_UID}={uid}").items
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    return wait_for(running, timeout=timeout, what=f"running agent pod of {uid}")


def kubelet_stops_agent_at_budget(api: client.ApiClient, ns: str, pod: Any, ran_s: int) -> None:
    """What the kubelet does when the agent's deadline probe fails (kwok runs no probes): the
    agent container killed (SIGKILL after the grace: 137) after running `ran_s` seconds, the pod
    Failed; the Job controller and the operator take it from there."""
    pod_dict = api.sanitize_for_serialization(pod)
    start = pod_dict["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    t0 = datetime.fromisoformat(start.replace("Z", "+00:00"))
    end = (t0 + timedelta(seconds=ran_s)).isoformat().replace("+00:00", "Z")
    statuses = [
        {**s, "ready": False, "started": False,
         "state": {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": start, "finishedAt": end}}}
        for s in pod_dict["status"]["containerStatuses"]
    ]  # fmt: skip
    body = {"status": {"phase": "Failed", "containerStatuses": statuses}}
    client.CoreV1Api(api).patch_namespaced_pod_status(pod.metadata.name, ns, body)


def events_of(api: client.ApiClient, ns: str, name: str) -> list[tuple[str, str]]:
    items = (
        client.CoreV1Api(api)
        .list_namespaced_event(ns, field_selector=f"involvedObject.kind=BenchRun,involvedObject.name={name}")
        .items
    )
    return [(e.type, e.reason) for e in sorted(items, key=lambda e: e.metadata.creation_timestamp)]


def children_of(api: client.ApiClient, ns: str, uid: str) -> dict[str, list[Any]]:
    sel = f"{LABEL_RUN_UID}={uid}"
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    return {
        "PersistentVolumeClaim": core.list_namespaced_persistent_volume_claim(ns, label_selector=sel).items,
        "ServiceAccount": core.list_namespaced_service_account(ns, label_selector=sel).items,
        "Role": rbac.list_namespaced_role(ns, label_selector=sel).items,
        "RoleBinding": rbac.list_namespaced_role_binding(ns, label_selector=sel).items,
        "NetworkPolicy": client.NetworkingV1Api(api)
        .list_namespaced_network_policy(ns, label_selector=sel)
        .items,
        "Secret": core.list_namespaced_secret(ns, label_selector=sel).items,
        "Job": client.BatchV1Api(api).list_namespaced_job(ns, label_selector=sel).items,
        "Pod": core.list_namespaced_pod(ns, label_selector=sel).items,
    }


def benchrun_table(api: client.ApiClient, ns: str) -> dict[str, Any]:
    """What `kubectl get benchruns` prints: the server-side Table of the CRD's printer columns."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{ns}/{BENCHRUN_PLURAL}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )  # fmt: skip
    resp = api.call_api(method, url, header_params=headers)
    assert resp.status == 200
    table: dict[str, Any] = json.loads(resp.read())
    return table


def format_table(table: dict[str, Any]) -> str:
    cols = [c["name"].upper() for c in table["columnDefinitions"] if c["priority"] == 0]
    idx = [i for i, c in enumerate(table["columnDefinitions"]) if c["priority"] == 0]
    rows = [[("" if r["cells"][i] is None else str(r["cells"][i])) for i in idx] for r in table["rows"]]
    widths = [max(len(x) for x in col) for col in zip(cols, *rows, strict=False)]
    return "\n".join(
        "   ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in [cols, *rows]
    )


def run_name() -> str:
    return f"br-{uuid.uuid4().hex[:6]}"


# --- tests -----------------------------------------------------------------------------------


def test_benchrun_creates_owned_sandboxed_children_and_succeeds(
    operator: OperatorProcess, admin: client.ApiClient, make_namespace: Callable[..., str]
) -> None:
    from tests.testenv.fixtures import complete_pod

    ns = make_namespace(labels=RESTRICTED)
    # Control: the namespace really enforces `restricted` (a root pod is refused).
    bad = {
        "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": "x", "securityContext": {"runAsUser": 0}}]},
    }
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(admin).create_namespaced_pod(ns, bad)
    assert refused.value.status == 403 and "restricted" in str(refused.value.body)

    name = run_name()
    uid = create_run(
        admin,
        ns,
        name,
        agent={"image": "agent:1", "command": ["agent"], "env": [{"name": "FOO", "value": "bar"}]},
    )["metadata"]["uid"]
    run = wait_run(admin, ns, name, "AgentRunning")
    kids = children_of(admin, ns, uid)
    for kind, objs in kids.items():
        assert len(objs) == 1, f"{kind}: {len(objs)}"
        (ref,) = objs[0].metadata.owner_references
        expected_kind, expected_uid = (
            ("Job", kids["Job"][0].metadata.uid) if kind == "Pod" else ("BenchRun", uid)
        )
        assert (ref.kind, ref.uid, ref.controller) == (expected_kind, expected_uid, True)
    pod = kids["Pod"][0]
    pod_dict = admin.sanitize_for_serialization(pod)["spec"]
    assert (
        restricted_violations(pod_dict) == []
    )  # admitted by PodSecurity `restricted`, and our checker agrees
    agent = pod.spec.containers[0]
    assert agent.resources.requests["nvidia.com/gpu"] == "1" == agent.resources.limits["nvidia.com/gpu"]
    assert pod.spec.automount_service_account_token is False
    assert not any(m.name == "runner-token" for m in agent.volume_mounts)
    setup, recorder = pod.spec.init_containers
    assert setup.name == "setup" and setup.restart_policy is None  # runs to completion first
    assert any(m.name == "runner-token" for m in recorder.volume_mounts)
    assert recorder.restart_policy == "Always"
    # The pod's time and storage bounds as the API server stored (and PodSecurity admitted) them.
    probe = agent.liveness_probe
    assert (probe.initial_delay_seconds, probe.termination_grace_period_seconds) == (3600, 5)
    assert pod.spec.termination_grace_period_seconds == 5 + RECORDER_DRAIN_TIMEOUT_S + RECORDER_DRAIN_MARGIN_S
    for c in [*pod.spec.init_containers, *pod.spec.containers]:
        assert c.resources.requests["ephemeral-storage"] == c.resources.limits["ephemeral-storage"]
    assert all(v.empty_dir.size_limit for v in pod.spec.volumes if v.empty_dir is not None)
    assert pod.metadata.annotations["karpenter.sh/do-not-disrupt"] == "true"
    # One trace per run, the one its uid implies (nothing written), and the recorder (only)
    # carries that trace context.
    tp = run_traceparent(run["metadata"])
    assert tp is not None and tp.trace_id == run["metadata"]["uid"].replace("-", "")
    assert ANNOTATION_TRACE_CONTEXT not in (run["metadata"].get("annotations") or {})
    renv = {e.name: e.value for e in recorder.env}
    assert renv[ENV_TRACEPARENT] == str(tp)
    assert ENV_TRACEPARENT not in {e.name for e in agent.env or []}
    job = kids["Job"][0]
    drain = RECORDER_DRAIN_TIMEOUT_S + RECORDER_DRAIN_MARGIN_S
    assert job.spec.active_deadline_seconds == 3600 + 5 + SETUP_ALLOWANCE_S + drain
    assert run["status"]["phase"] == "Running" and run["status"]["startTime"]
    assert run["metadata"]["finalizers"] == [FINALIZER]
    assert all(c["observedGeneration"] == 1 for c in run["status"]["conditions"])
    # kopf keeps no state of its own on a handled run (`kopf_state`): no annotation, no PATCH.
    assert "kopf" not in json.dumps(run["status"])
    # Liveness endpoint of the operator.
    with urllib.request.urlopen(operator.healthz, timeout=5) as resp:
        assert resp.status == 200

    complete_pod(admin, ns, pod.metadata.name, "succeeded")
    run = wait_run(admin, ns, name, "Succeeded", reason="AgentCompleted")
    assert condition(run, "AgentFinished")["reason"] == "Completed"  # type: ignore[index]
    assert condition(run, "AgentRunning")["status"] == "False"  # type: ignore[index]
    assert run["status"]["phase"] == "Succeeded" and run["status"]["completionTime"]
    assert not [k for k in run["metadata"].get("annotations") or {} if k in KOPF_ANNOTATIONS or "kopf" in k]
    # The run's own conditions in the order first set (the GitOps-readable ones, docs/gitops.md,
    # come with Accepted and are left out here).
    gitops = {"Reconciling", "Stalled", "Ready", "Finished", "Succeeded", "Failed"}
    types = [c["type"] for c in run["status"]["conditions"] if c["type"] not in gitops]
    assert types[:2] == ["Accepted", "Admitted"] and "WorkspaceReady" in types
    # One Event: the end the user waits for. The steps (Accepted, PodScheduled, Running, …) are in
    # the conditions only, and no Event lists the children created.
    wait_for(lambda: events_of(admin, ns, name), timeout=20, what="the run's Event")
    time.sleep(1)  # anything else kopf's queue would post
    assert events_of(admin, ns, name) == [("Normal", "AgentCompleted")]
    assert "failed with an exception" not in operator.log_path.read_text(), operator.log_tail()
    table = benchrun_table(admin, ns)
    assert [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0] == [
        "Name", "Task", "Agent", "State", "Submissions", "Best", "Improvement", "Age",
    ]  # fmt: skip
    assert table["rows"][0]["cells"][3] == "Succeeded"
    print("\n" + format_table(table))


def test_agent_failure_and_deadline(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str
) -> None:
    from tests.testenv.fixtures import complete_pod

    failing, late = run_name(), run_name()
    uid = create_run(admin, namespace, failing)["metadata"]["uid"]
    create_run(admin, namespace, late, budget={"wallTimeSeconds": 3, "graceSeconds": 0})
    pod = agent_pod(admin, namespace, uid)
    complete_pod(admin, namespace, pod.metadata.name, "failed", exit_code=3)
    run = wait_run(admin, namespace, failing, "Failed", reason="AgentFailed")
    assert condition(run, "AgentFinished")["reason"] == "Failed"  # type: ignore[index]
    assert run["status"]["phase"] == "Failed"
    # The budget ends by the agent's deadline probe (the pod spec's), not by the Job's deadline.
    late_pod = agent_pod(admin, namespace, get_run(admin, namespace, late)["metadata"]["uid"])
    probe = late_pod.spec.containers[0].liveness_probe
    assert (probe.initial_delay_seconds, probe.termination_grace_period_seconds) == (3, 1)
    kubelet_stops_agent_at_budget(admin, namespace, late_pod, ran_s=4)
    run = wait_run(admin, namespace, late, "AgentFinished", reason="DeadlineExceeded", timeout=60)
    assert condition(run, "Succeeded")["reason"] == "BudgetExhausted"  # type: ignore[index]
    assert "after its 3 s" in condition(run, "AgentFinished")["message"]  # type: ignore[index]
    from tests.testenv.controlplane import wait_for

    wait_for(
        lambda: ("Warning", "AgentFailed") in events_of(admin, namespace, failing),
        timeout=20,
        what="AgentFailed event",
    )
    wait_for(
        lambda: ("Warning", "DeadlineExceeded") in events_of(admin, namespace, late),
        timeout=20,
        what="DeadlineExceeded event",
    )
    print("\n" + format_table(benchrun_table(admin, namespace)))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"budget": {"wallTimeSeconds": 0}}, "spec.budget.wallTimeSeconds"),
        ({"agent": {"command": ["a"], "env": [{"name": "TASK", "value": "x"}]}}, "spec.agent.env"),
        ({"resources": {"gpus": -1}}, "spec.resources.gpus"),
        ({"agent": {"command": ["a"], "workingDir": "../../../etc/x"}}, "spec.agent.workingDir"),
        ({"agent": {"command": ["a"], "workingDir": "/etc"}}, "spec.agent.workingDir"),
    ],
)
def test_invalid_benchrun_is_rejected_by_the_api_server(
    admin: client.ApiClient, operator: OperatorProcess, namespace: str, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as exc:
        create_run(admin, namespace, run_name(), **overrides)
    assert exc.value.status == 422
    assert field in json.loads(exc.value.body)["message"]


def test_unknown_task_is_not_accepted_and_creates_nothing(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str
) -> None:
    name = run_name()
    uid = create_run(admin, namespace, name, task="no-such-task")["metadata"]["uid"]
    run = wait_run(admin, namespace, name, "Accepted", status="False", reason="UnknownTask")
    assert "no-such-task" in condition(run, "Accepted")["message"]  # type: ignore[index]
    assert condition(run, "Failed")["status"] == "True" and run["status"]["phase"] == "Failed"  # type: ignore[index]
    assert all(not objs for objs in children_of(admin, namespace, uid).values())
    from tests.testenv.controlplane import wait_for

    wait_for(
        lambda: ("Warning", "UnknownTask") in events_of(admin, namespace, name),
        timeout=20,
        what="UnknownTask event",
    )


def test_run_serviceaccount_cannot_write_submission_status(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str, control_plane: Any
) -> None:
    name = run_name()
    create_run(admin, namespace, name)
    wait_run(admin, namespace, name, "AgentRunning")  # every child exists (the Job is last)
    runner = f"{name}-runner"
    user = f"system:serviceaccount:{namespace}:{runner}"
    authz = client.AuthorizationV1Api(admin)

    def allowed(verb: str, resource: str, sub: str = "", res_name: str = "") -> bool:
        attrs = {"namespace": namespace, "verb": verb, "group": API_GROUP, "resource": resource,
                 "subresource": sub, "name": res_name}  # fmt: skip
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
        review = {"spec": {"user": user, "groups": groups, "resourceAttributes": attrs}}
        return bool(authz.create_subject_access_review(review).status.allowed)

    assert allowed("create", "benchsubmissions")
    assert allowed("get", "benchruns", res_name=name)
    assert not allowed("update", "benchsubmissions", "status", "s-1")
    assert not allowed("patch", "benchsubmissions", "status", "s-1")
    assert not allowed("update", "benchruns", "status", name)
    assert not allowed("get", "benchruns", res_name="someone-else")
    assert not allowed("update", "benchruns", res_name=name)
    assert not allowed("delete", "benchsubmissions", res_name="s-1")

    # The same with real requests, authenticated with a token of the run's ServiceAccount.
    as_runner = client.CustomObjectsApi(
        control_plane.api_client(control_plane.kubeconfig_for_serviceaccount(namespace, runner, create=False))
    )
    assert as_runner.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL,
                                                  name)["metadata"]["name"] == name  # fmt: skip
    status_body = {"status": {"state": "Succeeded", "score": 100.0}}
    for call in (
        lambda: as_runner.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, namespace, "benchsubmissions", "s-1", status_body),
        lambda: as_runner.replace_namespaced_custom_object_status(
            API_GROUP, API_VERSION, namespace, "benchsubmissions", "s-1",
            {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "BenchSubmission",
             "metadata": {"name": "s-1"}, **status_body}),
        lambda: as_runner.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, name, {"status": {"phase": "Succeeded"}}),
    ):  # fmt: skip
        with pytest.raises(ApiException) as denied:
            call()
        assert denied.value.status == 403 and user in str(denied.value.body)


def test_operator_killed_mid_run_creates_no_duplicates(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str
) -> None:
    from a2rl_operator.config import OperatorConfig
    from a2rl_operator.kube import Kube
    from a2rl_operator.manifests import children

    from tests.testenv.controlplane import wait_for
    from tests.testenv.fixtures import complete_pod

    first, second = run_name(), run_name()
    uid = create_run(admin, namespace, first)["metadata"]["uid"]
    pod = agent_pod(admin, namespace, uid)

    def created(run: str) -> list[str]:
        """What the operator's log says it created for `run` (every start of it: the log appends)."""
        marker = f"BenchRun {namespace}/{run}: created "
        lines = operator.log_path.read_text().splitlines()
        return [line.split(marker, 1)[1] for line in lines if marker in line]

    wait_for(lambda: created(first), timeout=60, what=f"the children of {first}")
    operator.kill()  # SIGKILL mid-run: no clean-up, no finalizer or state written on the way out
    try:
        # Created while no operator runs, and half-reconciled: the killed operator got as far as
        # the first three children (what it would have created, owner references included).
        uid2 = create_run(admin, namespace, second)["metadata"]["uid"]
        config = OperatorConfig(store_uri=f"s3://{STORE_BUCKET}/{STORE_PREFIX}", workspace_size="1Gi")
        partial = children(get_run(admin, namespace, second), config)[:3]
        assert [m["kind"] for m in partial] == ["PersistentVolumeClaim", "ServiceAccount", "Role"]
        for manifest in partial:
            assert Kube(admin).ensure(manifest, uid2)
    finally:
        operator.start()
    pod2 = agent_pod(admin, namespace, uid2)
    # The running run was resumed, not redone: same pod, and nothing created a second time.
    assert agent_pod(admin, namespace, uid).metadata.uid == pod.metadata.uid
    complete_pod(admin, namespace, pod.metadata.name, "succeeded")
    complete_pod(admin, namespace, pod2.metadata.name, "succeeded")
    wait_run(admin, namespace, first, "Succeeded")
    wait_run(admin, namespace, second, "Succeeded")
    for u in (uid, uid2):
        counts = {kind: len(objs) for kind, objs in children_of(admin, namespace, u).items()}
        assert counts == dict.fromkeys(counts, 1), counts
    assert len(created(first)) == 1, created(first)
    # The restarted operator created only what was missing.
    (then,) = created(second)
    assert "Job" in then and "NetworkPolicy" in then
    assert "PersistentVolumeClaim" not in then and "ServiceAccount" not in then


def test_kueue_queue_name_suspends_until_admitted(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str
) -> None:
    name = run_name()
    uid = create_run(admin, namespace, name, queueName="gpu-queue")["metadata"]["uid"]
    run = wait_run(admin, namespace, name, "Queued", reason="WaitingForAdmission")
    assert run["status"]["phase"] == "Queued"
    batch = client.BatchV1Api(admin)
    (job,) = batch.list_namespaced_job(namespace, label_selector=f"{LABEL_RUN_UID}={uid}").items
    assert job.spec.suspend is True and job.metadata.labels["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    # What Kueue does on admission: unsuspend the Job.
    batch.patch_namespaced_job(job.metadata.name, namespace, {"spec": {"suspend": False}})
    wait_run(admin, namespace, name, "Admitted", reason="Admitted")
    wait_run(admin, namespace, name, "AgentRunning")
    assert condition(get_run(admin, namespace, name), "Queued")["status"] == "False"  # type: ignore[index]


def test_three_one_gpu_runs_under_a_two_gpu_resource_quota_without_kueue(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str
) -> None:
    """The Kueue test's three-run case (tests/cluster/test_kueue.py) under a plain ResourceQuota,
    no queue named: two runs get their pods, the third is `Queued` with the quota's own words (not
    failed) and gets its pod once one of the first two has finished."""
    from tests.testenv.controlplane import wait_for
    from tests.testenv.fixtures import complete_pod

    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}
    client.CoreV1Api(admin).create_namespaced_resource_quota(namespace, quota)
    names = [run_name() for _ in range(3)]
    for name in names:
        create_run(admin, namespace, name)  # 1 GPU each, no queueName

    def split() -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        runs = [get_run(admin, namespace, n) for n in names]
        running = [r for r in runs if (condition(r, "AgentRunning") or {}).get("status") == "True"]
        waiting = [r for r in runs if (condition(r, "QuotaExceeded") or {}).get("status") == "True"]
        return (running, waiting[0]) if len(running) == 2 and len(waiting) == 1 else None

    running, queued = wait_for(split, timeout=60, what="two runs running and one held by the quota")
    third = queued["metadata"]["name"]
    message = condition(queued, "QuotaExceeded")["message"]  # type: ignore[index]
    assert "exceeded quota: gpus" in message and "requests.nvidia.com/gpu=1" in message
    cond = condition(queued, "Queued") or {}
    assert (cond.get("status"), cond.get("reason")) == ("True", "ExceededQuota")
    assert cond["message"] == f"waiting for GPU quota: {message}"
    assert queued["status"]["phase"] == "Queued" and condition(queued, "Failed") is None
    assert (condition(queued, "Admitted") or {}).get("reason") == "NotQueued"
    pods = client.CoreV1Api(admin).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_RUN_UID}={queued['metadata']['uid']}"
    )
    assert pods.items == []  # the Job controller could not create it
    # One of the first two ends: its GPU is free, the third gets its pod (the Job controller retries).
    complete_pod(admin, namespace, agent_pod(admin, namespace, running[0]["metadata"]["uid"]).metadata.name)
    wait_run(admin, namespace, running[0]["metadata"]["name"], "Succeeded", timeout=30)
    run = wait_run(admin, namespace, third, "AgentRunning", timeout=90)
    assert (condition(run, "QuotaExceeded") or {}).get("reason") == "QuotaAvailable"
    assert (condition(run, "Queued") or {}).get("status") == "False"
    assert run["status"]["phase"] == "Running"
    wait_for(
        lambda: ("Warning", "ExceededQuota") in events_of(admin, namespace, third),
        timeout=20,
        what="quota event",
    )


def _store(minio: Any) -> Any:
    from minio import Minio

    return Minio(minio.endpoint.removeprefix("http://"), access_key=minio.access_key,
                 secret_key=minio.secret_key, secure=False)  # fmt: skip


def _record_key(ns: str, name: str, uid: str) -> str:
    return f"{STORE_PREFIX}/{ns}/{name}-{uid}/benchrun.json"


def _gone(admin: client.ApiClient, ns: str, name: str) -> bool:
    try:
        get_run(admin, ns, name)
    except ApiException as exc:
        return exc.status == 404
    return False


def _delete_run(admin: client.ApiClient, ns: str, name: str) -> None:
    client.CustomObjectsApi(admin).delete_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name
    )


def _run_keys(admin: client.ApiClient, ns: str, name: str, minio: Any) -> Any:
    """A client with the keys of the run's `<run>-store` Secret (what its recorder gets)."""
    import base64

    from minio import Minio

    data = client.CoreV1Api(admin).read_namespaced_secret(f"{name}-store", ns).data
    key, secret = (base64.b64decode(data[k]).decode() for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
    return key, Minio(minio.endpoint.removeprefix("http://"), access_key=key, secret_key=secret, secure=False)


def test_deletion_keeps_the_final_record_and_cascades_to_children(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str, minio: Any
) -> None:
    """Also: the recorder's store keys are the run's own, limited to its prefix (a held-out
    artifact in the same bucket is refused), and they die with the run (the finalizer)."""
    import io

    from minio.error import S3Error

    from tests.testenv.controlplane import wait_for

    name = run_name()
    uid = create_run(admin, namespace, name)["metadata"]["uid"]
    agent_pod(admin, namespace, uid)
    run = wait_run(admin, namespace, name, "AgentRunning")
    heldout = f"{STORE_PREFIX}/data/arith/1-seed0/heldout/heldout.jsonl"
    _store(minio).put_object(STORE_BUCKET, heldout, io.BytesIO(b"gold"), 4)
    user, keys = _run_keys(admin, namespace, name, minio)
    assert user != minio.access_key and run["metadata"]["annotations"]["a2rl.dev/store-user"] == user
    own = f"{STORE_PREFIX}/{namespace}/{name}-{uid}/clock.json"
    keys.put_object(STORE_BUCKET, own, io.BytesIO(b"{}"), 2)
    assert keys.get_object(STORE_BUCKET, own).read() == b"{}"
    poison = f"{STORE_PREFIX}/baselines/x.json"
    for denied in (
        lambda: keys.get_object(STORE_BUCKET, heldout),
        lambda: list(keys.list_objects(STORE_BUCKET, f"{STORE_PREFIX}/data/", recursive=True)),
        lambda: keys.put_object(STORE_BUCKET, poison, io.BytesIO(b"1"), 1),
    ):
        with pytest.raises(S3Error) as refused:
            denied()
        assert refused.value.code == "AccessDenied"
    assert ("Warning", "StoreCredentialsNotScoped") not in events_of(admin, namespace, name)
    _delete_run(admin, namespace, name)
    wait_for(lambda: _gone(admin, namespace, name), timeout=30, what="BenchRun deleted (finalizer released)")
    with pytest.raises(S3Error) as removed:  # the run's user went with the run
        keys.get_object(STORE_BUCKET, own)
    assert removed.value.code == "InvalidAccessKeyId"
    # Retention: the final record (with the conditions up to the deletion) is in the store.
    record = json.loads(_store(minio).get_object(STORE_BUCKET, _record_key(namespace, name, uid)).read())
    assert record["metadata"]["uid"] == uid and record["metadata"]["deletionTimestamp"]
    assert record["spec"]["task"] == "arith"
    assert {c["type"] for c in record["status"]["conditions"]} >= {"Accepted", "AgentRunning"}
    wait_for(
        lambda: all(not objs for objs in children_of(admin, namespace, uid).values()),
        timeout=60,
        what="children collected",
    )


def test_finalizer_is_bounded_and_has_an_escape_annotation(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str, minio: Any
) -> None:
    """Retention fails while the store is down: the finalizer holds the run, but not forever."""
    import time

    from tests.testenv.controlplane import wait_for

    forced, bounded = run_name(), run_name()
    uids = {n: create_run(admin, namespace, n)["metadata"]["uid"] for n in (forced, bounded)}
    for n in (forced, bounded):
        wait_run(admin, namespace, n, "Accepted")
    minio.stop()
    try:
        deleted_at = time.monotonic()
        for n in (forced, bounded):
            _delete_run(admin, namespace, n)
        time.sleep(4)  # retention is failing and retried: both are held by the finalizer
        for n in (forced, bounded):
            run = get_run(admin, namespace, n)
            assert run["metadata"]["deletionTimestamp"] and run["metadata"]["finalizers"] == [FINALIZER]
        client.CustomObjectsApi(admin).patch_namespaced_custom_object(
            API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, forced,
            {"metadata": {"annotations": {"a2rl.dev/force-finalize": "true"}}},
        )  # fmt: skip
        wait_for(lambda: _gone(admin, namespace, forced), timeout=15, what="forced release")
        assert not _gone(admin, namespace, bounded), "released before the timeout without the annotation"
        wait_for(lambda: _gone(admin, namespace, bounded), timeout=FINALIZER_TIMEOUT_S + 20,
                 what="release after the finalizer timeout")  # fmt: skip
        assert time.monotonic() - deleted_at >= FINALIZER_TIMEOUT_S - 1
    finally:
        minio.start()
    store = _store(minio)
    for n, uid in uids.items():  # no retention while the store was down; the operator's spans wait for it
        run_dir = f"{STORE_PREFIX}/{namespace}/{n}-{uid}/"
        kept = [o.object_name for o in store.list_objects(STORE_BUCKET, prefix=run_dir, recursive=True)]
        assert all(k.startswith(f"{run_dir}traces/") for k in kept), kept
    wait_for(
        lambda: all(not objs for u in uids.values() for objs in children_of(admin, namespace, u).values()),
        timeout=60,
        what="children collected",
    )
