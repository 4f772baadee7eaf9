"""A real node beside (or instead of) the kwok ones: containerd + runc + kubelet + kube-proxy.

The node runs in its own network namespace (tests/testenv/hostnet.py: made before the control
plane starts, removed after it stops; `prepare_host`) against a control plane listening on
`hostnet.HOST_IP`. Everything it writes lives under its state folder, except:
containerd's root (images, kept under `<cache>/node/` between runs so an image is imported once),
the kubelet's links in /var/log/containers, containerd's shim sockets in /run/containerd, the cgroup
trees `/sys/fs/cgroup/*/a2rl-node`, and the kernel settings the kubelet writes. A `HostRecord`
(tests/testenv/hoststate.py) lists them before the node starts; `stop()` undoes them, and so does
the next `start()` after a crash. One real node per machine: its network names are fixed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.testenv import build, hostnet, hoststate
from tests.testenv.controlplane import (
    ControlPlane,
    Process,
    TestEnvError,
    attach_processes,
    wait_for,
    write_kubeconfig,
)
from tests.testenv.node_images import PAUSE_REF, ImageError, NodeImages, pause_archive

NODE_NAME = "a2rl-node-0"
NODE_LABEL = ("a2rl.dev/real-node", "true")
CGROUP_ROOT = "a2rl-node"
NODE_TOOLS = ("kubelet", "kube-proxy", "pause")
HOST_PACKAGES = {"containerd": "containerd", "runc": "runc", "ctr": "containerd", "iptables": "iptables",
                 "conntrack": "conntrack", "nsenter": "util-linux", "sysctl": "procps"}  # fmt: skip
CNI_BIN_DIR = Path("/usr/lib/cni")
#: Host folders the node writes into whatever its configuration says: containerd's shim sockets,
#: the kubelet's container log links, the CNI library's result cache.
HOST_DIRS = ("/run/containerd", "/var/log/containers", "/var/lib/cni")


def record_path() -> Path:
    """Fixed, so that the next start finds what a crashed node left."""
    return build.cache_base() / "testenv" / "real-node.json"


@functools.cache
def containerd_version() -> str:
    """The installed containerd's version (`1.6.20` for Debian bookworm's `1.6.20~ds1-1+deb12u3`)."""
    proc = subprocess.run(["containerd", "--version"], capture_output=True, text=True, check=False)
    words = proc.stdout.split()
    return words[2].split("~")[0].lstrip("v") if proc.returncode == 0 and len(words) > 2 else "unknown"


def containerd_root() -> Path:
    """containerd's image store, kept between runs, one per containerd version."""
    return build.cache_base() / "node" / f"containerd-{containerd_version()}" / "root"


def missing_host_tools() -> list[str]:
    """What the node needs and this host lacks, as `tool (Debian package)`."""
    found = [f"{tool} ({package})" for tool, package in HOST_PACKAGES.items() if shutil.which(tool) is None]
    if not (CNI_BIN_DIR / "bridge").exists():
        found.append("the CNI plugins (containernetworking-plugins)")
    return found


