#!/usr/bin/env python3
"""The operator against a plain client doing the same work, side by side in one run (issue 23).

Needs a running control plane: `hack/testenv up` prints the admin KUBECONFIG.

    KUBECONFIG=... .venv/bin/python bench/operator_scale.py -n 200

0. Warm-up: `--warmup` runs (default 20) by the plain client in a namespace of their own, not
   measured: on a control plane just started, whichever side went first was the slower one.
   Its namespace is deleted before the plain client's turn, the plain client's before the
   operator's: neither side's window holds the other's pods (the scheduler retries them).
1. Plain client: N BenchRuns created one after the other in a namespace no operator watches,
   each run's children (the same manifests the operator builds: `workspace_children` +
   `workspace_job`) created by 16 threads (the operator's worker count) as soon as the run
   exists, as the operator's ServiceAccount (the same authentication and RBAC checks; the
   admin with `--plain-as-admin`). Runs/s from the first create to the last Job; CPU time of
   the threads that create the children (not of creating the BenchRuns, which the operator does
   not do either).
2. Operator: `a2rl operator -n <ns>` as its ServiceAccount, the same N BenchRuns; runs/s to the
   last workspace Job (a watch), the operator's CPU time. As the chart installs it on Kubernetes
   1.36+, the finalizer policy gives the runs of that namespace the operator's finalizer as they
   are created (`a2rl_operator.finalizer_policy`; `--no-finalizer-policy`: kopf patches it in).
3. Teardown: each namespace deleted, timed until it is gone; the operator's namespace with the
   operator running (its finalizers), the plain one (before the operator starts) without.

Prints the ratios. Not a timed test: figures depend on the machine (say its load: `uptime`).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support: installing the operator is test tooling

from a2rl_operator import finalizer_policy  # noqa: E402
from a2rl_operator.config import OperatorConfig  # noqa: E402
from a2rl_operator.kube import Kube  # noqa: E402
from a2rl_operator.manifests import parse_spec, workspace_children, workspace_job  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, LABEL_RUN_NAME  # noqa: E402
from bench.operator_apply import benchrun, delete_namespace  # noqa: E402
from tests.support.operator_install import (  # noqa: E402
    OperatorProcess,
    install_crds,
    install_finalizer_policy,
    install_rbac,
    remove_finalizer_policy,
    serviceaccount_kubeconfig,
)
from tests.testenv.controlplane import free_port  # noqa: E402

WORKERS = 16
STORE_URI = "s3://bench/runs"


SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def api_requests(admin: client.ApiClient) -> collections.Counter[str]:
    """The API server's own request counters (`apiserver_request_total`) by verb and resource: every
    client's calls (the controllers' too, the same in both phases); WATCH and GET /metrics left out."""
    method, url, headers, _, _ = admin.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    text = admin.call_api(method, url, header_params=headers).read().decode()
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        labels = dict(LABEL.findall(match["labels"]))
        if labels.get("verb") in ("WATCH", "") or not labels.get("resource"):
            continue
        sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
        counts[f"{labels['verb']} {labels['resource']}{sub}"] += int(float(match["value"]))
    return counts


HANDLER = re.compile(
    r'^a2rl_operator_handler_seconds_(?P<what>sum|count)\{handler="(?P<name>[^"]+)"\} (?P<v>\S+)$'
)


def handler_seconds(proc: OperatorProcess) -> dict[str, tuple[float, float]]:
    """(calls, total wall seconds) of each handler, from the operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for line in text.splitlines():
        if match := HANDLER.match(line):
            out[match["name"]][0 if match["what"] == "count" else 1] = float(match["v"])
    return {name: (v[0], v[1]) for name, v in out.items()}


