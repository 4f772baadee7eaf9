"""`a2rl operator`: run the kopf operator that turns BenchRuns into sandboxed workloads."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from a2rl.errors import A2rlError

if TYPE_CHECKING:
    from a2rl_operator.config import OperatorConfig


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "operator",
        help="run the BenchRun operator (kopf) against the current kubeconfig or in-cluster",
        description="Reconcile BenchRuns into workspace Jobs. Uses $KUBECONFIG, or the in-cluster "
        "service account when run in a pod.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument(
        "-n", "--namespace", action="append", default=[], help="watch only this namespace (repeatable)"
    )
    p.add_argument(
        "--health",
        metavar="HOST:PORT",
        help="serve the probes here, e.g. 0.0.0.0:8080: liveness GET /healthz (the process answers), "
        "readiness GET /readyz (started, and the API server answers)",
    )
    p.add_argument("--store-uri", help="default store of runs that name none (default: $A2RL_STORE_URI)")
    p.add_argument(
        "--recorder-image",
        default=os.environ.get("A2RL_RECORDER_IMAGE"),
        help="image of the recorder sidecar",
    )
    p.add_argument(
        "--setup-image",
        default=os.environ.get("A2RL_SETUP_IMAGE"),
        help="image of the workspace set-up init container (default: the grader image)",
    )
    p.add_argument(
        "--store-egress",
        action="append",
        default=[],
        metavar="CIDR[:PORT]",
        help="where workspace pods may reach the object store (repeatable)",
    )
    p.add_argument(
        "--apiserver-egress",
        action="append",
        default=[],
        metavar="CIDR[:PORT]",
        help="where workspace pods may reach the API server (repeatable; default: in-cluster service IP)",
    )
    p.add_argument(
        "--gateway-metrics-from",
        action="append",
        default=[],
        metavar="NAMESPACE[:KEY=VALUE,…]",
        help="pods that may scrape the gateway pods' /metrics, e.g. Prometheus in monitoring "
        "(repeatable; an ingress rule of every gateway NetworkPolicy)",
    )
    p.add_argument("--setup-allowance", type=int, help="seconds added to the budget for the Job deadline")
    p.add_argument(
        "--recorder-drain-timeout",
        type=int,
        help="A2RL_RECORDER_DRAIN_TIMEOUT of each recorder sidecar: from its SIGTERM to everything "
        "stored; the pod's termination grace is graceSeconds + this + 15 s (default 60)",
    )
    p.add_argument(
        "--no-scoped-store-credentials",
        dest="scoped_store_credentials",
        action="store_false",
        default=None,
        help="give recorders and grading pods the operator's store keys instead of users of their own",
    )
    p.add_argument("--workspace-size", help="size of each workspace PVC (default 20Gi)")
    p.add_argument("--storage-class", help="storage class of workspace PVCs")
    p.add_argument("--finalizer-timeout", type=int, help="seconds the finalizer may hold a deleted run")
    p.add_argument(
        "--queue-timeout",
        type=int,
        help="seconds a queued run may wait for Kueue's first admission before it fails NotScheduled "
        "(default: $A2RL_QUEUE_TIMEOUT, else no limit)",
    )
    p.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of the Lease a2rl-operator reconciles, "
        "the others stand by and take over when it stops or stops renewing",
    )
    p.add_argument(
        "--leader-elect-namespace",
        help="namespace of the Lease (default: $POD_NAMESPACE, the pod's namespace, else default)",
    )
    for flag, default, what in (
        ("lease-duration", 15.0, "how long a Lease not renewed stays with its holder"),
        ("renew-deadline", 10.0, "how long the leader keeps trying to renew before it stops"),
        ("retry-period", 2.0, "how often the leader renews and a standby tries"),
    ):
        p.add_argument(f"--leader-elect-{flag}", type=float, default=default, metavar="SECONDS",
                       help=f"{what} (default {default:g})")  # fmt: skip
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=run)


def _config(args: argparse.Namespace) -> OperatorConfig:
    from a2rl_operator.config import (
        Egress,
        OperatorConfig,
        default_store_uri,
        parse_egress,
        parse_metrics_scraper,
        pod_defaults_from_env,
        queue_timeout_from_env,
        store_credentials_from_env,
    )
    from a2rl_operator.grading.config import GradingConfig

    apiserver = [parse_egress(e) for e in args.apiserver_egress]
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not apiserver and host and port and port.isdigit():
        apiserver = [parse_egress(f"{host}:{port}")]
    queue_timeout = args.queue_timeout
    if queue_timeout is None:
        queue_timeout = queue_timeout_from_env(os.environ)
    if queue_timeout is not None and queue_timeout <= 0:
        raise A2rlError(f"--queue-timeout: a number of seconds above 0 (got {queue_timeout})")
    overrides = {
        k: v
        for k, v in {
            "recorder_image": args.recorder_image,
            "setup_image": args.setup_image,
            "setup_allowance_s": args.setup_allowance,
            "recorder_drain_timeout_s": args.recorder_drain_timeout,
            "scoped_store_credentials": args.scoped_store_credentials,
            "workspace_size": args.workspace_size,
            "storage_class": args.storage_class,
            "finalizer_timeout_s": args.finalizer_timeout,
            "queue_timeout_s": queue_timeout,
        }.items()
        if v is not None
    }
    store_egress: tuple[Egress, ...] = tuple(parse_egress(e) for e in args.store_egress)
    return OperatorConfig(
        store_uri=args.store_uri or default_store_uri(),
        store_credentials=store_credentials_from_env(os.environ),
        store_egress=store_egress,
        apiserver_egress=tuple(apiserver),
        gateway_metrics_from=tuple(parse_metrics_scraper(e) for e in args.gateway_metrics_from),
        grading=GradingConfig.from_env(os.environ),
        pod_defaults=pod_defaults_from_env(os.environ),
        **overrides,
    )


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        if not os.path.exists(args.kubeconfig):
            raise A2rlError(f"{args.kubeconfig}: no such kubeconfig")
        # Before importing kubernetes: it reads $KUBECONFIG at import time, and kopf logs in
        # through it with the default location.
        os.environ["KUBECONFIG"] = args.kubeconfig
    operator_config = _config(args)
    health_address = None
    if args.health:
        from a2rl_operator.health import parse_address

        try:
            health_address = parse_address(args.health)
        except ValueError as exc:
            raise A2rlError(f"--health {exc}") from None

    from a2rl_operator import leader
    from a2rl_operator.serve import ServeOptions, serve
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    lease = None
    if args.leader_elect:
        lease = leader.LeaseSettings(
            namespace=args.leader_elect_namespace or leader.default_namespace(),
            identity=leader.default_identity(),
            lease_duration_s=args.leader_elect_lease_duration,
            renew_deadline_s=args.leader_elect_renew_deadline,
            retry_period_s=args.leader_elect_retry_period,
        )
        for problem in lease.problems():
            raise A2rlError(problem)
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    except (ConfigException, OSError) as exc:
        raise A2rlError(f"cannot load Kubernetes credentials: {exc}") from None
    options = ServeOptions(
        namespaces=tuple(args.namespace), health_address=health_address, lease=lease, verbose=args.verbose
    )
    return serve(operator_config, options, client.Configuration.get_default_copy())
