"""The real node itself: pods in containerd under the restricted security context, with their
limits in cgroups, logs and exec through the API server, the `kubernetes` Service and MinIO
reachable from a pod and nothing else; PID 1 and SIGTERM as a kubelet really does them; and a
node killed outright cleaned up by the next start.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.stream import stream

from tests.node.conftest import RealCluster, _log, image_ref, wait_pod
from tests.testenv import hostnet, hoststate
from tests.testenv.controlplane import wait_for
from tests.testenv.node import CGROUP_ROOT, containerd_root, record_path, recover

RUNTIME = image_ref("operator")  # the smallest of the tier's images with a Python

# The main container's check, printed as one JSON line: who it runs as, whether its root is
# read-only, what the API server says through the `kubernetes` Service (kube-proxy), MinIO's
# health on the host's address, and what an address off this machine gives.
PROBE = r"""
import json, os, socket, ssl, urllib.request
out = {"uid": os.getuid()}
try:
    open("/probe", "w")
    out["root"] = "writable"
except OSError as exc:
    out["root"] = exc.strerror
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
req = urllib.request.Request(
    f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/version",
    headers={"Authorization": "Bearer " + open(f"{sa}/token").read()})
out["apiserver"] = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"]
out["minio"] = urllib.request.urlopen(os.environ["MINIO_HEALTH"], timeout=10).status
try:
    socket.create_connection(("192.0.2.10", 443), timeout=3)
    out["outside"] = "connected"
except OSError as exc:
    out["outside"] = exc.strerror or type(exc).__name__
