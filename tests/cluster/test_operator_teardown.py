"""Deleting a namespace of runs on the real control plane, the operator running.

Once the namespace is terminating the operator writes no status and posts no Event there (the API
server would refuse every Event; kopf retried each nine times), reconciles nothing, and still
lets every run go through its finalizer (the final record reaches the store).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, LABEL_RUN_UID
from tests.support.grading_support import create_run, run_name
from tests.support.operator_install import OperatorProcess
from tests.support.operator_support import started_operator
from tests.support.watch_recorder import Recorder
from tests.testenv.controlplane import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

RUNS = 4


@pytest.fixture
def operator(
    control_plane: Any, minio: Any, admin: client.ApiClient, make_namespace: Any, tmp_path: Path
) -> Iterator[tuple[str, OperatorProcess]]:
    ns = make_namespace()
    env = {"AWS_ENDPOINT_URL": minio.endpoint, "AWS_ACCESS_KEY_ID": minio.access_key,
           "AWS_SECRET_ACCESS_KEY": minio.secret_key}  # fmt: skip
    args = ["-n", ns, "--store-uri", "s3://a2rl-teardown/runs", "--no-scoped-store-credentials",
            "--workspace-size", "1Gi", "--store-egress", "127.0.0.1/32:9000",
            "--apiserver-egress", "127.0.0.1/32:6443"]  # fmt: skip
    with started_operator(admin, tmp_path, args, env=env) as proc:
        yield ns, proc


def test_a_terminating_namespace_gets_no_status_writes_nor_events(
    operator: tuple[str, OperatorProcess], admin: client.ApiClient
) -> None:
    ns, proc = operator
    core, batch, custom = client.CoreV1Api(admin), client.BatchV1Api(admin), client.CustomObjectsApi(admin)
    uids = [create_run(admin, ns, run_name())["metadata"]["uid"] for _ in range(RUNS)]
    for uid in uids:
        wait_for(lambda uid=uid: batch.list_namespaced_job(ns, label_selector=f"{LABEL_RUN_UID}={uid}").items,
                 timeout=60, what="the run's Job")  # fmt: skip

    # Every run's reconcile has created its children (the log says so), then the watches start.
    def reconciled() -> int:
        lines = proc.log_path.read_text(errors="replace").splitlines()
        return sum(f"BenchRun {ns}/" in line and ": created " in line for line in lines)

    wait_for(lambda: reconciled() >= RUNS, timeout=30, what="every run's reconcile")
    time.sleep(1)
    events_rv = core.list_namespaced_event(ns).metadata.resource_version
    runs_rv = custom.list_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL)["metadata"][
        "resourceVersion"
    ]
    events = Recorder(core.list_namespaced_event, (ns,), events_rv)
    runs = Recorder(
        custom.list_namespaced_custom_object, (API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL), runs_rv
    )
    log_before = proc.log_path.read_text(errors="replace")

    start = time.monotonic()
    core.delete_namespace(ns)
    deleted_at = time.time()

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    try:
        wait_for(gone, timeout=150, interval=0.5, what=f"namespace {ns} deleted")
    except TimeoutError:
        left = admin.sanitize_for_serialization(core.read_namespace(ns))["status"]
        raise AssertionError(f"namespace {ns} still there: {left}\n{proc.log_tail(40)}") from None
    print(f"namespace of {RUNS} runs deleted in {time.monotonic() - start:.1f}s")
    events.stop()
    runs.stop()

    posted = [e["object"] for e in events.events if e["type"] == "ADDED"]
    assert not posted, [(e["involvedObject"]["kind"], e["reason"], e["message"]) for e in posted]
    last: dict[str, Any] = {}
    for event in runs.events:
        body = event["object"]
        uid = body["metadata"]["uid"]
        if uid in last and event["type"] == "MODIFIED":
            assert body.get("status") == last[uid].get("status"), f"status written after {deleted_at}"
        last[uid] = body
    # Every run went through its finalizer (a final record in the store), none was forced.
    assert {e["object"]["metadata"]["uid"] for e in runs.events if e["type"] == "DELETED"} == set(uids)
    log_after = proc.log_path.read_text(errors="replace")[len(log_before) :]
    assert "being terminated" not in log_after and "Request attempt" not in log_after, log_after[-3000:]
    assert "releasing BenchRun" not in log_after  # retention done, not given up