def api_client(kubeconfig: str) -> client.ApiClient:
    """A client with a pooled connection per thread (as the operator has: `serve`)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = WORKERS + 4
    return client.ApiClient(configuration)


def new_namespace(core: client.CoreV1Api, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    time.sleep(1.0)  # the namespace's default ServiceAccount
    return ns


def create_runs(custom: client.CustomObjectsApi, ns: str, n: int) -> Iterator[dict[str, Any]]:
    """Create N BenchRuns one after the other (as `kubectl apply` does), yielding each as it exists."""
    for i in range(n):
        body = benchrun(f"run-{i:04d}")
        yield cast(
            dict[str, Any],
            custom.create_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, body),
        )


def plain_client(admin: client.ApiClient, creator: client.ApiClient, ns: str, n: int) -> dict[str, float]:
    """What the operator creates per run, created directly: the floor the operator is held to.

    Timed like the operator's side: from the first BenchRun create (by `admin`, the user) to the
    last Job, each run's children created by `creator` in the 16 threads as soon as its BenchRun
    exists (the operator sees it then)."""
    custom = client.CustomObjectsApi(admin)
    kube = Kube(creator)
    cfg = OperatorConfig(store_uri=STORE_URI)
    calls, cpu_s = 0, 0.0
    lock = threading.Lock()

    def children(run: dict[str, Any]) -> None:
        nonlocal calls, cpu_s
        cpu0 = time.thread_time()
        manifests = [*workspace_children(run, cfg), workspace_job(run, parse_spec(run), cfg)]
        for manifest in manifests:
            kube.ensure(manifest, run["metadata"]["uid"])
        with lock:
            calls += len(manifests)
            cpu_s += time.thread_time() - cpu0

    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = [pool.submit(children, run) for run in create_runs(custom, ns, n)]
        applied = time.monotonic() - start
        for future in futures:
            future.result()
    elapsed = time.monotonic() - start
    return {"seconds": elapsed, "applied_s": applied, "cpu_s": cpu_s, "calls": calls}


def with_operator(admin: client.ApiClient, ns: str, n: int, proc: OperatorProcess) -> dict[str, float]:
    """The same N runs through the running operator (`proc`), timed to the last workspace Job."""
    batch, custom = client.BatchV1Api(admin), client.CustomObjectsApi(admin)
    seen: set[str] = set()
    done = threading.Event()

    def saw(job: Any) -> None:
        run = (job.metadata.labels or {}).get(LABEL_RUN_NAME)
        if run:
            seen.add(run)

    def watch_jobs() -> None:
        """Until every run has its Job: list, then watch from there; again when a watch ends early
        (a control plane just started answers 429 "storage is (re)initializing" for a while)."""
        deadline = time.monotonic() + 900
        while len(seen) < n and time.monotonic() < deadline:
            try:
                listed = batch.list_namespaced_job(ns)
                for job in listed.items:
                    saw(job)
                w = watch.Watch()
                rv = listed.metadata.resource_version
                for event in w.stream(batch.list_namespaced_job, ns, resource_version=rv, timeout_seconds=60):
                    saw(event["object"])
                    if len(seen) >= n:
                        w.stop()
            except Exception as exc:
                print(f"the Job watch: {exc!r}; again", file=sys.stderr)
                time.sleep(0.5)
        done.set()

    threading.Thread(target=watch_jobs, daemon=True).start()
    time.sleep(0.5)
    cpu0, start = proc.cpu_seconds(), time.monotonic()
    for _ in create_runs(custom, ns, n):
        pass
    applied = time.monotonic() - start
    done.wait(900)
    elapsed = time.monotonic() - start
    return {"seconds": elapsed, "applied_s": applied, "cpu_s": proc.cpu_seconds() - cpu0, "jobs": len(seen)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=200, help="BenchRuns per side (default 200)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="admin kubeconfig")
    parser.add_argument("--no-teardown", action="store_true", help="leave the operator's namespace (quicker)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="runs created by the plain client first, not measured (default 20): on a control plane "
        "just started, the side measured first was the slower one",
    )
    parser.add_argument(
        "--no-finalizer-policy",
        action="store_true",
        help="no finalizer policy: kopf patches its finalizer into each run (a cluster before 1.36, "
        "or the chart's operator.finalizerAtCreate: false)",
    )
    parser.add_argument(
        "--plain-as-admin",
        action="store_true",
        help="the plain client creates the children as the admin (no RBAC checks) instead of as the "
        "operator's ServiceAccount",
    )
    args = parser.parse_args()
    if not args.kubeconfig:
        print(
            "operator_scale: set KUBECONFIG (hack/testenv up prints it) or pass --kubeconfig", file=sys.stderr
        )
        return 2
    admin = api_client(args.kubeconfig)
    core = client.CoreV1Api(admin)
    install_crds(admin, REPO / "crds")
    install_rbac(admin, "a2rl-system")
    work = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    kubeconfig = serviceaccount_kubeconfig(
        admin, "a2rl-system", "a2rl-operator", work / "operator.kubeconfig"
    )
    print(f"load average before: {os.getloadavg()[0]:.1f}")

    # The children as the operator's ServiceAccount (its authentication and RBAC checks, which
    # the API server spends CPU on per request) unless --plain-as-admin (system:masters: none).
    creator = admin if args.plain_as_admin else api_client(str(kubeconfig))
    warm_ns = new_namespace(core, "warmup") if args.warmup > 0 else None
    if warm_ns is not None:
        plain_client(admin, creator, warm_ns, args.warmup)
        delete_namespace(core, warm_ns, timeout=900)  # not timed
    plain_ns = new_namespace(core, "plain")
    before = api_requests(admin)
    plain = plain_client(admin, creator, plain_ns, args.n)
    time.sleep(2.0)  # the Job controller's pods
    plain_calls = api_requests(admin) - before
    # Gone before the operator's turn: its pods (unschedulable here: no volume provisioner) are
    # retried by the scheduler every few seconds, an Event update each, and that steady load fell
    # into the operator's window.
    plain_teardown = delete_namespace(core, plain_ns, timeout=900)
    op_ns = new_namespace(core, "operator")
    policy = None if args.no_finalizer_policy else f"{op_ns}-{finalizer_policy.NAME_SUFFIX}"
    if policy is not None:  # as the chart renders it with `operator.watchNamespaces: [op_ns]`
        install_finalizer_policy(admin, policy, [op_ns], benchrun("probe"))
    print(f"finalizer policy: {policy or 'none (kopf patches the finalizer in)'}")
    # The plain client's Secrets hold the operator's keys (no store user per run): the same here.
    operator_args = ["-n", op_ns, "--store-uri", STORE_URI, "--no-scoped-store-credentials"]
    proc = OperatorProcess(kubeconfig, work / "operator.log", operator_args, port=free_port())
    proc.start()
    try:
        before = api_requests(admin)
        op = with_operator(admin, op_ns, args.n, proc)
        handlers = handler_seconds(proc)
        time.sleep(2.0)
        op_calls = api_requests(admin) - before
        # With the operator running: its finalizers let the runs go.
        op_teardown = math.nan if args.no_teardown else delete_namespace(core, op_ns, timeout=900)
    finally:
        proc.stop()
        if policy is not None:
            remove_finalizer_policy(admin, policy)

    n = args.n
    plain_rate, op_rate = n / plain["seconds"], op["jobs"] / op["seconds"]
    print(f"load average after:  {os.getloadavg()[0]:.1f}")
    cpu_plain, cpu_op = plain["cpu_s"] / n * 1000, op["cpu_s"] / n * 1000
    rows = [
        ("runs/s (apply to last Job)", plain_rate, op_rate),
        ("s to apply the N BenchRuns", plain["applied_s"], op["applied_s"]),
        ("CPU ms per run", cpu_plain, cpu_op),
        ("namespace teardown s", plain_teardown, op_teardown),
    ]
    print(f"{'':28}{'plain client':>14}{'operator':>12}{'operator / plain':>18}")
    for label, a, b in rows:
        print(f"{label:28}{a:>14.1f}{b:>12.1f}{b / a:>18.2f}")
    print("\nthe operator's handlers (its /metrics): calls, mean and total wall seconds")
    for handler, (count, total) in sorted(handlers.items(), key=lambda kv: -kv[1][1]):
        print(f"  {handler:26}{count:>8.0f}{total / max(count, 1):>10.3f}{total:>10.1f}")
    print("\nAPI requests per run, all clients (controllers too), apply to last Job + 2 s:")
    print(f"{'':36}{'plain client':>14}{'operator':>12}")
    for key in sorted(set(plain_calls) | set(op_calls), key=lambda k: -op_calls[k]):
        print(f"{key:36}{plain_calls[key] / n:>14.2f}{op_calls[key] / n:>12.2f}")
    print(f"{'total':36}{sum(plain_calls.values()) / n:>14.2f}{sum(op_calls.values()) / n:>12.2f}")
    if op["jobs"] < n:
        print(f"operator: only {op['jobs']:.0f} of {n} Jobs within 900 s (log: {proc.log_path})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
