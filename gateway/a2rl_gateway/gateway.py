"""`Gateway`: one run's driver gateway in this process (the servers, the meter, the key).

    gw = Gateway(config, upstream_key=key, store=store, on_exhausted=print)
    gw.start()                      # listening: gw.url (TCP), gw.socket_path
    ... gw.exhausted.is_set(), gw.summary() ...
    gw.stop()                       # in-flight calls finish (bounded), the summary is written

`a2rl gateway serve` (`a2rl_gateway.app.serve`) runs one in its own process; the local runner
starts that through `GatewayProcess` so the key never enters its environment.

Its calls are served by one event loop in a thread of its own (`a2rl-gateway-loop`): the servers
(`a2rl_gateway.http1`), the handler (`a2rl_gateway.server`) and the upstream client; the meter's
writer thread writes the records. Bounds per run: at most `MAX_CONNECTIONS` connections served at
once over its servers together (more wait in the listen backlog; `a2rl_gateway.http1` has the
deadlines of each), and at most `MAX_CALLS` calls in flight (a call waits up to `CALL_WAIT_S` for a
slot, then gets a 429), so the request bodies it holds are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from a2rl.records.driver import DriverSummary
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.tracing import Tracing, get_tracing
from a2rl.unix_server import private_unix_socket, remove_bound_socket
from a2rl_gateway.config import GatewayConfig
from a2rl_gateway.http1 import Listeners
from a2rl_gateway.meter import Meter
from a2rl_gateway.metrics import GatewayMetrics
from a2rl_gateway.pricing import Price, load_prices
from a2rl_gateway.protocols import presented_tokens
from a2rl_gateway.redact import redact_url
from a2rl_gateway.server import MAX_REQUEST_BYTES, handle
from a2rl_gateway.upstream import Upstream

log = logging.getLogger(__name__)

#: Connections served at once, calls in flight at once (a stack runs a few: sub-agents, side calls).
MAX_CONNECTIONS = 64
MAX_CALLS = 16
#: How long a call waits for one of the `MAX_CALLS` slots before it is answered 429.
CALL_WAIT_S = 30.0


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        upstream_key: str | None = None,
        store: ObjectStore | None = None,
        tracing: Tracing | None = None,
        prices: Mapping[str, Price] | None = None,
        on_exhausted: Callable[[str], None] | None = None,
        max_calls: int = MAX_CALLS,
        call_wait_s: float = CALL_WAIT_S,
    ) -> None:
        self.config = config
        self.upstream_key = upstream_key
        self.secrets = tuple(s for s in (upstream_key, config.token) if s)
        layout = RunLayout.from_prefix(config.run_prefix) if config.run_prefix else None
        self.metrics = GatewayMetrics()
        self.meter = Meter(
            limits=config.limits,
            prices=load_prices(config.prices_file) if prices is None else prices,
            store=store,
            layout=layout,
            provider=config.provider,
            base_url=redact_url(config.base_url),
            model=config.model,
            on_exhausted=on_exhausted,
            secrets=self.secrets,
            metrics=self.metrics,
        )
        self.tracing = tracing or get_tracing()
        self.upstream = Upstream(config.upstream_timeout_s)
        self.max_calls, self.call_wait_s = max_calls, call_wait_s
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sockets: list[socket.socket] = []
        self._unix_inode: int | None = None
        self._busy = 0
        self._stopping = False
        # Made in the loop (they belong to it): the call slots, "no call in flight", the stop.
        self._slots: asyncio.Semaphore
        self._idle: asyncio.Event
        self._stop_requested: asyncio.Event
        self.connections = Listeners(
            lambda ex: handle(self, ex), limit=MAX_CONNECTIONS, max_body=MAX_REQUEST_BYTES,
            on_error=lambda ex: log.exception("serving %s %s failed", ex.request.method, ex.peer),
        )  # fmt: skip

    # --- state ----------------------------------------------------------------------------------
    @property
    def exhausted(self) -> threading.Event:
        """Set once the driver budget is spent (later calls are refused)."""
        return self.meter.exhausted

    @property
    def refused(self) -> threading.Event:
        """Set once a call was refused for the budget (the agent saw the error)."""
        return self.meter.refused

    @property
    def url(self) -> str | None:
        """`http://127.0.0.1:<port>` when serving TCP."""
        return None if self.port is None else f"http://{self.config.host}:{self.port}"

    @property
    def socket_path(self) -> str | None:
        return None if self.config.socket_path is None else str(self.config.socket_path)

    def summary(self) -> DriverSummary:
        return self.meter.snapshot()

    def authorized(self, headers: Iterable[tuple[str, str]], query: str) -> bool:
        """Whether the request presents this run's token (anywhere a provider's client puts a key)."""
        token = self.config.token.encode()
        return any(hmac.compare_digest(t.encode(), token) for t in presented_tokens(headers, query))

    def call_began(self) -> None:
        self._busy += 1
        self._idle.clear()
        self.metrics.in_flight.inc()

    def call_ended(self) -> None:
        self.metrics.in_flight.dec()
        self._busy -= 1
        if not self._busy:
            self._idle.set()

    @contextlib.asynccontextmanager
    async def call_slot(self) -> AsyncIterator[bool | None]:
        """One of the run's `max_calls` call slots for the `async with` block: True when held,
        False when none freed within `call_wait_s`, None when the gateway stops meanwhile."""
        got: bool | None = None
        if not self._stopping:
            if not self._slots.locked():
                await self._slots.acquire()  # free: no wait, no task
                got = True
            else:
                got = await self._wait_for_slot()
        try:
            yield got
        finally:
            if got:
                self._slots.release()

    async def _wait_for_slot(self) -> bool | None:
        acquire = asyncio.ensure_future(self._slots.acquire())
        stop = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait((acquire, stop), timeout=self.call_wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not acquire.done():
                acquire.cancel()
        if acquire.done() and not acquire.cancelled():
            if self._stopping:
                self._slots.release()
                return None
            return True
        return None if self._stopping else False

    # --- life -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Listen (Unix socket and/or 127.0.0.1) and serve from the gateway's event loop."""
        try:
            if self.config.port is not None:
                tcp = socket.create_server((self.config.host, self.config.port), reuse_port=False)
                self._sockets.append(tcp)
                self.port = int(tcp.getsockname()[1])
            if self.config.socket_path is not None:
                unix, self._unix_inode = private_unix_socket(self.config.socket_path)
                self._sockets.append(unix)
        except BaseException:
            self._close_sockets()
            raise
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="a2rl-gateway-loop", daemon=True)
        self._thread.start()
        self._call(self._serve()).result()
        self.meter.announce()

    def _call(self, coro: Any) -> Future[Any]:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _serve(self) -> None:
        self._slots = asyncio.Semaphore(self.max_calls)
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop_requested = asyncio.Event()
        await self.upstream.open()
        for sock in self._sockets:
            self.connections.listen(sock)

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        if self.config.socket_path is not None and self._unix_inode is not None:
            remove_bound_socket(self.config.socket_path, self._unix_inode)
            self._unix_inode = None

    def stop(self, drain_timeout_s: float = 30.0) -> bool:
        """Stop accepting, close the connections that wait for a request or send one (a call still
        waiting for its body or a slot ends at once), let calls in flight end and their records be
        written (at most `drain_timeout_s`), write the summary. False when something was still
        pending then."""
        end = time.monotonic() + drain_timeout_s
        drained = True
        if self._loop is not None and self._thread is not None:
            try:
                drained = self._call(self._stop(drain_timeout_s)).result(drain_timeout_s + 5)
            except Exception:
                log.exception("stopping the gateway's servers failed")
                drained = False
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            if not self._thread.is_alive():
                self._loop.close()
            self._loop = self._thread = None
        self._close_sockets()
        written = self.meter.close(max(1.0, end - time.monotonic()))
        return drained and written

    async def _stop(self, drain_timeout_s: float) -> bool:
        self._stopping = True
        self._stop_requested.set()
        self.connections.stop()
        self._close_sockets()
        try:
            await asyncio.wait_for(self._idle.wait(), drain_timeout_s)
            drained = True
        except TimeoutError:
            drained = False
        await self.connections.closed(1.0 if drained else 0.0)
        await self.upstream.close()
        return drained
