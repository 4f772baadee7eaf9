"""The real test environment works: API server, scheduler, job controller, kwok stages,
PodSecurity admission, RBAC, and MinIO."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.testenv.controlplane import GPU_RESOURCE, ControlPlane, MinioServer
from tests.testenv.fixtures import complete_pod, wait_for, wait_for_pod_phase

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()


def _job(name: str, gpus: int = 1, sidecar: bool = False) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "example.invalid/trainer:1",
        "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
    }
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if sidecar:
        spec["initContainers"] = [
            {"name": "recorder", "image": "example.invalid/recorder:1", "restartPolicy": "Always"}
        ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": spec}},
    }


def _job_pod(core: client.CoreV1Api, ns: str, job: str) -> Any:
    def one_pod() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
        return pods[0] if len(pods) == 1 else None

    return wait_for(one_pod, timeout=30, what=f"the pod of job {job}")


def _job_condition(batch: client.BatchV1Api, ns: str, job: str, kind: str) -> Callable[[], bool]:
    def has() -> bool:
        conds = batch.read_namespaced_job(job, ns).status.conditions or []
        return any(c.type == kind and c.status == "True" for c in conds)

    return has


def test_api_server_answers_with_pinned_version(api: client.ApiClient) -> None:
    info = client.VersionApi(api).get_code()
    assert info.git_version == "v1.36.3"
    assert client.CoreV1Api(api).read_namespace("default").metadata.name == "default"


def test_kwok_nodes_advertise_gpus(api: client.ApiClient) -> None:
    nodes = client.CoreV1Api(api).list_node().items
    gpu_nodes = [n for n in nodes if n.status.allocatable.get(GPU_RESOURCE) == "8"]
    assert len(gpu_nodes) >= 2
    for node in gpu_nodes:
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"


def test_add_node(control_plane: ControlPlane, api: client.ApiClient) -> None:
    control_plane.add_node("kwok-cpu-extra", cpu="4", memory="8Gi", gpus=0)
    core = client.CoreV1Api(api)
    node = wait_for(
        lambda: next((n for n in [core.read_node("kwok-cpu-extra")] if n.status.conditions), None),
        timeout=30,
    )
    assert node.status.allocatable["cpu"] == "4"
    assert node.status.allocatable[GPU_RESOURCE] == "0"
    core.delete_node("kwok-cpu-extra")


@pytest.mark.parametrize("sidecar", [False, True], ids=["plain", "native-sidecar"])
def test_job_completes_only_when_test_says_so(api: client.ApiClient, namespace: str, sidecar: bool) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, _job("train", gpus=2, sidecar=sidecar))
    pod = _job_pod(core, namespace, "train")
    pod = wait_for_pod_phase(core, namespace, pod.metadata.name, ("Running",))
    assert pod.spec.node_name.startswith("kwok-gpu-"), "scheduled by kube-scheduler onto a kwok GPU node"

    time.sleep(2)  # nothing completes the pod on its own
    assert core.read_namespaced_pod(pod.metadata.name, namespace).status.phase == "Running"
    assert not _job_condition(batch, namespace, "train", "Complete")()

    complete_pod(api, namespace, pod.metadata.name, "succeeded")
    wait_for(_job_condition(batch, namespace, "train", "Complete"), timeout=60, what="Job Complete")
    assert batch.read_namespaced_job("train", namespace).status.succeeded == 1


def test_failed_pod_fails_the_job(api: client.ApiClient, namespace: str) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, _job("doomed"))
    pod = _job_pod(core, namespace, "doomed")
    wait_for_pod_phase(core, namespace, pod.metadata.name, ("Running",))

    complete_pod(api, namespace, pod.metadata.name, "failed", exit_code=3)
    wait_for(_job_condition(batch, namespace, "doomed", "Failed"), timeout=60, what="Job Failed")
    pod = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


def test_gpu_requests_beyond_capacity_stay_pending(api: client.ApiClient, namespace: str) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, _job("too-big", gpus=64))
    pod = _job_pod(core, namespace, "too-big")

    def unschedulable() -> bool:
        conds = core.read_namespaced_pod(pod.metadata.name, namespace).status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conds)

    wait_for(unschedulable, timeout=30, what="scheduler to report Unschedulable")


def test_pod_security_admission_rejects_privileged_pod(
    api: client.ApiClient, make_namespace: Callable[..., str]
) -> None:
    ns = make_namespace(labels={"pod-security.kubernetes.io/enforce": "restricted"})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {
            "containers": [
                {"name": "c", "image": "example.invalid/x:1", "securityContext": {"privileged": True}}
            ]
        },
    }
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).create_namespaced_pod(ns, pod)
    assert err.value.status == 403
    assert "violates PodSecurity" in err.value.body


def test_rbac_denies_unprivileged_serviceaccount(control_plane: ControlPlane, namespace: str) -> None:
    kubeconfig = control_plane.kubeconfig_for_serviceaccount(namespace, "nobody")
    sa_api = control_plane.api_client(kubeconfig)
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(sa_api).list_namespaced_pod(namespace)
    assert err.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in err.value.body

    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:nobody",
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb="create", group="batch", resource="jobs"
            ),
        )
    )
    result = client.AuthorizationV1Api(control_plane.api_client()).create_subject_access_review(review)
    assert result.status.allowed is False


def test_rbac_allows_after_rolebinding(control_plane: ControlPlane, namespace: str) -> None:
    admin = control_plane.api_client()
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    sa_api = control_plane.api_client(control_plane.kubeconfig_for_serviceaccount(namespace, "reader"))
    assert client.CoreV1Api(sa_api).list_namespaced_pod(namespace).items == []


@pytest.mark.minio
def test_minio_put_get_survives_restart(minio: MinioServer) -> None:
    from minio import Minio

    def s3() -> Minio:
        return Minio(
            minio.endpoint.removeprefix("http://"),
            access_key=minio.access_key,
            secret_key=minio.secret_key,
            secure=False,
        )

    store = s3()
    store.make_bucket("testenv")
    payload = b"hello from a2rl" * 100
    store.put_object("testenv", "dir/obj.bin", io.BytesIO(payload), len(payload))
    assert store.get_object("testenv", "dir/obj.bin").read() == payload

    port = minio.port
    minio.stop()
    assert not minio.is_up()
    minio.start()
    assert minio.port == port
    assert s3().get_object("testenv", "dir/obj.bin").read() == payload


def test_warm_cache_does_not_run_go(
    testenv_binaries: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.testenv import build

    def no_go() -> str:
        raise AssertionError("the Go toolchain was called although every binary is built")

    monkeypatch.setattr(build, "go_binary", no_go)
    logged: list[str] = []
    assert build.missing() == []
    assert build.ensure_built(log=logged.append) == testenv_binaries
    assert logged == []


def test_kubebuilder_assets_supply_etcd_and_apiserver(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.testenv import build

    for name in ("etcd", "kube-apiserver"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    paths = build.binary_paths()
    assert paths["etcd"] == tmp_path / "etcd" and paths["kube-apiserver"] == tmp_path / "kube-apiserver"
    assert paths["kwok"] == build.bin_dir() / "kwok"
    assert not {c.name for c in build.missing()} & {"etcd", "kube-apiserver"}
    # An incomplete envtest folder is ignored: both come from our build then.
    (tmp_path / "etcd").unlink()
    assert build.binary_paths()["kube-apiserver"] == build.bin_dir() / "kube-apiserver"
