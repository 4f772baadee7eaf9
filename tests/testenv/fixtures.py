"""pytest plugin: a real control plane (etcd, kube-apiserver, controllers, kwok GPU nodes) and MinIO.

Loaded from the root conftest with `pytest_plugins = ["tests.testenv.fixtures"]`. Missing
binaries are built on first use (minutes, cold); a failed build fails the tests loudly.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.testenv import build
from tests.testenv.controlplane import (
    COMPLETE_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    ControlPlane,
    MinioServer,
    wait_for,
)
from tests.testenv.kueue import KueueServer

__all__ = [
    "ControlPlane",
    "KueueServer",
    "MinioServer",
    "complete_pod",
    "control_plane",
    "kueue",
    "kueue_queue",
    "make_namespace",
    "minio",
    "namespace",
    "testenv_binaries",
    "wait_for",
    "wait_for_pod_phase",
]


def _log(msg: str) -> None:
    # Visible even with output capturing on: the cold build takes minutes.
    stream = sys.__stderr__ or sys.stderr
    stream.write(msg + "\n")
    stream.flush()


@pytest.fixture(scope="session")
def testenv_binaries() -> dict[str, Path]:
    """Paths of the built binaries; builds missing ones (fails, never skips, when that fails)."""
    try:
        return build.ensure_built(log=_log)
    except build.BuildError as exc:
        pytest.fail(f"hack/testenv build failed; the real control plane is required:\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def _testenv_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="a2rl-testenv-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="session")
def control_plane(testenv_binaries: dict[str, Path], _testenv_root: Path) -> Iterator[ControlPlane]:
    """Session-wide etcd + kube-apiserver (RBAC, PodSecurity) + KCM + scheduler + kwok, two GPU nodes."""
    cp = ControlPlane(state_dir=_testenv_root / "k8s", binaries=testenv_binaries)
    cp.start(log=_log)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def minio(testenv_binaries: dict[str, Path], _testenv_root: Path) -> Iterator[MinioServer]:
    """Session-wide MinIO on a loopback port; `.stop()`/`.start()` keep port and data."""
    server = MinioServer(state_dir=_testenv_root / "minio", binary=testenv_binaries["minio"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kueue(control_plane: ControlPlane, _testenv_root: Path) -> Iterator[KueueServer]:
    """Kueue (built on first use) against the session's control plane, with the default quota: the
    ClusterQueue `a2rl` (2 GPUs) over the ResourceFlavor of the kwok GPU nodes. Opt-in: only tests
    that ask for it start it; mark them `kueue` (they then run last, see below)."""
    try:
        binary = build.ensure_tools(log=_log, names=("kueue",))["kueue"]
    except build.BuildError as exc:
        pytest.fail(f"building kueue failed:\n{exc}", pytrace=False)
    server = KueueServer(control_plane, _testenv_root / "kueue", binary, build.module_files_dir(build.KUEUE))
    server.start(log=_log)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kueue_queue(kueue: KueueServer, namespace: str) -> str:
    """The LocalQueue `a2rl` (onto the ClusterQueue `a2rl`) in this test's `namespace`; its name."""
    return kueue.local_queue(namespace)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `kueue` run last: once started, Kueue stays for the session, and its
    controller and webhooks act on every Job with a queue label, so a test that plays Kueue's
    part itself (unsuspending a queued Job) must run before it starts."""
    items.sort(key=lambda item: item.get_closest_marker("kueue") is not None)


@pytest.fixture
def make_namespace(control_plane: ControlPlane) -> Iterator[Callable[..., str]]:
    """Factory `make_namespace(labels=None, prefix="t") -> name`; namespaces are deleted after the test."""
    created: list[str] = []

    def make(labels: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        control_plane.create("/api/v1/namespaces", body)
        created.append(name)
        # Pods are rejected until the service-account controller has created "default".
        wait_for(lambda: control_plane.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
                 timeout=30, what=f"default ServiceAccount in {name}")  # fmt: skip
        return name

    yield make
    for name in created:
        control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def namespace(make_namespace: Callable[..., str]) -> str:
    """A fresh, unlabelled namespace for this test."""
    return make_namespace()


def complete_pod(
    api: Any, ns: str, name: str, outcome: str = "succeeded", exit_code: int | None = None
) -> None:
    """Let a kwok pod finish: the kwok stages move it to Succeeded/Failed on this annotation.

    `api` is a `kubernetes.client.ApiClient` or `CoreV1Api`.
    """
    if outcome not in ("succeeded", "failed"):
        raise ValueError(f"outcome must be 'succeeded' or 'failed', not {outcome!r}")
    from kubernetes import client

    core = api if isinstance(api, client.CoreV1Api) else client.CoreV1Api(api)
    annotations = {COMPLETE_ANNOTATION: outcome}
    if exit_code is not None:
        annotations[EXIT_CODE_ANNOTATION] = str(exit_code)
    core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": annotations}})


def wait_for_pod_phase(api: Any, ns: str, name: str, phases: tuple[str, ...], timeout: float = 30) -> Any:
    """Wait until the pod is in one of `phases`; returns the pod."""
    from kubernetes import client

    core = api if isinstance(api, client.CoreV1Api) else client.CoreV1Api(api)

    def in_phase() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status is not None and pod.status.phase in phases else None

    return wait_for(in_phase, timeout=timeout, what=f"pod {ns}/{name} in {phases}")
