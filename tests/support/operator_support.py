"""Helpers of the tests that run the operator on the real test control plane.

The operator runs as `a2rl operator` in a subprocess, authenticated as its own ServiceAccount
bound to the chart's ClusterRole (`started_operator`); the test cluster has no volume
provisioner, so the tests pre-provision PersistentVolumes (`persistent_volumes`). The rest reads
BenchRuns and waits for their conditions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL
from tests.support.operator_install import (
    OperatorProcess,
    install_crds,
    install_rbac,
    serviceaccount_kubeconfig,
)

REPO = Path(__file__).resolve().parents[2]
OPERATOR_NS = "a2rl-system"
#: Labels of a namespace that admits only pods of the `restricted` Pod Security Standard.
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@contextmanager
def persistent_volumes(admin: client.ApiClient, prefix: str, count: int) -> Iterator[list[str]]:
    """`count` PersistentVolumes named `{prefix}-XXXXXX` for the workspace PVCs to bind to (the
    PV controller binds each PVC to one; a pod whose PVC stays unbound is never scheduled)."""
    core = client.CoreV1Api(admin)
    names = [f"{prefix}-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    for name in names:
        pv_spec = {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "nfs": {"server": "127.0.0.1", "path": f"/{name}"},
        }
        core.create_persistent_volume({"metadata": {"name": name}, "spec": pv_spec})
    yield names
    for name in names:
        core.delete_persistent_volume(name)


@contextmanager
def started_operator(
    admin: client.ApiClient,
    tmp: Path,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    log_tail_lines: int = 40,
) -> Iterator[OperatorProcess]:
    """The CRDs and the operator's RBAC installed, then `a2rl operator ARGS` running as the
    operator's ServiceAccount (with `env` on top of this process's environment) until exit,
    when its log tail is printed."""
    from tests.testenv.controlplane import free_port

    install_crds(admin, REPO / "crds")
    install_rbac(admin, OPERATOR_NS)
    kubeconfig = serviceaccount_kubeconfig(admin, OPERATOR_NS, "a2rl-operator", tmp / "operator.kubeconfig")
    proc = OperatorProcess(kubeconfig, tmp / "operator.log", args=args, port=free_port(), env=env)
    proc.start()
    yield proc
    proc.stop()
    print("--- operator log tail ---\n" + proc.log_tail(log_tail_lines))


def get_run(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    run: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name
    )
    return run


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """The status condition of `type_` of a BenchRun or BenchSubmission (None: not set)."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def wait_run(
    api: client.ApiClient,
    ns: str,
    name: str,
    type_: str,
    status: str = "True",
    reason: str | None = None,
    timeout: float = 60,
) -> dict[str, Any]:
    """The BenchRun once its condition `type_` has `status` (and `reason`, where given); its
    status is printed when that does not happen within `timeout` seconds."""
    from tests.testenv.controlplane import wait_for

    def check() -> dict[str, Any] | None:
        run = get_run(api, ns, name)
        c = condition(run, type_)
        return run if c and c["status"] == status and (reason is None or c["reason"] == reason) else None

    try:
        result: dict[str, Any] = wait_for(
            check, timeout=timeout, what=f"{type_}={status} {reason or ''} on {ns}/{name}"
        )
    except TimeoutError:
        print(json.dumps(get_run(api, ns, name).get("status"), indent=1))
        raise
    return result
