"""`a2rl operator`: run the kopf operator that turns BenchRuns into sandboxed workloads."""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Any

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
    p.add_argument("--setup-allowance", type=int, help="seconds added to the budget for the Job deadline")
    p.add_argument(
        "--recorder-drain-timeout",
        type=int,
        help="A2RL_RECORDER_DRAIN_TIMEOUT of each recorder sidecar; sizes the pod's termination grace "
        "(default 600)",
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

    import asyncio
    import contextlib

    import kopf
    from a2rl_operator import health
    from a2rl_operator.kube import Kube
    from a2rl_operator.metrics import OperatorMetrics
    from a2rl_operator.quiet_logs import quiet_routine_successes
    from a2rl_operator.registry import MAX_WORKERS, build_registry
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    except (ConfigException, OSError) as exc:
        raise A2rlError(f"cannot load Kubernetes credentials: {exc}") from None

    api_config = client.Configuration.get_default_copy()
    # One pooled connection per handler thread (kopf's sync handlers run in a thread pool).
    api_config.connection_pool_maxsize = MAX_WORKERS + 4
    metrics = OperatorMetrics()
    memo = kopf.Memo(kube=Kube(client.ApiClient(api_config)), config=operator_config, metrics=metrics)
    kopf.configure(verbose=args.verbose, debug=args.verbose)
    if not args.verbose:
        quiet_routine_successes()
    elector = _elector(args, client.ApiClient(api_config), metrics) if args.leader_elect else None

    def standby() -> str | None:
        if elector is None or metrics.leader.value() == 1:
            return None
        return f"the Lease is held by {elector.holder or 'another replica'}"

    async def main() -> int:
        started = asyncio.Event()  # kopf raises it once its startup handlers have run
        async with contextlib.AsyncExitStack() as stack:
            if health_address is not None:
                check = health.ApiServerCheck(health.kubernetes_probe(api_config))
                readiness = health.Readiness(started, check, standby)
                await stack.enter_async_context(health.serving(*health_address, readiness, metrics.render))
            if elector is None:
                metrics.leader.set(1)
            else:
                await elector.acquire()
            settings = kopf.OperatorSettings()
            # With namespaces given, kopf would watch Namespaces and stop serving one as soon as it
            # is marked for deletion, its BenchRuns' finalizers still pending (they never finish):
            # the namespaces are taken as given instead (Kueue's CRD must exist at start-up then).
            settings.scanning.disabled = bool(args.namespace)
            operator = asyncio.create_task(
                kopf.operator(
                    settings=settings,
                    registry=build_registry(operator_config),
                    # No kopf peering: one replica, or one leader of several (--leader-elect).
                    standalone=True,
                    clusterwide=not args.namespace,
                    namespaces=args.namespace,
                    ready_flag=started,
                    memo=memo,
                )
            )
            if elector is None:
                await operator
                return 0
            holding = asyncio.create_task(elector.hold())
            await asyncio.wait({operator, holding}, return_when=asyncio.FIRST_COMPLETED)
            if holding.done():
                # Another replica may take over once the Lease expires: stop acting now, handlers
                # in flight included (their effects are idempotent and the next leader resumes).
                logging.getLogger("a2rl.operator").error("exiting: this replica no longer leads")
                logging.shutdown()
                os._exit(LOST_LEADERSHIP_EXIT)
            holding.cancel()
            await operator
            await asyncio.to_thread(elector.release)
            return 0

    with contextlib.suppress(asyncio.CancelledError):  # as kopf.run: a stop by signal
        return asyncio.run(main())
    return 0


LOST_LEADERSHIP_EXIT = 3


def _elector(args: argparse.Namespace, api: Any, metrics: Any) -> Any:
    from a2rl_operator import leader

    settings = leader.LeaseSettings(
        namespace=args.leader_elect_namespace or leader.default_namespace(),
        identity=leader.default_identity(),
        lease_duration_s=args.leader_elect_lease_duration,
        renew_deadline_s=args.leader_elect_renew_deadline,
        retry_period_s=args.leader_elect_retry_period,
    )
    for problem in settings.problems():
        raise A2rlError(problem)
    return leader.LeaderElector(
        leader.LeaseClient(api, settings),
        settings,
        on_change=lambda leading: metrics.leader.set(int(leading)),
    )
