"""`Gateway`: one run's driver gateway in this process (the servers, the meter, the key).

    gw = Gateway(config, upstream_key=key, store=store, on_exhausted=print)
    gw.start()                      # listening: gw.url (TCP), gw.socket_path
    ... gw.exhausted.is_set(), gw.summary() ...
    gw.stop()                       # in-flight calls finish (bounded), the summary is written

`a2rl gateway serve` (`a2rl_gateway.app.serve`) runs one in its own process; the local runner
starts that through `GatewayProcess` so the key never enters its environment.

Bounds per run: at most `MAX_CONNECTIONS` connections served at once over its servers together
(more wait in the listen backlog; `a2rl.service_server` has the deadlines of each), and at most
`MAX_CALLS` calls in flight (a call waits up to `CALL_WAIT_S` for a slot, then gets a 429), so its
threads and the request bodies it holds are bounded.
"""

from __future__ import annotations

import contextlib
import hmac
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from a2rl.records.driver import DriverSummary
from a2rl.service_server import Connections
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.tracing import Tracing, get_tracing
from a2rl_gateway.config import GatewayConfig
from a2rl_gateway.meter import Meter
from a2rl_gateway.metrics import GatewayMetrics
from a2rl_gateway.pricing import Price, load_prices
from a2rl_gateway.protocols import presented_tokens
from a2rl_gateway.redact import redact_url
from a2rl_gateway.server import GatewayHTTPServer, GatewayUnixServer
from a2rl_gateway.upstream import UpstreamPool

#: How often the servers look for a stop request and connections past their deadline (the
#: stdlib's default, 0.5 s, slows every stop).
POLL_S = 0.1
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
        self.upstream = UpstreamPool(config.upstream_timeout_s)
        self._servers: list[GatewayHTTPServer | GatewayUnixServer] = []
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._idle = threading.Condition()
        self._stopping = threading.Event()
        self.max_calls, self.call_wait_s = max_calls, call_wait_s
        self._slots = threading.BoundedSemaphore(max_calls)
        self.connections = Connections(MAX_CONNECTIONS)
        self.port: int | None = None

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

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        with self._idle:
            self._busy += 1
        self.metrics.in_flight.inc()
        try:
            yield
        finally:
            self.metrics.in_flight.dec()
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    @contextlib.contextmanager
    def call_slot(self) -> Iterator[bool | None]:
        """One of the run's `max_calls` call slots for the `with` block: True when held, False when
        none freed within `call_wait_s`, None when the gateway stops meanwhile."""
        end = time.monotonic() + self.call_wait_s
        got: bool | None = False
        while not self._stopping.is_set():
            if self._slots.acquire(timeout=max(0.0, min(POLL_S, end - time.monotonic()))):
                got = True
                break
            if time.monotonic() >= end:
                break
        else:
            got = None
        try:
            yield got
        finally:
            if got:
                self._slots.release()

    # --- life -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Listen (Unix socket and/or 127.0.0.1) and serve in daemon threads."""
        try:
            if self.config.port is not None:
                tcp = GatewayHTTPServer(self, self.config.host, self.config.port, self.connections)
                self._servers.append(tcp)
                self.port = tcp.port
            if self.config.socket_path is not None:
                self._servers.append(GatewayUnixServer(self, self.config.socket_path, self.connections))
        except BaseException:
            for srv in self._servers:
                srv.server_close()
            self._servers.clear()
            raise
        for srv in self._servers:
            t = threading.Thread(
                target=srv.serve_forever,
                kwargs={"poll_interval": POLL_S},
                name="a2rl-gateway-http",
                daemon=True,
            )
            t.start()
            self._threads.append(t)
        self.meter.announce()

    def stop(self, drain_timeout_s: float = 30.0) -> bool:
        """Stop accepting, close the connections that wait for a request or send one (a call still
        waiting for its body or a slot ends at once), let calls in flight end and their records be
        written (at most `drain_timeout_s`), write the summary. False when something was still
        pending then."""
        self._stopping.set()
        for srv in self._servers:
            srv.shutdown()
            srv.server_close()
        end = time.monotonic() + drain_timeout_s
        with self._idle:
            while self._busy and time.monotonic() < end:
                self._idle.wait(max(0.0, end - time.monotonic()))
            drained = self._busy == 0
        self._servers.clear()
        self.upstream.close()
        written = self.meter.close(max(1.0, end - time.monotonic()))
        return drained and written
