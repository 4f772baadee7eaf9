"""Command line of hack/testenv (stdlib only): build | up | down | status | env."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tests.testenv import build, hostnet
from tests.testenv.controlplane import ControlPlane, MinioServer, TestEnvError
from tests.testenv.node import NODE_TOOLS, NodeRunningError, RealNode, prepare_host, recover


def run_dir() -> Path:
    return build.cache_base() / "testenv" / "run"


def _state_file() -> Path:
    return run_dir() / "state.json"


def _load_state() -> dict[str, Any] | None:
    try:
        return dict(json.loads(_state_file().read_text()))
    except (OSError, ValueError):
        return None


def _env_lines(cp: ControlPlane, minio: MinioServer) -> list[str]:
    return [
        f"KUBECONFIG={cp.kubeconfig}",
        f"AWS_ENDPOINT_URL={minio.endpoint} AWS_ACCESS_KEY_ID={minio.access_key} "
        f"AWS_SECRET_ACCESS_KEY={minio.secret_key}",
    ]


def attach_running() -> tuple[ControlPlane, MinioServer, RealNode | None] | None:
    state = _load_state()
    if state is None:
        return None
    cp = ControlPlane.attach(state["control_plane"])
    node = RealNode.attach(state["node"], cp) if state.get("node") else None
    return cp, MinioServer.attach(state["minio"]), node


def _processes(cp: ControlPlane, minio: MinioServer, node: RealNode | None) -> dict[str, Any]:
    return {**cp.processes, "minio": minio.process, **(node.processes if node else {})}


def _cmd_build(_: argparse.Namespace) -> int:
    start = time.monotonic()
    try:
        paths = {**build.ensure_built(), **build.ensure_tools()}
    except build.BuildError as exc:
        print(f"[testenv] {exc}", file=sys.stderr)
        return 1
    print(f"[testenv] ready in {time.monotonic() - start:.1f}s:")
    for name, path in paths.items():
        print(f"  {name}: {path}")
    return 0


def _say(msg: str) -> None:
    print(msg, file=sys.stderr)


def _cmd_up(args: argparse.Namespace) -> int:
    attached = attach_running()
    if attached and all(p is not None and p.alive() for p in _processes(*attached).values()):
        if args.real_node and attached[2] is None:
            _say("[testenv] up already, without the real node: `hack/testenv down` first")
            return 1
        _say("[testenv] already up")
        print("\n".join(_env_lines(attached[0], attached[1])))
        return 0
    if attached:
        _stop(*attached)
    try:
        binaries = build.ensure_built()
        tools = build.ensure_tools(names=NODE_TOOLS) if args.real_node else {}
    except build.BuildError as exc:
        _say(f"[testenv] {exc}")
        return 1
    shutil.rmtree(run_dir(), ignore_errors=True)
    # With the real node, the API server and MinIO listen on the host's end of its link (pods reach
    # them there), beside the kwok GPU nodes.
    host = hostnet.HOST_IP if args.real_node else "127.0.0.1"
    cp = ControlPlane(state_dir=run_dir() / "k8s", binaries=binaries, host=host)
    minio = MinioServer(state_dir=run_dir() / "minio", binary=binaries["minio"], host=host)
    node = RealNode(run_dir() / "node", cp, tools) if args.real_node else None
    made_network = False
    try:
        if node is not None:
            prepare_host(_say)
            made_network = True
        cp.start(log=_say)
        minio.start()
        if node is not None:
            node.start(_say)
    except (TestEnvError, TimeoutError) as exc:
        _stop(cp, minio, node if made_network else None)
        _say(f"[testenv] failed to start: {exc}")
        return 1
    state = {
        "control_plane": cp.describe(),
        "minio": minio.describe(),
        "node": node.describe() if node else None,
    }
    _state_file().write_text(json.dumps(state, indent=2))
    print("\n".join(_env_lines(cp, minio)))
    return 0


def _stop(cp: ControlPlane, minio: MinioServer, node: RealNode | None) -> None:
    if node is not None:
        restored = node.stop()
        if restored:
            _say(f"[testenv] restored the kernel settings the kubelet changed: {', '.join(sorted(restored))}")
    minio.stop()
    cp.stop()
    if node is not None:
        hostnet.destroy()


def _cmd_down(_: argparse.Namespace) -> int:
    attached = attach_running()
    if attached is None:
        # What a real node that did not stop (a crash, a killed test run) left is removed all the same,
        # but not a node a test run is using.
        try:
            recover(_say)
        except NodeRunningError as exc:
            _say(f"[testenv] not running; {exc}, not started by `up`: left alone")
            return 1
        if hostnet.exists():
            hostnet.destroy()
        print("[testenv] not running")
        return 0
    _stop(*attached)
    _state_file().unlink(missing_ok=True)
    print("[testenv] stopped")
    return 0


def _cmd_status(_: argparse.Namespace) -> int:
    attached = attach_running()
    if attached is None:
        print("[testenv] not running")
        return 1
    cp, minio, node = attached
    procs = _processes(cp, minio, node)
    for name, proc in procs.items():
        state = "running" if proc is not None and proc.alive() else "DEAD"
        print(f"  {name:<24} pid {proc.pid if proc else '-':<8} {state}")
    print("\n".join(_env_lines(cp, minio)))
    healthy = all(p is not None and p.alive() for p in procs.values())
    return 0 if healthy else 1


def _cmd_env(_: argparse.Namespace) -> int:
    attached = attach_running()
    if attached is None:
        print("[testenv] not running", file=sys.stderr)
        return 1
    cp, minio, _ = attached
    print(f"export KUBECONFIG={cp.kubeconfig}")
    print(f"export AWS_ENDPOINT_URL={minio.endpoint}")
    print(f"export AWS_ACCESS_KEY_ID={minio.access_key}")
    print(f"export AWS_SECRET_ACCESS_KEY={minio.secret_key}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hack/testenv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "build": (_cmd_build, "build the pinned binaries and tools (helm, kueue…) into the cache"),
        "up": (
            _cmd_up,
            "start control plane + MinIO (+ --real-node) in the background; prints KUBECONFIG/AWS_* lines",
        ),
        "down": (_cmd_down, "stop what `up` started"),
        "status": (_cmd_status, "show the processes `up` started"),
        "env": (_cmd_env, "print `export` lines for eval"),
    }
    for name, (func, help_text) in commands.items():
        command = sub.add_parser(name, help=help_text)
        command.set_defaults(func=func)
        if name == "up":
            command.add_argument(
                "--real-node", action="store_true",
                help="also a real node (containerd, kubelet, kube-proxy: docs/testenv.md), root only",
            )  # fmt: skip
    args = parser.parse_args(argv)
    return int(args.func(args))