@dataclass
class RealNode:
    state_dir: Path
    control_plane: ControlPlane
    binaries: dict[str, Path]
    name: str = NODE_NAME
    processes: dict[str, Process] = field(default_factory=dict)
    #: Whether this handle started the node (or attached to the one `hack/testenv up` started):
    #: only then does `stop` undo what the host record lists.
    owns_host_record: bool = False

    @property
    def socket(self) -> Path:
        return self.state_dir / "containerd" / "containerd.sock"

    @property
    def images(self) -> NodeImages:
        return NodeImages(self.socket, containerd_root())

    # -- lifecycle

    def start(self, log: Callable[[str], None] = print) -> None:
        started = time.monotonic()
        if not hostnet.exists():
            raise TestEnvError("the node's network is not there: call prepare_host() first")
        record = hoststate.HostRecord(
            sysctls=hoststate.read_sysctls(),
            mount_roots=[str(self.state_dir), str(containerd_root())],
            cgroup=CGROUP_ROOT,
            shim_fragment=str(self.socket),
            created_dirs=[d for d in HOST_DIRS if not Path(d).exists()],
            # containerd's CNI library caches each pod's network results there, whatever the config
            owned_globs=[f"/var/lib/cni/results/{net}-*" for net in (hostnet.CNI_NETWORK, "cni-loopback")],
            log_dirs=[str(self.state_dir / "pod-logs")],
        )
        record.save(record_path())
        self.owns_host_record = True
        try:
            for cgroup in hoststate.cgroup_dirs(CGROUP_ROOT):
                cgroup.mkdir(exist_ok=True)
            self._write_config()
            self._start_containerd(record)
            self._purge_containers()
            archive = pause_archive(self.binaries["pause"], self.state_dir / "pause.tar")
            self.images.import_archive(archive, PAUSE_REF, build.tool_dir(_tool("pause")).parent.name)
            self._start_kubelet(record)
            self._start_kube_proxy(record)
        except BaseException:
            self.stop()
            raise
        log(
            f"[node] {self.name} Ready in {time.monotonic() - started:.1f}s (containerd, kubelet, kube-proxy)"
        )

    def stop(self) -> dict[str, tuple[str, str | None]]:
        """Stop the node and put the host back; the kernel settings it had to restore. A handle that
        did not start the node (its start refused: another one runs) leaves everything alone."""
        if not self.owns_host_record:
            return {}
        for name in ("kube-proxy", "kubelet"):
            if name in self.processes:
                self.processes[name].stop()
        if "containerd" in self.processes and self.processes["containerd"].alive():
            with contextlib.suppress(ImageError, subprocess.SubprocessError, OSError):
                self._purge_containers()
            self.processes["containerd"].stop()
        record = hoststate.HostRecord.load(record_path())
        restored: dict[str, tuple[str, str | None]] = {}
        if record is not None:
            record.pids = {}
            restored = hoststate.undo(record)
        record_path().unlink(missing_ok=True)
        self.owns_host_record = False
        return restored

    # -- pieces

    def _spawn(self, name: str, argv: list[str], record: hoststate.HostRecord) -> Process:
        proc = Process(name, hostnet.enter_argv(argv), self.state_dir / f"{name}.log")
        proc.start()
        self.processes[name] = proc
        # nsenter execs the program: the pid is the program's own.
        record.pids[name] = (proc.pid, argv[0])
        record.save(record_path())
        return proc

    def _write_config(self) -> None:
        cp, state = self.control_plane, self.state_dir
        (state / "cni").mkdir(parents=True, exist_ok=True)
        (state / "cni" / "10-a2rl.conflist").write_text(
            json.dumps(hostnet.cni_config(state / "cni-ipam"), indent=1)
        )
        pki = cp.pki
        pki.leaf(f"node-{self.name}", f"/O=system:nodes/CN=system:node:{self.name}", "clientAuth")
        pki.leaf(
            f"kubelet-{self.name}", f"/CN={self.name}", "serverAuth", f"IP:{hostnet.NODE_IP},DNS:{self.name}"
        )
        pki.leaf("kube-proxy", "/CN=system:kube-proxy", "clientAuth")
        for who, cert in (("kubelet", f"node-{self.name}"), ("kube-proxy", "kube-proxy")):
            user = {"client-certificate": str(pki.cert(cert)), "client-key": str(pki.key(cert))}
            write_kubeconfig(state / f"{who}.kubeconfig", cp.server, pki.ca_cert, user)
        (state / "resolv.conf").write_text(f"nameserver {hostnet.HOST_IP}\noptions timeout:1 attempts:1\n")
        (state / "containerd.toml").write_text(containerd_config(state, containerd_root()))
        (state / "kubelet.json").write_text(json.dumps(kubelet_config(self, pki.ca_cert), indent=1))
        (state / "kube-proxy.json").write_text(json.dumps(kube_proxy_config(self), indent=1))

    def _start_containerd(self, record: hoststate.HostRecord) -> None:
        containerd_root().mkdir(parents=True, exist_ok=True)
        proc = self._spawn(
            "containerd", ["containerd", "--config", str(self.state_dir / "containerd.toml")], record
        )

        def up() -> bool:
            proc.check_alive()
            self.images.ctr("version")
            return True

        wait_for(up, timeout=30, what="containerd to answer on its socket")

    def _purge_containers(self) -> None:
        """Remove every container containerd still holds (a crashed run's), with its snapshot."""
        images = self.images
        for cid in images.ctr("containers", "ls", "-q").split():
            for args in (("tasks", "kill", "-s", "SIGKILL", cid), ("tasks", "rm", "-f", cid)):
                with contextlib.suppress(ImageError):  # no task left: nothing to kill
                    images.ctr(*args)
            images.ctr("containers", "rm", cid)

    def _start_kubelet(self, record: hoststate.HostRecord) -> None:
        state = self.state_dir
        key, value = NODE_LABEL
        proc = self._spawn("kubelet", [
            str(self.binaries["kubelet"]), f"--config={state / 'kubelet.json'}",
            f"--kubeconfig={state / 'kubelet.kubeconfig'}", f"--root-dir={state / 'kubelet'}",
            f"--hostname-override={self.name}", f"--node-ip={hostnet.NODE_IP}",
            f"--node-labels={key}={value}", "--v=1",
        ], record)  # fmt: skip

        def ready() -> bool:
            proc.check_alive()
            return self.control_plane.node_ready(self.name)

        try:
            wait_for(ready, timeout=90, what=f"node {self.name} Ready")
        except TimeoutError as exc:
            raise TestEnvError(f"{exc}\nkubelet log:\n{proc.log_tail(40)}") from exc

    def _start_kube_proxy(self, record: hoststate.HostRecord) -> None:
        proc = self._spawn("kube-proxy", [
            str(self.binaries["kube-proxy"]), f"--config={self.state_dir / 'kube-proxy.json'}", "--v=1",
        ], record)  # fmt: skip

        def synced() -> bool:
            proc.check_alive()
            with urllib.request.urlopen(f"http://{hostnet.NODE_IP}:10256/healthz", timeout=2) as resp:
                return bool(resp.status == 200)

        try:
            wait_for(synced, timeout=60, what="kube-proxy /healthz")
        except TimeoutError as exc:
            raise TestEnvError(f"{exc}\nkube-proxy log:\n{proc.log_tail(40)}") from exc

    # -- state for hack/testenv

    def describe(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "name": self.name,
            "binaries": {k: str(v) for k, v in self.binaries.items()},
            "pids": {name: proc.pid for name, proc in self.processes.items()},
            # the program nsenter became
            "argv0": {name: proc.argv[proc.argv.index("--") + 1] for name, proc in self.processes.items()},
        }

    @classmethod
    def attach(cls, info: dict[str, Any], control_plane: ControlPlane) -> RealNode:
        state = Path(info["state_dir"])
        binaries = {k: Path(v) for k, v in info["binaries"].items()}
        processes = attach_processes(info, state)
        return cls(state, control_plane, binaries, info["name"], processes=processes, owns_host_record=True)


