"""`a2rl operator` as a process: the probe and metrics server, leader election, then kopf.

The CLI parses arguments into `ServeOptions` and the `OperatorConfig`; `serve` runs until kopf
stops (SIGTERM, SIGINT) and returns the exit code, or exits the process at once (code
`LOST_LEADERSHIP_EXIT`) when a leader loses its Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass

import kopf
from kubernetes import client

from a2rl_operator import health, leader
from a2rl_operator.config import OperatorConfig
from a2rl_operator.kube import Kube
from a2rl_operator.metrics import OperatorMetrics
from a2rl_operator.quiet_logs import quiet_routine_successes
from a2rl_operator.registry import MAX_WORKERS, build_registry

LOST_LEADERSHIP_EXIT = 3
log = logging.getLogger("a2rl.operator")


@dataclass(frozen=True)
class ServeOptions:
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    health_address: tuple[str, int] | None = None
    lease: leader.LeaseSettings | None = None  # None: run alone (no leader election)
    verbose: bool = False


def _kopf_settings(options: ServeOptions) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # With namespaces given, kopf would watch Namespaces and stop serving one as soon as it is
    # marked for deletion, its BenchRuns' finalizers still pending (they never finish): the
    # namespaces are taken as given instead (Kueue's CRD must exist at start-up then).
    settings.scanning.disabled = bool(options.namespaces)
    return settings


async def _serve(config: OperatorConfig, options: ServeOptions, api_config: client.Configuration) -> int:
    metrics = OperatorMetrics()
    memo = kopf.Memo(kube=Kube(client.ApiClient(api_config)), config=config, metrics=metrics)
    elector = None
    if options.lease is not None:
        lease = leader.LeaseClient(client.ApiClient(api_config), options.lease)
        elector = leader.LeaderElector(lease, options.lease, on_change=lambda on: metrics.leader.set(int(on)))

    def standby() -> str | None:
        if elector is None or metrics.leader.value() == 1:
            return None
        return f"the Lease is held by {elector.holder or 'another replica'}"

    started = asyncio.Event()  # kopf raises it once its startup handlers have run
    async with contextlib.AsyncExitStack() as stack:
        if options.health_address is not None:
            check = health.ApiServerCheck(health.kubernetes_probe(api_config))
            readiness = health.Readiness(started, check, standby)
            await stack.enter_async_context(
                health.serving(*options.health_address, readiness, metrics.render)
            )
        if elector is None:
            metrics.leader.set(1)
        else:
            await elector.acquire()
        operator = asyncio.create_task(
            kopf.operator(
                settings=_kopf_settings(options),
                registry=build_registry(config),
                standalone=True,  # no kopf peering: one replica, or one leader of several
                clusterwide=not options.namespaces,
                namespaces=options.namespaces,
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
            # Another replica may take over once the Lease expires: stop acting now, handlers in
            # flight included (their effects are idempotent and the next leader resumes them).
            log.error("exiting: this replica no longer leads")
            logging.shutdown()
            os._exit(LOST_LEADERSHIP_EXIT)
        holding.cancel()
        await operator
        await asyncio.to_thread(elector.release)
        return 0


def serve(config: OperatorConfig, options: ServeOptions, api_config: client.Configuration) -> int:
    """Run the operator with the credentials of `api_config` until it is stopped."""
    api_config.connection_pool_maxsize = MAX_WORKERS + 4  # a pooled connection per handler thread
    kopf.configure(verbose=options.verbose, debug=options.verbose)
    if not options.verbose:
        quiet_routine_successes()
    with contextlib.suppress(asyncio.CancelledError):  # as kopf.run: a stop by signal
        return asyncio.run(_serve(config, options, api_config))
    return 0
