"""What installing a2rl on the test environment's real node takes, as manifests and chart values
(pure functions): local PersistentVolumes for the workspace PVCs, the store Secret, and the
chart's values for the project's own images and MinIO on the host. The real-node e2e
(tests/node) and `make cluster-demo` (hack/cluster-demo) apply the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from a2rl.stacks import STACKS
from tests.testenv import hostnet
from tests.testenv.node import NODE_LABEL

STORAGE_CLASS = "a2rl-local"
STORE_SECRET = "a2rl-store"
#: The recorders' drain timeout in the tier's install (the chart's default is 60 s).
RECORDER_DRAIN_S = 30
REGISTRY, TAG = "ghcr.io/a2rl", "0.1.0"
#: The images a BenchRun of the reference agents runs on the node (`make node-images` builds them,
#: their bases and STACK_IMAGES).
NODE_IMAGES = ("operator", "recorder", "grader", "agent-baselines")
#: The agent stack the real-node tier also runs (its gateway pod and the stack's own image).
NODE_STACK = "claude-code"
STACK_IMAGES = (f"agent-{NODE_STACK}",)
POD_KINDS = ("workspace", "eval", "report", "gateway")


def image_ref(name: str) -> str:
    """The reference of one of the project's images: a stack's is tagged with the stack's version."""
    stack = STACKS.get(name.removeprefix("agent-"))
    return stack.image() if stack is not None else f"{REGISTRY}/{name}:{TAG}"


def local_volumes(node: str, folders: list[Path], size: str = "5Gi") -> list[dict[str, Any]]:
    """A StorageClass without a provisioner and one local PV per folder on `node`: the PV controller
    binds a workspace PVC to one once its pod is scheduled (WaitForFirstConsumer), and the kubelet
    gives the folder to the pod's fsGroup."""
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}  # fmt: skip
    objects: list[dict[str, Any]] = [{
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }]  # fmt: skip
    for i, folder in enumerate(folders):
        objects.append({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{STORAGE_CLASS}-{i}"},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": STORAGE_CLASS,
                "local": {"path": str(folder)},
                "nodeAffinity": affinity,
            },
        })  # fmt: skip
    return objects


def store_secret(endpoint: str, access_key: str, secret_key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": STORE_SECRET},
        "stringData": {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
        },
    }


def chart_values(store_uri: str, minio_port: int, apiserver_port: int, *, pin: bool) -> dict[str, Any]:
    """The chart's values for the real node: the project's images as built here (never pulled), MinIO
    and the API server on the host's end of the node's link; with `pin`, the operator and every
    pod it makes go to the real node (beside kwok nodes, which run nothing)."""
    values: dict[str, Any] = {
        "operator": {"image": {"repository": image_ref("operator").rsplit(":", 1)[0], "pullPolicy": "Never"}},
        "store": {
            "uri": store_uri,
            "credentialsSecret": STORE_SECRET,
            "egress": [f"{hostnet.HOST_IP}/32:{minio_port}"],
        },
        "apiServer": {"egress": [f"{hostnet.HOST_IP}/32:{apiserver_port}"]},
        "grading": {"graderImage": image_ref("grader"), "drainTimeoutSeconds": 120},
        "recorder": {
            "image": image_ref("recorder"),
            "setupImage": image_ref("grader"),
            "drainTimeoutSeconds": RECORDER_DRAIN_S,
        },
        "workspace": {"size": "1Gi", "storageClass": STORAGE_CLASS, "setupAllowanceSeconds": 300},
    }
    if pin:
        key, value = NODE_LABEL
        values["operator"]["nodeSelector"] = {key: value}
        values["podDefaults"] = {kind: {"nodeSelector": {key: value}} for kind in POD_KINDS}
    return values
