"""The real-node tier: a control plane, MinIO and one real node (containerd + runc + kubelet +
kube-proxy, tests/testenv/node.py) in a network namespace of its own, and the project's images
imported into the node's containerd. No kwok node: every pod runs in a real container.

The host's kernel settings are read before the node starts and compared after it stops: the
session fails if one differs.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.operator_support import RESTRICTED
from tests.testenv import build, hostnet, hoststate
from tests.testenv.controlplane import ControlPlane, MinioServer, TestEnvError, wait_for
from tests.testenv.node import NODE_TOOLS, RealNode, prepare_host
from tests.testenv.node_install import NODE_IMAGES, image_ref

REPO = Path(__file__).resolve().parents[2]

_CONFIG: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG[:] = [config]


def _log(msg: str) -> None:
    """A line in the test run's own output even while pytest captures it (its file descriptors are
    redirected during a test): what ran where (container ids, images) and how long the node's steps
    took."""
    manager = _CONFIG[0].pluginmanager if _CONFIG else None
    capture = manager.get_plugin("capturemanager") if manager else None
    reporter = manager.get_plugin("terminalreporter") if manager else None
    if capture is None or reporter is None:
        print(msg, file=sys.__stderr__ or sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(msg)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here runs on the real node: marked `real_node`, so `-m real_node` selects the tier."""
    del config
    for item in items:
        if "/node/" in item.nodeid:
            item.add_marker(pytest.mark.real_node)


@dataclass
class RealCluster:
    control_plane: ControlPlane
    minio: MinioServer
    node: RealNode
    admin: client.ApiClient

    def namespace(self, labels: dict[str, str] | None = None) -> str:
        name = f"rn-{uuid.uuid4().hex[:8]}"
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        self.control_plane.create("/api/v1/namespaces", body)
        wait_for(lambda: self.control_plane.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
                 timeout=30, what=f"default ServiceAccount in {name}")  # fmt: skip
        return name


@pytest.fixture(scope="session")
def node_images() -> list[str]:
    """The tier's images, built (or found up to date) by `make images` (seconds when nothing changed)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "hack" / "images.py"), "--no-gpu", "--only", *NODE_IMAGES],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(
            f"make images failed; the real node runs the project's images:\n{proc.stdout}\n{proc.stderr}"
        )
    return [image_ref(n) for n in NODE_IMAGES]


@pytest.fixture(scope="session")
def real_cluster(
    testenv_binaries: dict[str, Path], node_images: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealCluster]:
    try:
        tools = build.ensure_tools(log=_log, names=NODE_TOOLS)
    except build.BuildError as exc:
        pytest.fail(f"building the real node's binaries failed:\n{exc}", pytrace=False)
    before = hoststate.read_sysctls()
    root = tmp_path_factory.mktemp("real-node")
    cp = ControlPlane(state_dir=root / "k8s", binaries=testenv_binaries, host=hostnet.HOST_IP)
    minio = MinioServer(state_dir=root / "minio", binary=testenv_binaries["minio"], host=hostnet.HOST_IP)
    node = RealNode(root / "node", cp, tools)
    try:
        prepare_host(_log)
    except TestEnvError as exc:  # another node runs here: its network is not ours to remove
        pytest.fail(f"the real node did not start: {exc}", pytrace=False)
    try:
        cp.start(nodes=(), log=_log)
        minio.start()
        node.start(_log)
        node.images.import_from_podman(node_images, _log)
    except (TestEnvError, TimeoutError) as exc:
        node.stop()
        minio.stop()
        cp.stop()
        hostnet.destroy()
        pytest.fail(f"the real node did not start: {exc}", pytrace=False)
    try:
        yield RealCluster(cp, minio, node, cp.api_client())
    finally:
        node.stop()
        minio.stop()
        cp.stop()
        hostnet.destroy()
        changed = hoststate.sysctl_changes(before, hoststate.read_sysctls())
        assert not changed, f"the real node left kernel settings changed (before, after): {changed}"


@pytest.fixture
def node_namespace(real_cluster: RealCluster) -> Iterator[str]:
    """A namespace enforcing the restricted Pod Security Standard, deleted after the test."""
    name = real_cluster.namespace(RESTRICTED)
    yield name
    real_cluster.control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


def wait_pod(core: client.CoreV1Api, ns: str, name: str, ok: Callable[[client.V1Pod], bool],
             timeout: float = 60, what: str = "") -> client.V1Pod:  # fmt: skip
    def check() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, ns)
        return pod if ok(pod) else None

    result: client.V1Pod = wait_for(check, timeout=timeout, what=what or f"pod {ns}/{name}")
    return result
