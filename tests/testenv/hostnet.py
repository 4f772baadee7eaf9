"""The real node's network: a network namespace of its own, linked to the host by one veth pair.

    host netns                     node netns (NETNS)                     pod netns (made by CNI)
    HOST_IP  <-- veth HOST_LINK --> NODE_IP, bridge CNI_BRIDGE POD_GATEWAY <-- veth --> 10.245.0.x

The control plane and MinIO listen on HOST_IP (an address of the host end of the link, so of this
machine only). The node's containerd, kubelet and kube-proxy run in NETNS: the pods' bridge, the
routes, the iptables rules of kube-proxy and CNI's portmap live there and go with the namespace.
Pods reach the host's services directly (the host routes POD_SUBNET back through the link) and the
`kubernetes` Service through kube-proxy. There is no default route and no masquerade anywhere:
an address that is not one of these is unreachable from a pod.

Processes enter NETNS with `nsenter --net` (not `ip netns exec`, which remounts /sys and so hides
the cgroup v1 hierarchies under /sys/fs/cgroup from the kubelet and runc).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.testenv.controlplane import TestEnvError

NETNS = "a2rl-node"
HOST_LINK = "a2rl-node0"  # the host end; the node end is "eth0" in NETNS
HOST_IP = "10.254.0.1"
NODE_IP = "10.254.0.2"
LINK_PREFIX = 30
POD_SUBNET = "10.245.0.0/24"
POD_GATEWAY = "10.245.0.1"
CNI_BRIDGE = "cni-a2rl0"
CNI_NETWORK = "a2rl-node"
NETNS_PATH = Path("/run/netns") / NETNS


class NetError(TestEnvError):
    """A step of making or removing the node's network failed (the `ip` command's own words)."""


def _ip(*args: str, netns: bool = False, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *(["-n", NETNS] if netns else []), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc


def exists() -> bool:
    return NETNS_PATH.exists() or _ip("link", "show", HOST_LINK, check=False).returncode == 0


def create() -> None:
    """Make NETNS and the link; fails if either is there already (`destroy` first)."""
    if exists():
        raise NetError(f"network namespace {NETNS} or link {HOST_LINK} exists already")
    _ip("netns", "add", NETNS)
    try:
        _ip("link", "add", HOST_LINK, "type", "veth", "peer", "name", "eth0", "netns", NETNS)
        _ip("addr", "add", f"{HOST_IP}/{LINK_PREFIX}", "dev", HOST_LINK)
        _ip("link", "set", HOST_LINK, "up")
        _ip("addr", "add", f"{NODE_IP}/{LINK_PREFIX}", "dev", "eth0", netns=True)
        _ip("link", "set", "lo", "up", netns=True)
        _ip("link", "set", "eth0", "up", netns=True)
        # Pods' replies: the host sends POD_SUBNET back through the node.
        _ip("route", "add", POD_SUBNET, "via", NODE_IP, "dev", HOST_LINK)
        # The node routes between its pods' bridge and the link (in its own namespace only).
        subprocess.run(
            ["nsenter", f"--net={NETNS_PATH}", "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True
        )
    except BaseException:
        destroy()
        raise


def destroy() -> None:
    """Remove NETNS (its interfaces, routes and rules with it) and the host's end of the link."""
    _ip("link", "del", HOST_LINK, check=False)
    _ip("netns", "del", NETNS, check=False)


def enter_argv(argv: list[str]) -> list[str]:
    """`argv` run inside NETNS."""
    return ["nsenter", f"--net={NETNS_PATH}", "--", *argv]


def cni_config(ipam_dir: Path) -> dict[str, object]:
    """The CNI network list containerd gives its pods: a bridge in NETNS, addresses from POD_SUBNET,
    hairpin (a pod reaching itself through a Service), portmap; no IP masquerade. (containerd sets up
    each pod's loopback itself.) The address leases live in `ipam_dir`."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": CNI_BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
