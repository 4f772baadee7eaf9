"""`Upstream`: kept-alive connections reused call after call, an idle connection the upstream
closed replaced (before use, or once the call finds it closed), the proxy from the environment,
the target and the answer's bytes exactly as given and sent."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gzip
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from a2rl_gateway.upstream import Upstream, UpstreamError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
_ZIPPED = gzip.compress(b"{}")
GZIPPED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
    + f"Content-Length: {len(_ZIPPED)}\r\n\r\n".encode()
    + _ZIPPED
)


def read_request(conn: socket.socket, buf: bytes) -> tuple[bytes, bytes] | None:
    """The next request's head on `conn` (after the bytes `buf` already read) with its
    `Content-Length` body read past, and what was read beyond it; None when the client closed."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    length = sum(
        int(h.split(b":")[1]) for h in head.lower().split(b"\r\n") if h.startswith(b"content-length:")
    )
    while len(buf) < length:
        buf += conn.recv(65536)
    return head, buf[length:]


class RawServer:
    """An HTTP/1.1 server on loopback (over TLS with `context`) answering each request with
    `ANSWER`, and then, per `mode`: `keep` the connection; `close` it at once (no `Connection:
    close`: an idle close); `drop-second` close without an answer when a second request arrives on
    a connection (the upstream's idle close racing the send); `drop-first` close without any
    answer; `gzip` answer gzip-compressed. `seen` lists the request lines in arrival order, `heads`
    the whole heads."""

    def __init__(self, mode: str, context: ssl.SSLContext | None = None) -> None:
        self.mode = mode
        self.context = context
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

    def _serve(self, raw: socket.socket) -> None:
        try:
            conn = raw if self.context is None else self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        with conn:
            buf, served = b"", 0
            while (request := read_request(conn, buf)) is not None:
                head, buf = request
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


def with_upstream(
    calls: Callable[[Upstream], Awaitable[None]],
    *,
    timeout_s: float = 10,
    context: ssl.SSLContext | None = None,
) -> Upstream:
    """Run `calls` against a fresh `Upstream` in an event loop of their own; the upstream, closed."""

    async def main() -> Upstream:
        upstream = Upstream(timeout_s, context=context)
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


class Scripted:
    """A one-connection HTTP/1.1 server on loopback that reads each request (head and
    `Content-Length` body) and answers it with the next of `answers`, each a list of byte pieces
    sent `gap_s` apart; after the last it `then`: `close`s, or `hang`s (keeps the connection open,
    sending nothing). `sent_all` is set once every answer went out; `heads` are the requests."""

    def __init__(self, answers: list[list[bytes]], then: str = "close", gap_s: float = 0.0) -> None:
        self.answers, self.then, self.gap_s = answers, then, gap_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.heads: list[bytes] = []
        self.sent_all = threading.Event()
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.accepted += 1
        with conn:
            buf = b""
            for answer in self.answers:
                request = read_request(conn, buf)
                if request is None:
                    return
                head, buf = request
                self.heads.append(head)
                for piece in answer:
                    conn.sendall(piece)
                    time.sleep(self.gap_s)
            self.sent_all.set()
            if self.then == "hang":
                conn.recv(1)  # until the client closes

    def close(self) -> None:
        self.sock.close()


def test_a_chunked_stream_comes_piece_by_piece_and_its_connection_serves_the_next_call() -> None:
    stream = [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"6\r\ndata: \r\n",
        b"2\r\n1\n\r\n",
        b"0\r\n\r\n",
    ]
    server = Scripted([stream, [ANSWER]])
    pieces: list[bytes] = []

    async def calls(upstream: Upstream) -> None:
        async with upstream.request("POST", f"http://127.0.0.1:{server.port}/s", b"{}", {}) as resp:
            assert resp.status == 200 and resp.header("content-type") == "text/event-stream"
            while chunk := await resp.read_some():
                pieces.append(chunk)
            assert resp.at_end()
        assert await get(upstream, f"http://127.0.0.1:{server.port}/next") == b"{}"

    upstream = with_upstream(calls)
    server.close()
    assert b"".join(pieces) == b"data: 1\n" and upstream.opened == 1 and server.accepted == 1


def test_an_answer_without_length_ends_with_the_connection_and_is_not_reused() -> None:
    server = Scripted([[b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"all of it"]], then="close")

    async def calls(upstream: Upstream) -> None:
        async with upstream.request("GET", f"http://127.0.0.1:{server.port}/", None, {}) as resp:
            assert await resp.read() == b"all of it"
        assert not any(upstream._idle.values())  # closed, not pooled

    with_upstream(calls)
    server.close()


def test_an_answer_cut_short_is_an_error_not_a_shorter_answer() -> None:
    server = Scripted([[b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"only ten b"]], then="close")

    async def calls(upstream: Upstream) -> None:
        async with upstream.request("GET", f"http://127.0.0.1:{server.port}/", None, {}) as resp:
            with pytest.raises(UpstreamError, match="mid-answer"):
                await resp.read()

    with_upstream(calls)
    server.close()


