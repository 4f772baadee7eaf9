"""`a2rl gateway serve`: the gateway as a process, until SIGTERM/SIGINT.

Its standard output is how the runner follows it (`GatewayProcess` reads it), one line each:

    a2rl-gateway listening on http://127.0.0.1:<port> unix:<path>     (ready; either part optional)
    a2rl-gateway budget-exhausted <json {"reason": …}>                 (once: further calls are refused)
    a2rl-gateway budget-refused <json {"reason": …}>                   (once: the agent got the error)
    a2rl-gateway stopped

On SIGTERM it stops accepting, closes the connections that are not in a call (waiting for a
request, its headers, its body or a call slot), lets calls in flight end (at most
`DRAIN_TIMEOUT_S`), writes the summary, flushes its spans and exits 0.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from a2rl import constants as c
from a2rl.errors import A2rlError
from a2rl.records.driver import DriverSummary
from a2rl.store.open import open_store
from a2rl.tracing import init_tracing
from a2rl_gateway.config import GatewayConfig
from a2rl_gateway.gateway import Gateway

log = logging.getLogger(__name__)

READY_PREFIX = "a2rl-gateway listening on"
EXHAUSTED_PREFIX = "a2rl-gateway budget-exhausted "
REFUSED_PREFIX = "a2rl-gateway budget-refused "
STOPPED_LINE = "a2rl-gateway stopped"
DRAIN_TIMEOUT_S = 30.0


def ready_line(gateway: Gateway) -> str:
    parts = [p for p in (gateway.url, f"unix:{gateway.socket_path}" if gateway.socket_path else None) if p]
    return f"{READY_PREFIX} {' '.join(parts)}"


def _emit(line: str) -> None:
    print(line, flush=True)


def serve(
    config: GatewayConfig,
    *,
    upstream_key: str | None,
    stop: threading.Event | None = None,
    on_ready: Callable[[Gateway], None] | None = None,
) -> DriverSummary:
    """Serve until `stop` is set (SIGTERM/SIGINT set it in the main thread); the final summary."""
    store = open_store(config.store_uri) if config.store_uri else None
    if store is not None and not config.run_prefix:
        raise A2rlError(f"{c.ENV_RUN_PREFIX} is required with {c.ENV_STORE_URI}")
    tracing = init_tracing(c.COMPONENT_GATEWAY, store=store, run_prefix=config.run_prefix)
    gateway = Gateway(
        config,
        upstream_key=upstream_key,
        store=store,
        tracing=tracing,
        on_exhausted=lambda reason: _emit(EXHAUSTED_PREFIX + json.dumps({"reason": reason})),
    )
    threading.Thread(
        target=_report_refusal, args=(gateway,), name="a2rl-gateway-refused", daemon=True
    ).start()
    try:
        gateway.start()
    except OSError as exc:
        raise A2rlError(f"the gateway cannot listen: {exc.strerror or exc}") from exc
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        _install_signal_handlers(stop)
    _emit(ready_line(gateway))
    if on_ready is not None:
        on_ready(gateway)
    try:
        stop.wait()
    finally:
        if not gateway.stop(DRAIN_TIMEOUT_S):
            log.warning("calls still in flight after %.0f s; stopping anyway", DRAIN_TIMEOUT_S)
        tracing.shutdown()
        print(STOPPED_LINE, file=sys.stderr, flush=True)
    return gateway.summary()


def _report_refusal(gateway: Gateway) -> None:
    gateway.refused.wait()
    reason = gateway.summary().budget.reason or "the driver budget is exhausted"
    _emit(REFUSED_PREFIX + json.dumps({"reason": reason}))


def _install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
