"""`Kube` against the real API server: a namespace being deleted refuses new children with a 403
the operator recognises (no traceback, nothing to retry: the run goes with its namespace); a status
write from a stale read is refused and redone from a fresh one."""

from __future__ import annotations

from typing import Any

import pytest
from a2rl_operator.kube import Kube, NamespaceTerminatingError, is_namespace_terminating
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL

pytestmark = pytest.mark.cluster

HOLD = "a2rl.dev/test-hold"


def config_map(ns: str, name: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def test_a_terminating_namespace_is_recognised_and_other_refusals_are_not(
    control_plane: Any, namespace: str
) -> None:
    from tests.testenv.controlplane import wait_for

    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    kube = Kube(api)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "first", "namespace": namespace}}
    assert kube.ensure(sa, owner_uid="x") is True
    # A finalizer keeps the namespace in Terminating while the test creates into it.
    core.create_namespaced_config_map(namespace, config_map(namespace, "hold", [HOLD]))
    core.delete_namespace(namespace)
    wait_for(lambda: core.read_namespace(namespace).status.phase == "Terminating", what="Terminating")
    try:
        late = {**sa, "metadata": {"name": "late", "namespace": namespace}}
        with pytest.raises(NamespaceTerminatingError, match="is being deleted"):
            kube.ensure(late, owner_uid="x")
    finally:
        core.patch_namespaced_config_map("hold", namespace, {"metadata": {"finalizers": []}})
    # A 403 for another reason (RBAC) is not mistaken for it.
    other = ApiException(status=403, reason="Forbidden")
    other.body = '{"kind":"Status","reason":"Forbidden","details":{"kind":"serviceaccounts"}}'
    assert not is_namespace_terminating(other)


def test_a_status_write_from_a_stale_read_is_refused_then_redone_on_a_fresh_one(
    control_plane: Any, namespace: str
) -> None:
    """What `refresh` relies on when it reads a run from `WatchedRuns`: a write guarded by a lagging
    resourceVersion gets a 409, `update_status` reads the run again and writes from there, and
    `written` gets the run as the API server stored it (the state the cache keeps)."""
    from tests.support.operator_install import install_crds
    from tests.support.operator_support import REPO

    api = control_plane.api_client()
    install_crds(api, REPO / "crds")
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "BenchRun",
        "metadata": {"name": "stale-read"},
        "spec": {"task": "arith", "baseModel": {"name": "tiny", "source": "builtin:tiny"},
                 "agent": {"image": "agent:1", "command": ["true"]}, "budget": {"wallTimeSeconds": 60}},
    }  # fmt: skip
    stale = custom.create_namespaced_custom_object(API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, body)
    kube = Kube(api)
    kube.update_status(namespace, "stale-read", lambda _run: {"phase": "Pending"})  # moves it on
    seen: list[dict[str, Any]] = []
    reads: list[str] = []

    def mutate(run: dict[str, Any]) -> dict[str, Any]:
        reads.append(run["metadata"]["resourceVersion"])
        return {**(run.get("status") or {}), "phase": "Running"}

    assert kube.update_status(namespace, "stale-read", mutate, initial=stale, written=seen.append)
    fresh = custom.get_namespaced_custom_object(
        API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, "stale-read"
    )
    assert fresh["status"]["phase"] == "Running"
    # The stale read first (refused), then the fresh one; `written` got what the API server stored.
    assert reads[0] == stale["metadata"]["resourceVersion"] and len(reads) == 2 and reads[1] != reads[0]
    assert [r["metadata"]["resourceVersion"] for r in seen] == [fresh["metadata"]["resourceVersion"]]
    assert seen[0]["status"] == fresh["status"]
