#!/usr/bin/env python3
"""Apply N BenchRuns at once and measure apply → workspace Job created, and the operator's peak RSS.

Needs a running control plane: `hack/testenv up` prints the KUBECONFIG (admin) to use.

    KUBECONFIG=... .venv/bin/python bench/operator_apply.py -n 200

The script installs the CRDs and the operator's RBAC, starts `a2rl operator` as its own
ServiceAccount (like the e2e tests), creates a fresh namespace, creates N BenchRuns as fast as the
API server takes them, and times each from just before its create call until a watch on Jobs
sees its workspace Job. Peak RSS is the operator's VmHWM from /proc. Not a timed test: it prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support: installing the operator is test tooling

from kubernetes import client, config, watch  # noqa: E402

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, LABEL_RUN_NAME  # noqa: E402
from tests.support.operator_install import (  # noqa: E402
    OperatorProcess,
    install_crds,
    install_rbac,
    serviceaccount_kubeconfig,
)
from tests.testenv.controlplane import free_port  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def benchrun(name: str) -> dict[str, object]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "BenchRun",
        "metadata": {"name": name},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": {"image": "agent:bench", "command": ["true"]},
            "budget": {"wallTimeSeconds": 3600},
            "resources": {"cpu": "10m", "memory": "16Mi"},
        },
    }


def delete_namespace(core: client.CoreV1Api, ns: str, timeout: float) -> float:
    """Delete the namespace and wait until it is gone; returns the seconds it took."""
    from kubernetes.client.exceptions import ApiException

    start = time.monotonic()
    core.delete_namespace(ns)
    while time.monotonic() - start < timeout:
        try:
            core.read_namespace(ns)
        except ApiException as exc:
            if exc.status == 404:
                return time.monotonic() - start
            raise
        time.sleep(1.0)
    raise TimeoutError(f"namespace {ns} still terminating after {timeout:.0f}s")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=200, help="number of BenchRuns (default 200)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="admin kubeconfig")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for all Jobs")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the namespace afterwards (its BenchRuns keep the finalizer once the operator stops)",
    )
    args = parser.parse_args()
    if not args.kubeconfig:
        print(
            "operator_apply: set KUBECONFIG (hack/testenv up prints it) or pass --kubeconfig", file=sys.stderr
        )
        return 2

    admin = config.new_client_from_config(config_file=args.kubeconfig)
    install_crds(admin, REPO / "crds")
    install_rbac(admin, "a2rl-system")
    work = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    kubeconfig = serviceaccount_kubeconfig(
        admin, "a2rl-system", "a2rl-operator", work / "operator.kubeconfig"
    )
    operator = OperatorProcess(
        kubeconfig, work / "operator.log", ["--store-uri", "s3://bench/runs"], port=free_port()
    )
    operator.start()
    core, custom, batch = client.CoreV1Api(admin), client.CustomObjectsApi(admin), client.BatchV1Api(admin)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    time.sleep(1.0)  # let the namespace's default ServiceAccount appear

    applied: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = threading.Event()

    def watch_jobs() -> None:
        w = watch.Watch()
        for event in w.stream(batch.list_namespaced_job, ns, timeout_seconds=int(args.timeout) + 60):
            run = (event["object"].metadata.labels or {}).get(LABEL_RUN_NAME)
            if run and run not in seen:
                seen[run] = time.monotonic()
                if len(seen) >= args.n:
                    w.stop()
        done.set()

    watcher = threading.Thread(target=watch_jobs, daemon=True)
    watcher.start()
    time.sleep(0.5)
    start = time.monotonic()
    cleanup_s: float | None = None
    try:
        for i in range(args.n):
            name = f"run-{i:04d}"
            applied[name] = time.monotonic()
            custom.create_namespaced_custom_object(
                API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, benchrun(name)
            )
        apply_s = time.monotonic() - start
        done.wait(args.timeout)
        total_s = time.monotonic() - start
        rss_kib = operator.peak_rss_kib()
        cpu_s = operator.cpu_seconds()
        if not args.keep:
            # While the operator still runs: its finalizer lets each BenchRun go.
            cleanup_s = delete_namespace(core, ns, timeout=args.timeout)
    finally:
        operator.stop()

    latencies = [seen[n] - applied[n] for n in applied if n in seen]
    missing = args.n - len(latencies)
    print(f"BenchRuns applied:          {args.n} in {apply_s:.1f}s ({args.n / apply_s:.0f}/s)")
    print(
        f"workspace Jobs created:     {len(latencies)} in {total_s:.1f}s"
        + (f"  ({missing} MISSING)" if missing else "")
    )
    if latencies:
        print(f"apply → Job created  p50:   {percentile(latencies, 0.50) * 1000:.0f} ms")
        print(f"apply → Job created  p95:   {percentile(latencies, 0.95) * 1000:.0f} ms")
        mean_ms = statistics.mean(latencies) * 1000
        print(f"apply → Job created  max:   {max(latencies) * 1000:.0f} ms (mean {mean_ms:.0f} ms)")
    print(f"operator peak RSS (VmHWM):  {rss_kib / 1024:.1f} MiB")
    print(f"operator CPU time:          {cpu_s:.1f} s ({cpu_s / args.n * 1000:.0f} ms per BenchRun)")
    if cleanup_s is not None:
        print(f"namespace deleted in:       {cleanup_s:.1f}s (finalizers released by the operator)")
    print(f"operator log:               {operator.log_path}")
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