def test_an_upstream_silent_past_the_timeout_is_an_error() -> None:
    server = Scripted([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345"]], then="hang")

    async def calls(upstream: Upstream) -> None:
        t0 = time.monotonic()
        async with upstream.request("GET", f"http://127.0.0.1:{server.port}/", None, {}) as resp:
            with pytest.raises(UpstreamError, match=r"no answer from the upstream for 0\.3 s"):
                await resp.read()
        assert time.monotonic() - t0 < 2

    with_upstream(calls, timeout_s=0.3)
    server.close()


def test_an_interim_answer_is_skipped_and_a_head_answer_has_no_body() -> None:
    server = Scripted(
        [
            [b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", ANSWER],
            [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"],  # HEAD: the length of a GET's body
        ],
        then="hang",
    )

    async def calls(upstream: Upstream) -> None:
        assert await get(upstream, f"http://127.0.0.1:{server.port}/") == b"{}"
        async with upstream.request("HEAD", f"http://127.0.0.1:{server.port}/", None, {}) as resp:
            assert resp.status == 200 and resp.header("Content-Length") == "5"
            assert await asyncio.wait_for(resp.read(), 2) == b""

    with_upstream(calls)
    server.close()


def test_a_reader_that_falls_behind_holds_the_upstream_back() -> None:
    size = 64 << 20  # beyond what loopback's socket buffers hold
    server = Scripted([[f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode(), b"x" * size]])

    async def calls(upstream: Upstream) -> None:
        async with upstream.request("GET", f"http://127.0.0.1:{server.port}/", None, {}) as resp:
            await asyncio.sleep(0.5)
            assert not server.sent_all.is_set()  # the client reads no further ahead than it may
            assert len(await resp.read()) == size
        assert server.sent_all.wait(5)

    with_upstream(calls)
    server.close()


def _tls_pair(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a self-signed certificate for `upstream.test` and 127.0.0.1, and a
    client context that trusts it (and nothing else)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "upstream.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("upstream.test"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp / "cert.pem").write_bytes(pem)
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    client = ssl.create_default_context(cadata=pem.decode())
    return server, client


class ConnectProxy:
    """A CONNECT proxy on loopback that tunnels every request to `127.0.0.1:<port>` whatever the
    host it names (`upstream.test` resolves nowhere); `requests` are the CONNECT heads."""

    def __init__(self, port: int) -> None:
        self.to = port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        request = read_request(client, b"")
        if request is None:
            client.close()
            return
        self.requests.append(request[0].decode())
        upstream = socket.create_connection(("127.0.0.1", self.to))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pipe(a: socket.socket, b: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := a.recv(65536):
                    b.sendall(data)
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def close(self) -> None:
        self.sock.close()


def test_an_https_upstream_is_verified_and_its_connection_kept(tmp_path: Path) -> None:
    server_ctx, client_ctx = _tls_pair(tmp_path)
    server = RawServer("keep", server_ctx)

    async def calls(upstream: Upstream) -> None:
        for _ in range(3):
            assert await get(upstream, f"https://127.0.0.1:{server.port}/v1/messages") == b"{}"

    assert with_upstream(calls, context=client_ctx).opened == 1
    assert server.heads[0].startswith("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:")

    async def untrusted(upstream: Upstream) -> None:  # the system's roots do not know this one
        with pytest.raises(UpstreamError, match="CERTIFICATE_VERIFY_FAILED"):
            await get(upstream, f"https://127.0.0.1:{server.port}/v1/messages")

    with_upstream(untrusted, context=ssl.create_default_context())
    server.close()


def test_an_https_upstream_goes_through_the_proxy_in_a_tunnel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_ctx, client_ctx = _tls_pair(tmp_path)
    server = RawServer("keep", server_ctx)
    proxy = ConnectProxy(server.port)
    monkeypatch.setenv("HTTPS_PROXY", f"http://agent:s%40cret@127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "")

    async def calls(upstream: Upstream) -> None:
        for _ in range(2):
            assert await get(upstream, "https://upstream.test/v1/chat/completions") == b"{}"

    assert with_upstream(calls, context=client_ctx).opened == 1
    assert len(proxy.requests) == 1
    connect = proxy.requests[0].split("\r\n")
    assert connect[0] == "CONNECT upstream.test:443 HTTP/1.1"
    assert "Proxy-Authorization: Basic YWdlbnQ6c0BjcmV0" in connect  # agent:s@cret
    # Inside the tunnel: the origin form, no proxy credentials.
    assert server.heads[0].startswith("POST /v1/chat/completions HTTP/1.1\r\nHost: upstream.test\r\n")
    assert all("proxy-authorization" not in h.lower() for h in server.heads)
    proxy.close()
    server.close()


def test_bytes_after_the_answer_close_the_connection_and_leave_the_answer_whole() -> None:
    # A second answer in the same segment as the first: nothing asked for it.
    server = Scripted([[ANSWER + ANSWER]], then="hang")

    async def calls(upstream: Upstream) -> None:
        assert await get(upstream, f"http://127.0.0.1:{server.port}/") == b"{}"
        assert not any(upstream._idle.values())  # not reused: the next answer would be that one

    with_upstream(calls)
    server.close()
