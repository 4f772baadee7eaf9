"""The operator's probes: liveness and readiness, on one small HTTP server in kopf's event loop
(with its Prometheus metrics, `GET /metrics`, a2rl_operator.metrics).

- `GET /healthz` (liveness) answers 200 while the process and its event loop run. It never asks
  the API server: a control-plane blip must not make the kubelet restart every operator (kopf
  re-lists and resumes on its own when the API server is back).
- `GET /readyz` (readiness) answers 200 once kopf has started (its startup handlers ran) and the
  API server answered its own `/readyz` within `CHECK_TIMEOUT_S`; else 503 with the reason. The
  API server's answer is cached `CACHE_S`, and concurrent probes share one request, so a probe
  costs at most one small request every few seconds.

(kopf's own liveness endpoint runs its probe handlers and cannot tell the two apart, so the
operator serves neither through it.)
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from kubernetes import client

from a2rl.metrics import CONTENT_TYPE

LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
METRICS_PATH = "/metrics"
#: Connect and read timeout of the readiness check's request to the API server.
CHECK_TIMEOUT_S = 2.0
#: How long an answer of the API server (good or bad) stands for.
CACHE_S = 5.0


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str


class ApiServerCheck:
    """`await check()`: is the API server reachable? `probe` is a blocking call that raises when
    it is not (run in a thread, bounded by `timeout_s`); its verdict is kept `cache_s`."""

    def __init__(
        self,
        probe: Callable[[], None],
        *,
        timeout_s: float = CHECK_TIMEOUT_S,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._timeout_s = timeout_s
        self._cache_s = cache_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._verdict: Verdict | None = None
        self._at = 0.0
        self.probes = 0  # how many requests were made (tests, debugging)

    def _fresh(self) -> Verdict | None:
        if self._verdict is not None and self._clock() - self._at < self._cache_s:
            return self._verdict
        return None

    async def __call__(self) -> Verdict:
        cached = self._fresh()
        if cached is not None:
            return cached
        async with self._lock:
            cached = self._fresh()
            if cached is not None:
                return cached
            self.probes += 1
            try:
                # The probe has its own timeouts; this bounds it should they not hold (DNS, retries).
                await asyncio.wait_for(asyncio.to_thread(self._probe), self._timeout_s * 2)
                verdict = Verdict(True, "the API server answers")
            except TimeoutError:
                verdict = Verdict(False, f"the API server did not answer within {self._timeout_s * 2:g} s")
            except Exception as exc:
                verdict = Verdict(False, f"the API server cannot be reached: {_short(exc)}")
            self._verdict, self._at = verdict, self._clock()
            return verdict


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def kubernetes_probe(api_config: Any, timeout_s: float = CHECK_TIMEOUT_S) -> Callable[[], None]:
    """A `probe` for `ApiServerCheck`: `GET /readyz` of the API server with the operator's own
    credentials (`kubernetes.client.Configuration`), no retries, `timeout_s` to connect and read.
    `/readyz` is readable by every client (`system:public-info-viewer`) and fails while the API
    server cannot serve (its etcd down, shutting down)."""
    config = copy.deepcopy(api_config)
    config.retries = False  # one attempt: a readiness probe is asked again anyway
    api = client.ApiClient(config)

    def probe() -> None:
        method, url, headers, _, _ = api.param_serialize("GET", "/readyz", auth_settings=["BearerToken"])
        response = api.call_api(method, url, header_params=headers, _request_timeout=(timeout_s, timeout_s))
        response.read()
        if response.status != 200:
            raise RuntimeError(f"GET /readyz answered {response.status}")

    return probe


@dataclass
class Readiness:
    """Ready = `started` is set (kopf's ready flag) and `check` says the API server answers. A
    standby replica (`standby()` says why: another replica leads) is ready when the API server
    answers: it is healthy, waiting to take over."""

    started: asyncio.Event
    check: Callable[[], Any]  # async () -> Verdict
    standby: Callable[[], str | None] = lambda: None

    async def __call__(self) -> Verdict:
        waiting = self.standby()
        if waiting is not None:
            verdict: Verdict = await self.check()
            return Verdict(verdict.ok, f"standby: {waiting}" if verdict.ok else verdict.reason)
        if not self.started.is_set():
            return Verdict(False, "starting: kopf's startup handlers have not finished")
        ready: Verdict = await self.check()
        return ready


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`0.0.0.0:8080`, `[::]:8080`, `:8080` = every address)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


@asynccontextmanager
async def serving(
    host: str, port: int, readiness: Callable[[], Any], metrics: Callable[[], str] | None = None
) -> AsyncIterator[int]:
    """The probe server on `host:port` while the block runs; yields the bound port (`port` 0: any).
    With `metrics` (the exposition text), it also answers `GET /metrics` for Prometheus."""

    async def live(_: web.Request) -> web.Response:
        return web.json_response({"alive": True})

    async def ready(_: web.Request) -> web.Response:
        verdict: Verdict = await readiness()
        return web.json_response(
            {"ready": verdict.ok, "reason": verdict.reason}, status=200 if verdict.ok else 503
        )

    async def scrape(_: web.Request) -> web.Response:
        assert metrics is not None
        return web.Response(body=metrics().encode(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.add_routes([web.get(LIVENESS_PATH, live), web.get(READINESS_PATH, ready)])
    if metrics is not None:
        app.add_routes([web.get(METRICS_PATH, scrape)])
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
        yield int(runner.addresses[0][1]) if runner.addresses else port
    finally:
        await runner.cleanup()