class NodeRunningError(TestEnvError):
    """The host record's processes still run: another process's node (one per machine)."""


def _tool(name: str) -> build.Component:
    return next(t for t in build.TOOLS if t.name == name)


def prepare_host(log: Callable[[str], None] = print) -> None:
    """Before the control plane starts: a crashed node's leftovers removed, the node's network made
    anew."""
    missing = missing_host_tools()
    if missing:
        raise TestEnvError(f"the real node needs {', '.join(missing)}: run hack/node-deps")
    try:
        recover(log)
    except NodeRunningError as exc:
        raise TestEnvError(f"{exc}: stop it first (`hack/testenv down`, or let the test run end)") from exc
    hostnet.destroy()
    hostnet.create()


def recover(log: Callable[[str], None] = print) -> dict[str, tuple[str, str | None]]:
    """Undo what a node that did not stop left on the host (not its network: `prepare_host`);
    refuse while one is still running. The kernel settings it restored."""
    record = hoststate.HostRecord.load(record_path())
    if record is None:
        return {}
    alive = record.live_pids()
    if alive:
        raise NodeRunningError(f"a real node is running on this machine (pids {sorted(alive.values())})")
    restored = hoststate.undo(record)
    record_path().unlink(missing_ok=True)
    settings = ", ".join(sorted(restored)) or "none"
    log(f"[node] cleaned up after a node that did not stop (kernel settings restored: {settings})")
    return restored


def containerd_config(state: Path, root: Path) -> str:
    """containerd's own root, state, socket and runc root; CRI with our pause image and CNI
    config; no OOM score below the default (that needs CAP_SYS_RESOURCE); no AppArmor."""
    return f"""version = 2
root = "{root}"
state = "{state / "containerd" / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{state / "containerd" / "containerd.sock"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_REF}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{state / "cni"}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "{state / "runc"}"
        SystemdCgroup = false

[plugins."io.containerd.internal.v1.opt"]
  path = "{state / "containerd" / "opt"}"
"""


def kubelet_config(node: RealNode, client_ca: Path) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration for this host (real-cluster.md): cgroupfs on cgroup v1,
    its cgroups under CGROUP_ROOT, no OOM score or kernel defaults it may not set, no eviction or
    image GC (the images cannot be pulled again), x509 clients of the test CA only."""
    state, pki = node.state_dir, node.control_plane.pki
    return {
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "address": hostnet.NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "tlsCertFile": str(pki.cert(f"kubelet-{node.name}")),
        "tlsPrivateKeyFile": str(pki.key(f"kubelet-{node.name}")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "oomScoreAdj": 0,
        "protectKernelDefaults": False,
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "podLogsDir": str(state / "pod-logs"),
        "resolvConf": str(state / "resolv.conf"),
        "clusterDomain": "cluster.local",
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "shutdownGracePeriod": "0s",
        "kernelMemcgNotification": False,
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }


def kube_proxy_config(node: RealNode) -> dict[str, Any]:
    """iptables mode in the node's namespace; conntrack limits left as the host has them (those are
    global settings)."""
    return {
        "kind": "KubeProxyConfiguration",
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "clientConnection": {"kubeconfig": str(node.state_dir / "kube-proxy.kubeconfig")},
        "hostnameOverride": node.name,
        "bindAddress": hostnet.NODE_IP,
        "healthzBindAddress": f"{hostnet.NODE_IP}:10256",
        "metricsBindAddress": f"{hostnet.NODE_IP}:10249",
        "mode": "iptables",
        "clusterCIDR": hostnet.POD_SUBNET,
        "oomScoreAdj": 0,
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
            "udpTimeout": "0s",
            "udpStreamTimeout": "0s",
        },
    }
