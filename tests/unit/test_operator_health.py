"""The operator's probes: liveness is the process, readiness is kopf started + the API server.

Real sockets throughout: an API server address where nothing listens (refused at once), one
that accepts and never answers (the check's timeout), and a plain HTTP server standing in for a
healthy API server's `/readyz`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp
import pytest
from a2rl_operator.health import (
    ApiServerCheck,
    Readiness,
    Verdict,
    kubernetes_probe,
    parse_address,
    serving,
)
from kubernetes import client


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once closed


@contextmanager
def _silent_server() -> Iterator[int]:
    """Accepts connections and never answers (an API server behind a black hole)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


@contextmanager
def _fake_apiserver(status: int = 200) -> Iterator[tuple[int, list[str]]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b"ok" if status == 200 else b"[-]etcd failed"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), seen
    finally:
        server.shutdown()
        server.server_close()


def _probe(host: str, timeout_s: float = 2.0) -> Any:
    config = client.Configuration()
    config.host = host
    config.api_key = {"BearerToken": "t0ken"}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    return kubernetes_probe(config, timeout_s=timeout_s)


async def _get(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.json()


def test_an_unreachable_api_server_fails_readiness_at_once_and_liveness_stays_up() -> None:
    async def scenario() -> None:
        started = asyncio.Event()
        started.set()
        check = ApiServerCheck(_probe(f"https://127.0.0.1:{_closed_port()}"))
        async with serving("127.0.0.1", 0, Readiness(started, check)) as port:
            t0 = time.monotonic()
            status, body = await _get(f"http://127.0.0.1:{port}/readyz")
            assert time.monotonic() - t0 < 2.0
            assert status == 503 and body["ready"] is False
            assert "cannot be reached" in body["reason"], body
            status, body = await _get(f"http://127.0.0.1:{port}/healthz")
            assert (status, body) == (200, {"alive": True})

    asyncio.run(scenario())


def test_an_api_server_that_never_answers_fails_readiness_within_the_timeout() -> None:
    async def scenario() -> None:
        with _silent_server() as port:
            check = ApiServerCheck(_probe(f"https://127.0.0.1:{port}", timeout_s=0.5), timeout_s=0.5)
            t0 = time.monotonic()
            verdict = await check()
            elapsed = time.monotonic() - t0
        assert not verdict.ok
        assert 0.4 < elapsed < 1.5, elapsed  # the probe's own read timeout, not the backstop

    asyncio.run(scenario())


def test_a_healthy_api_server_makes_it_ready_and_the_answer_is_cached() -> None:
    now = [100.0]

    async def scenario() -> None:
        with _fake_apiserver() as (port, seen):
            check = ApiServerCheck(_probe(f"http://127.0.0.1:{port}"), cache_s=5, clock=lambda: now[0])
            results = await asyncio.gather(*(check() for _ in range(5)))  # concurrent probes: one request
            assert all(r == Verdict(True, "the API server answers") for r in results)
            assert (check.probes, seen) == (1, ["/readyz"])
            now[0] += 4.9
            await check()
            assert check.probes == 1
            now[0] += 0.2
            await check()
            assert check.probes == 2 and seen == ["/readyz", "/readyz"]

    asyncio.run(scenario())


def test_an_api_server_that_is_not_ready_fails_readiness_with_its_status() -> None:
    async def scenario() -> None:
        with _fake_apiserver(status=500) as (port, _):
            verdict = await ApiServerCheck(_probe(f"http://127.0.0.1:{port}"))()
        assert not verdict.ok and "500" in verdict.reason

    asyncio.run(scenario())


def test_not_ready_until_kopf_has_started() -> None:
    async def scenario() -> None:
        with _fake_apiserver() as (port, seen):
            started = asyncio.Event()
            readiness = Readiness(started, ApiServerCheck(_probe(f"http://127.0.0.1:{port}")))
            async with serving("127.0.0.1", 0, readiness) as health_port:
                status, body = await _get(f"http://127.0.0.1:{health_port}/readyz")
                assert status == 503 and body["reason"].startswith("starting")
                assert seen == []  # no request to the API server while starting
                started.set()
                status, body = await _get(f"http://127.0.0.1:{health_port}/readyz")
                assert (status, body["ready"]) == (200, True)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.0.0.0:8080", ("0.0.0.0", 8080)), ("[::]:9000", ("::", 9000)), (":8080", ("0.0.0.0", 8080))],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", "h:70000"])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(text)
