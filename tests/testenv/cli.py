"""Command line of hack/testenv (stdlib only): build | up | down | status | env."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tests.testenv import build
from tests.testenv.controlplane import ControlPlane, MinioServer, TestEnvError


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


def _attach() -> tuple[ControlPlane, MinioServer] | None:
    state = _load_state()
    if state is None:
        return None
    return ControlPlane.attach(state["control_plane"]), MinioServer.attach(state["minio"])


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


def _cmd_up(_: argparse.Namespace) -> int:
    attached = _attach()
    if attached and all(p.alive() for p in attached[0].processes.values()):
        print("[testenv] already up", file=sys.stderr)
        print("\n".join(_env_lines(*attached)))
        return 0
    if attached:
        _stop(*attached)
    try:
        binaries = build.ensure_built()
    except build.BuildError as exc:
        print(f"[testenv] {exc}", file=sys.stderr)
        return 1
    shutil.rmtree(run_dir(), ignore_errors=True)
    cp = ControlPlane(state_dir=run_dir() / "k8s", binaries=binaries)
    minio = MinioServer(state_dir=run_dir() / "minio", binary=binaries["minio"])
    try:
        cp.start(log=lambda msg: print(msg, file=sys.stderr))
        minio.start()
    except (TestEnvError, TimeoutError) as exc:
        _stop(cp, minio)
        print(f"[testenv] failed to start: {exc}", file=sys.stderr)
        return 1
    state = {"control_plane": cp.describe(), "minio": minio.describe()}
    _state_file().write_text(json.dumps(state, indent=2))
    print("\n".join(_env_lines(cp, minio)))
    return 0


def _stop(cp: ControlPlane, minio: MinioServer) -> None:
    minio.stop()
    cp.stop()


def _cmd_down(_: argparse.Namespace) -> int:
    attached = _attach()
    if attached is None:
        print("[testenv] not running")
        return 0
    _stop(*attached)
    _state_file().unlink(missing_ok=True)
    print("[testenv] stopped")
    return 0


def _cmd_status(_: argparse.Namespace) -> int:
    attached = _attach()
    if attached is None:
        print("[testenv] not running")
        return 1
    cp, minio = attached
    procs = {**cp.processes, "minio": minio.process}
    for name, proc in procs.items():
        state = "running" if proc is not None and proc.alive() else "DEAD"
        print(f"  {name:<24} pid {proc.pid if proc else '-':<8} {state}")
    print("\n".join(_env_lines(cp, minio)))
    healthy = all(p is not None and p.alive() for p in procs.values())
    return 0 if healthy else 1


def _cmd_env(_: argparse.Namespace) -> int:
    attached = _attach()
    if attached is None:
        print("[testenv] not running", file=sys.stderr)
        return 1
    cp, minio = attached
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
        "up": (_cmd_up, "start control plane + MinIO in the background; prints KUBECONFIG/AWS_* lines"),
        "down": (_cmd_down, "stop what `up` started"),
        "status": (_cmd_status, "show the processes `up` started"),
        "env": (_cmd_env, "print `export` lines for eval"),
    }
    for name, (func, help_text) in commands.items():
        sub.add_parser(name, help=help_text).set_defaults(func=func)
    args = parser.parse_args(argv)
    return int(args.func(args))
