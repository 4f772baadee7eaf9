"""The real-node tier: a control plane, MinIO and one real node (containerd + runc + kubelet +
kube-proxy, tests/testenv/node.py) in a network namespace of its own, and the project's images
imported into the node's containerd. No kwok node: every pod runs in a real container.

The host's kernel settings are read before the node starts and compared after it stops: the
session fails if one differs.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import stage_to_store
from kubernetes import client, utils

from a2rl.constants import LABEL_RUN_UID
from a2rl.store.base import ObjectStore
from a2rl.store.open import open_store
from tests.support.helm import Helm
from tests.support.operator_support import RESTRICTED, condition, get_run
from tests.testenv import build, hostnet, hoststate
from tests.testenv.controlplane import ControlPlane, MinioServer, TestEnvError, wait_for
from tests.testenv.node import NODE_TOOLS, RealNode, prepare_host
from tests.testenv.node_install import (
    NODE_IMAGES,
    STACK_IMAGES,
    chart_values,
    image_ref,
    local_volumes,
    store_secret,
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "a2rl"
RELEASE, RELEASE_NS = "a2rl", "a2rl-system"
STORE_URI = "s3://a2rl-node/runs"

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
    names = [*NODE_IMAGES, *STACK_IMAGES]
    proc = subprocess.run(
        [sys.executable, str(REPO / "hack" / "images.py"), "--no-gpu", "--only", *names],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(
            f"make images failed; the real node runs the project's images:\n{proc.stdout}\n{proc.stderr}"
        )
    return [image_ref(n) for n in names]


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


@pytest.fixture(scope="session")
def store(real_cluster: RealCluster) -> Iterator[ObjectStore]:
    """MinIO as the operator's store, with arith's held-out data staged (`a2rl data stage`)."""
    minio = real_cluster.minio
    env = {"AWS_ENDPOINT_URL": minio.endpoint, "AWS_ACCESS_KEY_ID": minio.access_key,
           "AWS_SECRET_ACCESS_KEY": minio.secret_key}  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        s = open_store(STORE_URI)
        stage_to_store(get_task("arith"), s, source=None, seed=0)
        yield s


@pytest.fixture(scope="session")
def installed(
    real_cluster: RealCluster, store: ObjectStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Helm]:
    """`helm install` of the chart: the operator's Deployment Available on the real node."""
    cp, minio, node = real_cluster.control_plane, real_cluster.minio, real_cluster.node
    # One local PV per workspace (Retain: a released one is not bound again): the tier's three runs
    # and one to spare.
    folders = [node.state_dir / "volumes" / f"pv-{i}" for i in range(4)]
    for folder in folders:
        folder.mkdir(parents=True)
    for obj in local_volumes(node.name, folders):
        utils.create_from_dict(real_cluster.admin, obj)
    core = client.CoreV1Api(real_cluster.admin)
    core.create_namespace({"metadata": {"name": RELEASE_NS}})
    core.create_namespaced_secret(
        RELEASE_NS, store_secret(minio.endpoint, minio.access_key, minio.secret_key)
    )
    home = tmp_path_factory.mktemp("helm")
    helm = Helm(build.ensure_tools(names=("helm",))["helm"], home, cp.kubeconfig)
    values = home / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(STORE_URI, minio.port, cp.ports["apiserver"], pin=False)))
    started = time.monotonic()
    helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        RELEASE_NS,
        "-f",
        str(values),
        "--wait",
        "--timeout",
        "5m",
        timeout=330,
    )
    _log(f"[real node] helm install: operator Available in {time.monotonic() - started:.1f}s")
    yield helm
    helm("uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "2m", timeout=150)


def operator_pod(core: client.CoreV1Api) -> client.V1Pod:
    pods = [p for p in core.list_namespaced_pod(RELEASE_NS).items if p.metadata.deletion_timestamp is None]
    assert len(pods) == 1, [p.metadata.name for p in pods]
    return pods[0]


def follow(api: client.ApiClient, ns: str, name: str, until: str, timeout: float) -> dict[str, Any]:
    """Poll the run, logging each new phase, until its `until` condition is True."""
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = get_run(api, ns, name)
        phase = (run.get("status") or {}).get("phase", "")
        if phase != seen:
            _log(f"[real node] {ns}/{name}: {phase}")
            seen = phase
        if (c := condition(run, until)) and c["status"] == "True":
            return run
        time.sleep(3)
    raise AssertionError(f"{ns}/{name} not {until} in {timeout:.0f}s: {run.get('status')}")


def run_images(cluster: RealCluster, ns: str, uid: str) -> set[str]:
    """The images of every container of the run's pods, each container's id and image printed; every
    one ran in the node's containerd."""
    core = client.CoreV1Api(cluster.admin)
    images = set()
    for p in core.list_namespaced_pod(ns, label_selector=f"{LABEL_RUN_UID}={uid}").items:
        for c in [*(p.status.init_container_statuses or []), *(p.status.container_statuses or [])]:
            _log(f"[real node] {p.metadata.name}/{c.name}: {c.container_id} {c.image}")
            assert (c.container_id or "").startswith("containerd://"), (p.metadata.name, c.name)
            images.add(c.image)
        assert p.spec.node_name == cluster.node.name
    return images
