"""`Kube.ensure` against the real API server: a namespace being deleted refuses new children with
a 403 the operator recognises (no traceback, nothing to retry: the run goes with its namespace)."""

from __future__ import annotations

from typing import Any

import pytest
from a2rl_operator.kube import Kube, NamespaceTerminatingError, is_namespace_terminating
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
