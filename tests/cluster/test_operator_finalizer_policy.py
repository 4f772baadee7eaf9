"""The finalizer policy (`a2rl_operator.finalizer_policy`, the chart's `operator.finalizerAtCreate`)
on the real control plane, the operator running: the API server gives each new run of a watched
namespace the operator's finalizer, keeps any other finalizer, leaves other namespaces alone; the
operator reconciles such a run without patching it first, and deleting it still goes through
the finalizer (retention) and lets it go.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2rl_operator import finalizer_policy
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, COND_ACCEPTED, FINALIZER
from tests.support.grading_support import create_run, run_name
from tests.support.operator_install import (
    OperatorProcess,
    install_crds,
    install_finalizer_policy,
    remove_finalizer_policy,
)
from tests.support.operator_support import REPO, condition, get_run, started_operator
from tests.support.watch_recorder import Recorder
from tests.testenv.controlplane import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

FOREIGN = "example.com/keep-until-reviewed"


def _spec() -> dict[str, Any]:
    return {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["true"]},
        "budget": {"wallTimeSeconds": 3600},
    }


def _run(name: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "BenchRun", "metadata": meta, "spec": _spec()}


@pytest.fixture
def policy_in(admin: client.ApiClient, make_namespace: Any) -> Iterator[str]:
    """A namespace bound by the finalizer policy (a policy of this test's own, as the chart renders it)."""
    install_crds(admin, REPO / "crds")
    ns = make_namespace(prefix="fin")
    name = f"t-{uuid.uuid4().hex[:6]}-{finalizer_policy.NAME_SUFFIX}"
    try:
        install_finalizer_policy(admin, name, [ns], _run("probe"), timeout=30)
        yield ns
    finally:
        remove_finalizer_policy(admin, name)


@pytest.fixture
def operator(
    policy_in: str, minio: Any, admin: client.ApiClient, tmp_path: Path
) -> Iterator[tuple[str, OperatorProcess]]:
    env = {"AWS_ENDPOINT_URL": minio.endpoint, "AWS_ACCESS_KEY_ID": minio.access_key,
           "AWS_SECRET_ACCESS_KEY": minio.secret_key}  # fmt: skip
    args = ["-n", policy_in, "--store-uri", "s3://a2rl-finalizer-policy/runs",
            "--no-scoped-store-credentials", "--workspace-size", "1Gi", "--store-egress", "127.0.0.1/32:9000",
            "--apiserver-egress", "127.0.0.1/32:6443"]  # fmt: skip
    with started_operator(admin, tmp_path, args, env=env) as proc:
        yield policy_in, proc


def test_runs_arrive_with_the_finalizer_and_are_reconciled_without_a_patch(
    operator: tuple[str, OperatorProcess], admin: client.ApiClient, make_namespace: Any
) -> None:
    ns, proc = operator
    custom = client.CustomObjectsApi(admin)

    def create(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = custom.create_namespaced_custom_object(
            API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, body
        )
        return created

    rv = custom.list_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL)["metadata"][
        "resourceVersion"
    ]
    events = Recorder(custom.list_namespaced_custom_object, (API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL), rv)
    name = run_name()
    run = create_run(admin, ns, name)
    assert run["metadata"]["finalizers"] == [FINALIZER]
    # Someone else's finalizer stays, ours is added after it; ours is never added twice.
    kept = create(ns, _run(run_name(), [FOREIGN]))
    assert kept["metadata"]["finalizers"] == [FOREIGN, FINALIZER]
    once = create(ns, _run(run_name(), [FINALIZER]))
    assert once["metadata"]["finalizers"] == [FINALIZER]
    # A namespace outside the binding (no operator serves it): nothing added.
    other = make_namespace(prefix="nofin")
    assert not create(other, _run(run_name())).get("metadata", {}).get("finalizers")

    wait_for(lambda: condition(get_run(admin, ns, name), COND_ACCEPTED), timeout=60, what="the run accepted")

    def watched() -> list[dict[str, Any]]:
        return [e for e in list(events.events) if e["object"]["metadata"]["name"] == name]

    # The watch may deliver the status write after the GET above read it.
    wait_for(lambda: any(e["type"] == "MODIFIED" for e in watched()), timeout=30, what="its first change")
    events.stop()
    mine = watched()
    assert mine[0]["type"] == "ADDED"
    # The first change of the run is its first status: no PATCH of kopf's (a finalizer) came before.
    first_change = next(e["object"] for e in mine if e["type"] == "MODIFIED")
    assert condition(first_change, COND_ACCEPTED) is not None, first_change["metadata"]
    assert first_change["metadata"].get("finalizers") == [FINALIZER]

    # Deleting it goes through the finalizer: retention, then the run is gone (not forced).
    custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name)

    def gone() -> bool:
        try:
            get_run(admin, ns, name)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=60, what="the deleted run gone")
    log = proc.log_path.read_text(errors="replace")
    assert f"BenchRun {ns}/{name} deleted; final record" in log and "releasing BenchRun" not in log
    # The other finalizer is its owner's to remove: the namespace can go once it is.
    custom.patch_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, kept["metadata"]["name"],
        {"metadata": {"finalizers": [FINALIZER]}},
    )  # fmt: skip