print(json.dumps(out), flush=True)
import time; time.sleep(3600)
"""

SLEEPER = "import time; time.sleep(3600)"
HANDLES_SIGTERM = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(3600)"
)
SIDECAR = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    "print('sidecar up', flush=True); time.sleep(3600)"
)


def restricted() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def python_container(name: str, code: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": RUNTIME,
        "imagePullPolicy": "Never",
        "command": ["python3", "-c", code],
        "securityContext": restricted(),
        **extra,
    }


def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": containers, **spec},
    }


def running(p: client.V1Pod) -> bool:
    return p.status.phase == "Running" and all(c.ready for c in p.status.container_statuses or [])


def cgroup_value(controller: str, pod_uid: str, container_id: str, fname: str) -> str:
    pattern = f"/sys/fs/cgroup/{controller}/{CGROUP_ROOT}/**/pod{pod_uid}/{container_id}/{fname}"
    found = glob.glob(pattern, recursive=True)
    assert found, f"no cgroup file {pattern}"
    return Path(found[0]).read_text().strip()


def test_a_pod_runs_in_containerd_confined_and_reaches_only_the_test_hosts(
    real_cluster: RealCluster, node_namespace: str
) -> None:
    core = client.CoreV1Api(real_cluster.admin)
    limits = {"cpu": "500m", "memory": "200Mi"}
    health = f"{real_cluster.minio.endpoint}/minio/health/live"
    main = python_container(
        "main",
        PROBE,
        env=[{"name": "MINIO_HEALTH", "value": health}],
        resources={"requests": limits, "limits": limits},
    )
    sidecar = python_container("sidecar", SIDECAR, restartPolicy="Always")
    core.create_namespaced_pod(node_namespace, pod("probe", [main], initContainers=[sidecar]))
    p = wait_pod(core, node_namespace, "probe", running, timeout=90, what="the probe pod Running")

    statuses = [*p.status.init_container_statuses, *p.status.container_statuses]
    for st in statuses:
        _log(f"[real node] {node_namespace}/probe {st.name}: {st.container_id} {st.image} ({st.image_id})")
        assert st.container_id.startswith("containerd://") and st.image == RUNTIME
        assert st.image_id.startswith("sha256:")
    assert p.spec.node_name == real_cluster.node.name and p.status.pod_ip.startswith("10.245.0.")

    def probed() -> dict[str, Any] | None:
        text = core.read_namespaced_pod_log("probe", node_namespace, container="main")
        return json.loads(text.splitlines()[0]) if text.strip() else None

    seen = wait_for(probed, timeout=60, what="the probe's line in `kubectl logs`")
    assert seen["uid"] == 1000 and seen["root"] == "Read-only file system"
    assert seen["apiserver"] == "v1.36.3", "the kubernetes Service (kube-proxy) did not reach the API server"
    assert seen["minio"] == 200
    assert seen["outside"] == "Network is unreachable", "a pod reached past this machine's test hosts"
    assert "sidecar up" in core.read_namespaced_pod_log("probe", node_namespace, container="sidecar")

    said = stream(core.connect_get_namespaced_pod_exec, "probe", node_namespace, container="main",
                  command=["python3", "-c", "import os; print(os.getuid(), os.getpid())"],
                  stderr=True, stdin=False, stdout=True, tty=False)  # fmt: skip
    assert said.split()[0] == "1000"

    main_status = next(s for s in p.status.container_statuses if s.name == "main")
    cid = main_status.container_id.removeprefix("containerd://")
    assert int(cgroup_value("memory", p.metadata.uid, cid, "memory.limit_in_bytes")) == 200 * 2**20
    assert int(cgroup_value("cpu", p.metadata.uid, cid, "cpu.cfs_quota_us")) == 50_000


def _time_to_delete(core: client.CoreV1Api, ns: str, name: str) -> float:
    start = time.monotonic()
    core.delete_namespaced_pod(name, ns)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, ns)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=60, interval=0.1, what=f"pod {name} gone")
    return time.monotonic() - start


def test_pid_1_without_a_sigterm_handler_holds_its_pod_for_the_whole_grace_period(
    real_cluster: RealCluster, node_namespace: str
) -> None:
    """What played pods never showed: a container's main process is PID 1 of its own PID namespace,
    and the kernel delivers it no signal it has no handler for (SIGKILL aside). A Python program
    that sets none, like a plain `time.sleep`, is killed only when the grace period ends; one with a
    handler exits at once."""
    core = client.CoreV1Api(real_cluster.admin)
    grace = 6
    for name, code in (("plain", SLEEPER), ("handles", HANDLES_SIGTERM)):
        body = pod(name, [python_container("main", code)], terminationGracePeriodSeconds=grace)
        core.create_namespaced_pod(node_namespace, body)
    for name in ("plain", "handles"):
        wait_pod(core, node_namespace, name, running, timeout=60)
    plain = _time_to_delete(core, node_namespace, "plain")
    handles = _time_to_delete(core, node_namespace, "handles")
    _log(f"[real node] deleting a pod: PID 1 without a SIGTERM handler {plain:.1f}s, with one {handles:.1f}s")
    assert plain >= grace
    assert handles < grace - 2


def test_a_node_killed_outright_is_cleaned_up_by_the_next_start(real_cluster: RealCluster) -> None:
    """SIGKILL to containerd, the kubelet and kube-proxy leaves containers, shims, mounts, cgroups
    and the kubelet's kernel settings behind; `recover` (what the next start runs first) removes
    them all and puts the settings back; the node then starts again on the same host."""
    node, cp = real_cluster.node, real_cluster.control_plane
    record = hoststate.HostRecord.load(record_path())
    assert record is not None and set(record.pids) == {"containerd", "kubelet", "kube-proxy"}
    ns = real_cluster.namespace()
    core = client.CoreV1Api(real_cluster.admin)
    core.create_namespaced_pod(ns, pod("left", [python_container("main", SLEEPER)]))
    wait_pod(core, ns, "left", running, timeout=60)
    changed_by_kubelet = hoststate.sysctl_changes(record.sysctls, hoststate.read_sysctls())
    assert "vm/overcommit_memory" in changed_by_kubelet, "the kubelet no longer sets vm.overcommit_memory"

    for pid in record.live_pids().values():
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not record.live_pids(), timeout=10, what="the node's processes to die")
    roots = [Path(r) for r in record.mount_roots]
    assert hoststate.mounts_under(roots), "the killed node left no mounts: the test proves nothing"
    assert hoststate.matching_pids(record.shim_fragment), "no containerd shim left: the test proves nothing"

    restored = recover(_log)
    assert set(restored) >= set(changed_by_kubelet)
    assert hoststate.sysctl_changes(record.sysctls, hoststate.read_sysctls()) == {}
    assert hoststate.mounts_under(roots) == []
    assert not any(d.exists() for d in hoststate.cgroup_dirs(CGROUP_ROOT))
    assert not record_path().exists()
    assert containerd_root().is_dir(), "the image store is kept"
    assert hostnet.exists(), "recover leaves the network to prepare_host"

    node.start(_log)
    # Its containers were removed with the dead node: the restarted kubelet runs the pod anew.
    p = wait_pod(core, ns, "left", running, timeout=90, what="the pod Running again")
    assert p.status.container_statuses[0].container_id.startswith("containerd://")
    cp.request("DELETE", f"/api/v1/namespaces/{ns}")
