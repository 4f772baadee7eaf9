"""Two operator replicas on the real control plane (`a2rl operator --leader-elect`), and /metrics.

- Exactly one replica leads (the Lease's holder; its `a2rl_operator_leader` is 1), the other stands
  by: ready, and it reconciles nothing.
- The leader is SIGKILLed (a node loss): the standby takes the Lease once it expires and
  reconciles; each run has its children exactly once — the new leader resumes the first run
  without creating anything twice.
- A clean stop (SIGTERM) releases the Lease at once.
- `/metrics` (Prometheus text): runs by phase, the handlers' latency, the leader gauge, moving as
  runs are created.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from a2rl.constants import LABEL_RUN_UID, OPERATOR_LEASE
from tests.support.grading_support import create_run, run_name
from tests.support.operator_install import (
    OperatorProcess,
    install_crds,
    install_rbac,
    serviceaccount_kubeconfig,
)
from tests.support.operator_support import OPERATOR_NS, REPO
from tests.testenv.controlplane import free_port, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

# Short enough for a test, in the same proportions as the defaults (15 / 10 / 2 s).
LEASE = ["--leader-elect-lease-duration", "4", "--leader-elect-renew-deadline", "3",
         "--leader-elect-retry-period", "0.5"]  # fmt: skip
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def metrics(proc: OperatorProcess) -> dict[str, float]:
    """`name{labels}` → value of every sample the replica's /metrics answers."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.port}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, f"not a Prometheus sample: {line!r}"
            out[match[1] + (match[2] or "")] = float(match[3])
    return out


def lease_spec(admin: client.ApiClient, ns: str) -> dict[str, Any]:
    lease = client.CoordinationV1Api(admin).read_namespaced_lease(OPERATOR_LEASE, ns)
    spec: dict[str, Any] = admin.sanitize_for_serialization(lease)["spec"]
    return spec


def leads(proc: OperatorProcess) -> bool:
    return metrics(proc).get("a2rl_operator_leader") == 1


def children(core: client.CoreV1Api, batch: client.BatchV1Api, ns: str, uid: str) -> dict[str, int]:
    selector = f"{LABEL_RUN_UID}={uid}"
    return {
        "jobs": len(batch.list_namespaced_job(ns, label_selector=selector).items),
        "pvcs": len(core.list_namespaced_persistent_volume_claim(ns, label_selector=selector).items),
        "serviceaccounts": len(core.list_namespaced_service_account(ns, label_selector=selector).items),
    }


@pytest.fixture
def replicas(
    control_plane: Any, minio: Any, admin: client.ApiClient, make_namespace: Any, tmp_path: Path
) -> Iterator[tuple[str, list[OperatorProcess]]]:
    install_crds(admin, REPO / "crds")
    install_rbac(admin, OPERATOR_NS)
    ns = make_namespace()  # watched alone, and the Lease's namespace: other tests' operators never see it
    kubeconfig = serviceaccount_kubeconfig(
        admin, OPERATOR_NS, "a2rl-operator", tmp_path / "operator.kubeconfig"
    )
    env = {"AWS_ENDPOINT_URL": minio.endpoint, "AWS_ACCESS_KEY_ID": minio.access_key,
           "AWS_SECRET_ACCESS_KEY": minio.secret_key}  # fmt: skip
    args = ["-n", ns, "--leader-elect", "--leader-elect-namespace", ns, *LEASE,
            "--store-uri", "s3://a2rl-ha/runs", "--no-scoped-store-credentials", "--workspace-size", "1Gi",
            "--store-egress", "127.0.0.1/32:9000", "--apiserver-egress", "127.0.0.1/32:6443"]  # fmt: skip
    procs = [
        OperatorProcess(kubeconfig, tmp_path / f"operator-{i}.log", args=args, port=free_port(), env=env)
        for i in range(2)
    ]
    try:
        for proc in procs:
            proc.start()  # returns once /readyz answers 200: a standby is ready too
        yield ns, procs
    finally:
        for i, proc in enumerate(procs):
            proc.stop()
            print(f"--- operator {i} log tail ---\n{proc.log_tail(30)}")


def test_one_leader_a_standby_that_takes_over_and_metrics(
    replicas: tuple[str, list[OperatorProcess]], admin: client.ApiClient
) -> None:
    ns, procs = replicas
    start = time.monotonic()

    def mark(what: str) -> None:
        print(f"{time.monotonic() - start:6.1f}s {what}")

    core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)

    leader = wait_for(lambda: next((p for p in procs if leads(p)), None), timeout=20, what="a leader")
    (standby,) = [p for p in procs if p is not leader]
    mark("a leader")
    assert not leads(standby)
    with urllib.request.urlopen(f"http://127.0.0.1:{standby.port}/readyz", timeout=5) as resp:
        assert json.load(resp)["reason"].startswith("standby: the Lease is held by ")
    lease = lease_spec(admin, ns)
    assert lease["holderIdentity"] and lease["leaseDurationSeconds"] == 4

    first = create_run(admin, ns, run_name())["metadata"]["uid"]
    wait_for(lambda: children(core, batch, ns, first)["jobs"] == 1, timeout=60, what="the first run's Job")
    mark("first run's Job")

    # The handler is timed when it returns, which is after its Job appears: wait for the count.
    def timed_handler() -> dict[str, float] | None:
        seen = metrics(leader)
        timed = seen.get('a2rl_operator_handler_seconds_count{handler="on_benchrun"}', 0)
        return seen if timed >= 1 else None

    seen = wait_for(timed_handler, timeout=15, what="the leader's on_benchrun handler in its metrics")
    assert sum(v for k, v in seen.items() if k.startswith("a2rl_benchruns{")) == 1
    # The standby watches nothing and reconciled nothing.
    assert not any(k.startswith(("a2rl_operator_handler", "a2rl_benchruns{")) for k in metrics(standby))

    leader.kill()  # no release: the standby waits for the Lease to expire
    wait_for(lambda: leads(standby), timeout=30, what="the standby leading")
    mark("the standby leads")
    taken = lease_spec(admin, ns)
    assert taken["holderIdentity"] != lease["holderIdentity"]
    assert taken["leaseTransitions"] == lease.get("leaseTransitions", 0) + 1

    second = create_run(admin, ns, run_name())["metadata"]["uid"]
    wait_for(lambda: children(core, batch, ns, second)["jobs"] == 1, timeout=60, what="the second run's Job")
    mark("second run's Job")
    wait_for(
        lambda: sum(v for k, v in metrics(standby).items() if k.startswith("a2rl_benchruns{")) == 2,
        timeout=30,
        what="both runs in the new leader's metrics",
    )
    # The new leader resumed the first run: nothing of either run exists twice.
    for uid in (first, second):
        assert children(core, batch, ns, uid) == {"jobs": 1, "pvcs": 1, "serviceaccounts": 1}, uid

    standby.stop()  # SIGTERM: a clean stop releases the Lease for the next replica at once
    assert standby.proc is not None and standby.proc.returncode == 0
    assert not lease_spec(admin, ns).get("holderIdentity")
