"""`Upstream`: kept-alive connections reused call after call, an idle connection the upstream
closed replaced (before use, or once the call finds it closed), the proxy from the environment,
the target and the answer's bytes exactly as given and sent."""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator

import pytest
from a2rl_gateway.upstream import Upstream, UpstreamError

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
_ZIPPED = gzip.compress(b"{}")
GZIPPED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
    + f"Content-Length: {len(_ZIPPED)}\r\n\r\n".encode()
    + _ZIPPED
)


class RawServer:
    """An HTTP/1.1 server on loopback answering each request with `ANSWER`, and then, per
    `mode`: `keep` the connection; `close` it at once (no `Connection: close`: an idle close);
    `drop-second` close without an answer when a second request arrives on a connection (the
    upstream's idle close racing the send); `drop-first` close without any answer; `gzip` answer
    gzip-compressed. `seen` lists the request lines in arrival order, `heads` the whole heads."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[str] = []
        self.heads: list[str] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buf, served = b"", 0
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = [
                    int(h.split(b":")[1])
                    for h in head.lower().split(b"\r\n")
                    if h.startswith(b"content-length:")
                ]
                while len(buf) < sum(length):
                    buf += conn.recv(65536)
                buf = buf[sum(length) :]
                self.seen.append(head.split(b"\r\n", 1)[0].decode())
                self.heads.append(head.decode())
                if (self.mode == "drop-second" and served == 1) or self.mode == "drop-first":
                    return
                conn.sendall(GZIPPED if self.mode == "gzip" else ANSWER)
                served += 1
                if self.mode == "close":
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[RawServer]:
    srv = RawServer(request.param)
    yield srv
    srv.close()


async def get(upstream: Upstream, url: str) -> bytes:
    async with upstream.request("POST", url, b"{}", {"Content-Type": "application/json"}) as resp:
        assert resp.status == 200
        return await resp.read()


def with_upstream(calls: Callable[[Upstream], Awaitable[None]]) -> Upstream:
    """Run `calls` against a fresh `Upstream` in an event loop of their own; the upstream, closed."""

    async def main() -> Upstream:
        upstream = Upstream(10)
        await upstream.open()
        try:
            await calls(upstream)
        finally:
            await upstream.close()
        return upstream

    return asyncio.run(main())


@pytest.mark.parametrize("server", ["keep"], indirect=True)
def test_one_kept_alive_connection_serves_call_after_call(server: RawServer) -> None:
    async def calls(upstream: Upstream) -> None:
        for _ in range(20):
            assert await get(upstream, f"http://127.0.0.1:{server.port}/v1/messages") == b"{}"

    upstream = with_upstream(calls)
    assert upstream.opened == 1 and server.accepted == 1 and len(server.seen) == 20


@pytest.mark.parametrize("server", ["close"], indirect=True)
def test_a_connection_the_upstream_closed_while_idle_is_replaced(server: RawServer) -> None:
    async def calls(upstream: Upstream) -> None:
        for _ in range(5):
            assert await get(upstream, f"http://127.0.0.1:{server.port}/x") == b"{}"
            await asyncio.sleep(0.05)  # the close arrives while the connection is idle

    upstream = with_upstream(calls)
    assert upstream.opened == 5 and len(server.seen) == 5  # every call answered, none sent twice


@pytest.mark.parametrize("server", ["drop-second"], indirect=True)
def test_a_call_that_finds_its_reused_connection_closed_is_sent_once_more(server: RawServer) -> None:
    async def calls(upstream: Upstream) -> None:
        assert await get(upstream, f"http://127.0.0.1:{server.port}/a") == b"{}"
        assert await get(upstream, f"http://127.0.0.1:{server.port}/b") == b"{}"

    upstream = with_upstream(calls)
    assert server.seen == ["POST /a HTTP/1.1", "POST /b HTTP/1.1", "POST /b HTTP/1.1"]
    assert upstream.opened == 2


@pytest.mark.parametrize("server", ["drop-first"], indirect=True)
def test_a_call_on_a_new_connection_is_never_sent_twice(server: RawServer) -> None:
    async def calls(upstream: Upstream) -> None:
        with pytest.raises(UpstreamError):
            await get(upstream, f"http://127.0.0.1:{server.port}/a")

    with_upstream(calls)
    assert server.seen == ["POST /a HTTP/1.1"]


def test_an_upstream_that_refuses_is_an_error_not_a_retry() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]

    async def calls(upstream: Upstream) -> None:
        with pytest.raises(UpstreamError, match=r"[Cc]onnect"):
            async with upstream.request("GET", f"http://127.0.0.1:{port}/", None, {}):
                pass

    assert with_upstream(calls).opened == 0


@pytest.mark.parametrize("server", ["keep"], indirect=True)
def test_an_http_upstream_goes_through_the_proxy_of_the_environment(
    server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The raw server plays the proxy: it gets the request in absolute form, with the credentials.
    monkeypatch.setenv("HTTP_PROXY", f"http://user:pw@127.0.0.1:{server.port}")
    monkeypatch.setenv("NO_PROXY", "")

    async def through(upstream: Upstream) -> None:
        assert await get(upstream, "http://upstream.invalid:8000/v1/chat/completions?x=1") == b"{}"

    with_upstream(through)
    assert server.seen == ["POST http://upstream.invalid:8000/v1/chat/completions?x=1 HTTP/1.1"]
    assert "proxy-authorization: basic dxnlcjpwdw==" in server.heads[0].lower()
    monkeypatch.setenv("NO_PROXY", "upstream.invalid")

    async def bypassed(upstream: Upstream) -> None:
        with pytest.raises(UpstreamError):  # not through the proxy: the name does not resolve
            await get(upstream, "http://upstream.invalid:8000/v1/chat/completions")

    with_upstream(bypassed)
    assert len(server.seen) == 1


@pytest.mark.parametrize("server", ["gzip"], indirect=True)
def test_what_is_sent_and_answered_is_exactly_what_was_given(server: RawServer) -> None:
    """The target is not re-quoted, no header is added but the framing's, a compressed answer
    comes back as it was sent."""

    async def calls(upstream: Upstream) -> None:
        url = f"http://127.0.0.1:{server.port}/v1beta/models/m%2Fx:generateContent?key=a%20b&alt=sse"
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity", "x-api-key": "k"}
        async with upstream.request("POST", url, b"{}", headers) as resp:
            assert resp.header("Content-Encoding") == "gzip"
            assert gzip.decompress(await resp.read()) == b"{}"

    with_upstream(calls)
    assert server.seen == ["POST /v1beta/models/m%2Fx:generateContent?key=a%20b&alt=sse HTTP/1.1"]
    names = sorted(line.split(":", 1)[0].lower() for line in server.heads[0].split("\r\n")[1:])
    assert names == ["accept-encoding", "content-length", "content-type", "host", "x-api-key"]
