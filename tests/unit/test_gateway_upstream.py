"""`UpstreamPool`: kept-alive connections reused call after call, an idle connection the upstream
closed replaced (before use, or once the call finds it closed), the proxy from the environment."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from a2rl_gateway.upstream import UpstreamPool

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class RawServer:
    """An HTTP/1.1 server on loopback answering each request with `ANSWER`, and then, per
    `mode`: `keep` the connection; `close` it at once (no `Connection: close`: an idle close);
    `drop-second` close without an answer when a second request arrives on a connection (the
    upstream's idle close racing the send). `seen` lists the request lines in arrival order."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[str] = []
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
                if self.mode == "drop-second" and served == 1:
                    return
                conn.sendall(ANSWER)
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


def get(pool: UpstreamPool, url: str) -> bytes:
    with pool.request("POST", url, b"{}", {"Content-Type": "application/json"}) as resp:
        assert resp.status == 200
        return resp.read()


@pytest.mark.parametrize("server", ["keep"], indirect=True)
def test_one_kept_alive_connection_serves_call_after_call(server: RawServer) -> None:
    pool = UpstreamPool(10)
    for _ in range(20):
        assert get(pool, f"http://127.0.0.1:{server.port}/v1/messages") == b"{}"
    assert pool.opened == 1 and server.accepted == 1 and len(server.seen) == 20
    pool.close()


@pytest.mark.parametrize("server", ["close"], indirect=True)
def test_a_connection_the_upstream_closed_while_idle_is_replaced(server: RawServer) -> None:
    pool = UpstreamPool(10)
    for _ in range(5):
        assert get(pool, f"http://127.0.0.1:{server.port}/x") == b"{}"
    assert pool.opened == 5 and len(server.seen) == 5  # every call answered, none sent twice


@pytest.mark.parametrize("server", ["drop-second"], indirect=True)
def test_a_call_that_finds_its_reused_connection_closed_is_sent_once_more(server: RawServer) -> None:
    pool = UpstreamPool(10)
    assert get(pool, f"http://127.0.0.1:{server.port}/a") == b"{}"
    assert get(pool, f"http://127.0.0.1:{server.port}/b") == b"{}"
    assert server.seen == ["POST /a HTTP/1.1", "POST /b HTTP/1.1", "POST /b HTTP/1.1"]
    assert pool.opened == 2


def test_an_upstream_that_refuses_is_an_error_not_a_retry() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with (
        pytest.raises(ConnectionRefusedError),
        UpstreamPool(5).request("GET", f"http://127.0.0.1:{port}/", None, {}),
    ):
        pass


@pytest.mark.parametrize("server", ["keep"], indirect=True)
def test_an_http_upstream_goes_through_the_proxy_of_the_environment(
    server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The raw server plays the proxy: it gets the request in absolute form.
    monkeypatch.setenv("HTTP_PROXY", f"http://user:pw@127.0.0.1:{server.port}")
    monkeypatch.setenv("NO_PROXY", "")
    pool = UpstreamPool(10)
    assert get(pool, "http://upstream.invalid:8000/v1/chat/completions?x=1") == b"{}"
    assert server.seen == ["POST http://upstream.invalid:8000/v1/chat/completions?x=1 HTTP/1.1"]
    monkeypatch.setenv("NO_PROXY", "upstream.invalid")
    with pytest.raises(OSError):  # not through the proxy: the name does not resolve
        get(UpstreamPool(10), "http://upstream.invalid:8000/v1/chat/completions")
