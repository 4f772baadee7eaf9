"""`Upstream`: the gateway's client to the provider, kept-alive connections reused call after call
(an HTTP/1.1 client on llhttp, `httptools`' parser, in the gateway's event loop).

    upstream = Upstream(timeout_s=600)
    await upstream.open()                                            # in the loop
    async with upstream.request("POST", url, body, headers) as resp:  # `UpstreamResponse`
        ... resp.status, resp.headers, await resp.read(), await resp.read_some() ...
    await upstream.close()

A new TCP (and TLS) connection per call cost more than the upstream's own work on a fast
self-hosted server; a pooled one costs a send and a read. A connection goes back to the pool once
its answer was read to the end and the upstream did not ask to close it; none is kept idle longer
than `IDLE_S`. A call that finds a reused connection closed under it before any answer byte (the
server's idle close racing the send) is sent once more on a new one; a call on a new connection is
never sent twice.

What is sent is exactly what the gateway says: the target as given (not re-quoted), its headers
and `Host` (with `Content-Length` when there is a body and the gateway did not give one), no added
`Accept`, `Accept-Encoding` or `User-Agent`; the answer's bytes come back as the upstream sent them
(de-chunked, not decompressed). `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` apply, read once as urllib
reads them (an https upstream through a proxy is a CONNECT tunnel, an http one is sent to the proxy
with its absolute URL; credentials in the proxy's URL are sent as `Proxy-Authorization`).
Redirects are never followed: a 3xx goes back to the client as it is.

Why not aiohttp's client (the gateway's before): its request and response objects were 30 % of the
gateway's CPU per call against a fast upstream; this one is a protocol object per connection, a
head built with one join and the parser's callbacks.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import cast

import httptools

#: An idle connection older than this is closed rather than reused (servers close theirs after
#: 5 s to a few minutes).
IDLE_S = 30.0
#: Answer bytes read ahead of the gateway before the connection stops reading (flow control).
READ_AHEAD_BYTES = 1 << 20
#: The most a proxy's answer to CONNECT may take before the tunnel counts as refused.
MAX_TUNNEL_HEAD_BYTES = 64 << 10

# (scheme, host, port, proxy URL or ""): the connections that may serve a call to that origin.
_PoolKey = tuple[str, str, int, str]


class UpstreamError(Exception):
    """The upstream could not be reached, or answered no HTTP."""


class _ClosedError(UpstreamError):
    """The connection ended before any byte of the answer (a retry on a new one is safe when it
    was a reused connection)."""


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class _Connection(asyncio.Protocol):
    """One upstream connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.reused = False
        self._tunnel: bytearray | None = None  # reading a proxy's answer to CONNECT
        self._tunnel_waiter: asyncio.Future[bytes] | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._status = 0
        self._headers: list[tuple[str, str]] = []
        self._framed = False  # Content-Length or chunked: the end is not the connection's close
        self._head_only = False  # an answer to HEAD: no body whatever its headers say
        self._got_bytes = False
        self._head_done = False
        self._complete = False
        self._keep_alive = False
        self._error: UpstreamError | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._last_activity = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._last_activity = self.loop.time()
        if self._tunnel is not None:
            self._tunnel += data
            if b"\r\n\r\n" in self._tunnel or len(self._tunnel) > MAX_TUNNEL_HEAD_BYTES:
                waiter, self._tunnel_waiter = self._tunnel_waiter, None
                if waiter is not None and not waiter.done():
                    waiter.set_result(bytes(self._tunnel))
            return
        if self._parser is None or self._complete:
            self._abort(UpstreamError("the upstream sent bytes no request asked for"))
            return
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._abort(UpstreamError(f"the upstream's answer is not valid HTTP/1.1: {exc}"))

    def eof_received(self) -> bool | None:
        self._ended(None)
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended(exc)

    def pause_writing(self) -> None:  # requests are small; nothing waits on the write buffer
        pass

    def resume_writing(self) -> None:
        pass

    # --- httptools callbacks -------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._complete:  # a second answer to one request (in the same read as the first)
            raise UpstreamError("the upstream sent bytes no request asked for")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._headers = []  # an interim answer (103 Early Hints): the real one follows
            return
        self._status = status
        for name, value in self._headers:
            low = name.lower()
            if low == "content-length" or (low == "transfer-encoding" and "chunked" in value.lower()):
                self._framed = True
        if status in (204, 304):
            self._framed = True
        self._head_done = True
        if self._head_only:
            self._complete = True
            self.closed = True  # the parser expects a body that will not come: not reused
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > READ_AHEAD_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._head_done:
            assert self._parser is not None
            self._keep_alive = self._parser.should_keep_alive()  # reset once the parser moves on
            self._complete = True
            self._wake()

    # --- the connection's life -----------------------------------------------------------------
    def _ended(self, exc: Exception | None) -> None:
        """The upstream sent its last byte (or the connection broke)."""
        if self.closed and (self._complete or self._error is not None):
            return
        self.closed = True
        if self._tunnel_waiter is not None and not self._tunnel_waiter.done():
            self._tunnel_waiter.set_result(bytes(self._tunnel or b""))
        if self._parser is None or self._complete or self._error is not None:
            return
        if self._head_done and not self._framed:
            self._complete = True  # an answer read until the connection's close
        elif not self._got_bytes:
            self._error = _ClosedError("the upstream closed the connection before answering")
        else:
            self._error = UpstreamError(
                f"the upstream closed the connection mid-answer{f': {_reason(exc)}' if exc else ''}"
            )
        self._wake()

    def _abort(self, error: UpstreamError) -> None:
        if self._error is None:
            self._error = error
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _expire(self) -> None:
        """The read deadline: `timeout_s` with no byte from the upstream ends the call."""
        self._timer = None
        if self._complete or self._error is not None or self.closed:
            return
        idle = self.loop.time() - self._last_activity
        if idle >= self.timeout_s:
            self._abort(UpstreamError(f"no answer from the upstream for {self.timeout_s:g} s"))
        else:
            self._timer = self.loop.call_later(self.timeout_s - idle, self._expire)

    async def _wait(self) -> None:
        waiter = self._waiter = self.loop.create_future()
        await waiter

    async def tunnel(self, target: str, headers: Mapping[str, str]) -> None:
        """CONNECT through the proxy this connection reaches; `UpstreamError` when it refuses."""
        assert self.transport is not None
        self._tunnel = bytearray()
        self._tunnel_waiter = self.loop.create_future()
        lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        try:
            answer = await asyncio.wait_for(self._tunnel_waiter, self.timeout_s)
        except TimeoutError as exc:
            raise UpstreamError("the proxy did not answer CONNECT") from exc
        self._tunnel = None
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if b"\r\n\r\n" not in answer or len(parts) < 2 or not parts[1].startswith("2"):
            raise UpstreamError(f"the proxy refused the tunnel: {status_line or 'no answer'}")
        if answer.split(b"\r\n\r\n", 1)[1]:
            raise UpstreamError("the proxy sent bytes before the tunnel was set up")

    def send(self, head: bytes, body: bytes | None, *, head_only: bool) -> None:
        """Start a request on this (idle, open) connection."""
        assert self.transport is not None
        self._parser = httptools.HttpResponseParser(self)
        self._status, self._headers, self._framed, self._head_only = 0, [], False, head_only
        self._got_bytes = self._head_done = self._complete = self._keep_alive = False
        self._error = None
        self._chunks.clear()
        self._buffered = 0
        self._last_activity = self.loop.time()
        self._timer = self.loop.call_later(self.timeout_s, self._expire)
        if body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)

    async def head(self) -> tuple[int, list[tuple[str, str]]]:
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._status, self._headers

    def at_end(self) -> bool:
        return self._complete and not self._chunks

    async def read_some(self) -> bytes:
        while not self._chunks:
            if self._complete:
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()
        chunk = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._drain())
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= READ_AHEAD_BYTES // 2 and self.transport is not None:
            self._paused = False
            self._last_activity = self.loop.time()  # not the upstream's silence: ours
            self.transport.resume_reading()
        return chunk

    def _drain(self) -> list[bytes]:
        chunks = list(self._chunks)
        self._chunks.clear()
        return chunks

    def done(self) -> bool:
        """Whether the call ended so that the connection may serve the next one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._parser = None
        return self._complete and self._keep_alive and not self.closed and self._error is None

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()


class UpstreamResponse:
    """One answer: status and headers read, the body not yet."""

    def __init__(self, conn: _Connection, status: int, headers: list[tuple[str, str]]) -> None:
        self._conn = conn
        self.status = status
        self.headers = headers

    def header(self, name: str) -> str | None:
        low = name.lower()
        for k, v in self.headers:
            if k.lower() == low:
                return v
        return None

    async def read(self) -> bytes:
        """The rest of the body; `UpstreamError` when it broke off."""
        parts = []
        while chunk := await self._conn.read_some():
            parts.append(chunk)
        return b"".join(parts)

    def at_end(self) -> bool:
        """Whether the whole body has been read (the next `read_some` would return b"")."""
        return self._conn.at_end()

    async def read_some(self) -> bytes:
        """The next bytes of the body as they arrive (b"" at its end); `UpstreamError`."""
        return await self._conn.read_some()


class Upstream:
    def __init__(self, timeout_s: float, *, context: ssl.SSLContext | None = None) -> None:
        self.timeout_s = timeout_s
        self._context = context
        self._open = False
        self._proxies = urllib.request.getproxies()
        #: (scheme, host) → (proxy "host:port" or None, its `Proxy-Authorization` header or None).
        self._routes: dict[tuple[str, str], tuple[tuple[str, int] | None, str | None]] = {}
        self._idle: dict[_PoolKey, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        #: Connections opened so far (what a test or `/metrics` may count).
        self.opened = 0

    async def open(self) -> None:
        self._open = True

    def _route(self, scheme: str, host: str) -> tuple[tuple[str, int] | None, str | None]:
        """The proxy for `scheme://host` (None: direct), and its `Proxy-Authorization` value."""
        route = self._routes.get((scheme, host))
        if route is None:
            proxy = None if urllib.request.proxy_bypass(host) else self._proxies.get(scheme)
            if not proxy:
                route = (None, None)
            else:
                parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
                auth = None
                if parts.username is not None:
                    user = urllib.parse.unquote(parts.username)
                    password = urllib.parse.unquote(parts.password or "")
                    auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
                route = ((parts.hostname or "", parts.port or 80), auth)
            self._routes[(scheme, host)] = route
        return route

    def _ssl(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = ssl.create_default_context()
        return self._context

    def _pooled(self, key: _PoolKey) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_S:
                conn.reused = True
                return conn
            conn.close()
        return None

    async def _connect(self, key: _PoolKey, proxy: tuple[str, int] | None, auth: str | None) -> _Connection:
        scheme, host, port, _ = key
        loop = asyncio.get_running_loop()
        tls = scheme == "https"
        conn = _Connection(self.timeout_s)
        try:
            if proxy is None:
                await asyncio.wait_for(
                    loop.create_connection(
                        lambda: conn, host, port, ssl=self._ssl() if tls else None,
                        server_hostname=host if tls else None,
                    ),
                    self.timeout_s,
                )  # fmt: skip
            else:
                await asyncio.wait_for(loop.create_connection(lambda: conn, *proxy), self.timeout_s)
                if tls:
                    await conn.tunnel(f"{host}:{port}", {"Proxy-Authorization": auth} if auth else {})
                    assert conn.transport is not None
                    conn.transport = cast(
                        asyncio.Transport,
                        await asyncio.wait_for(
                            loop.start_tls(conn.transport, conn, self._ssl(), server_hostname=host),
                            self.timeout_s,
                        ),
                    )
        except UpstreamError:
            conn.close()
            raise
        except TimeoutError as exc:
            conn.close()
            raise UpstreamError(
                f"could not connect to the upstream {host}:{port} in {self.timeout_s:g} s"
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            conn.close()
            raise UpstreamError(f"could not connect to the upstream {host}:{port}: {_reason(exc)}") from exc
        self.opened += 1
        return conn

    async def _send(
        self, conn: _Connection, head: bytes, body: bytes | None, method: str
    ) -> tuple[int, list[tuple[str, str]]]:
        """Send on `conn` and read the answer's head (the connection closed when that fails)."""
        self._busy.add(conn)
        conn.send(head, body, head_only=method == "HEAD")
        try:
            return await conn.head()
        except BaseException:
            self._busy.discard(conn)
            conn.close()
            raise

    @contextlib.asynccontextmanager
    async def request(
        self, method: str, url: str, body: bytes | None, headers: Mapping[str, str]
    ) -> AsyncIterator[UpstreamResponse]:
        """Send one request and yield its answer (headers read, body not); `UpstreamError` when
        the upstream cannot be reached or answers no HTTP, `ValueError` for a URL it cannot reach."""
        if not self._open:
            raise UpstreamError("the gateway's upstream client is closed")
        parts = urllib.parse.urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
        if scheme not in ("http", "https") or not host:
            raise ValueError(f"unsupported upstream URL scheme {scheme!r}")
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError as exc:
            raise ValueError(f"the upstream URL's port is not a number: {exc}") from exc
        proxy, auth = self._route(scheme, host)
        absolute = proxy is not None and scheme == "http"  # sent to the proxy with the request itself
        if absolute:
            target = url.split("#", 1)[0]
        else:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        names = {k.lower() for k in headers}
        lines = [f"{method} {target} HTTP/1.1"]
        if "host" not in names:
            default = 443 if scheme == "https" else 80
            bracketed = f"[{host}]" if ":" in host else host
            lines.append(f"Host: {bracketed}" if port == default else f"Host: {bracketed}:{port}")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None and "content-length" not in names:
            lines.append(f"Content-Length: {len(body)}")
        if absolute and auth is not None:
            lines.append(f"Proxy-Authorization: {auth}")
        try:
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError as exc:
            raise ValueError(f"a header or the target cannot be sent in HTTP/1.1: {exc}") from exc
        key: _PoolKey = (scheme, host, port, f"{proxy[0]}:{proxy[1]}" if proxy else "")
        conn = self._pooled(key) or await self._connect(key, proxy, auth)
        try:
            status, answer_headers = await self._send(conn, head, body, method)
        except _ClosedError:
            if not conn.reused:
                raise
            # The server closed the idle connection as the call was sent: once more, on a new one.
            conn = await self._connect(key, proxy, auth)
            status, answer_headers = await self._send(conn, head, body, method)
        try:
            yield UpstreamResponse(conn, status, answer_headers)
        finally:
            self._busy.discard(conn)
            if conn.done() and self._open:
                conn.idle_since = time.monotonic()
                self._idle.setdefault(key, []).append(conn)
            else:
                conn.close()

    async def close(self) -> None:
        self._open = False
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        for conn in list(self._busy):
            conn.close()
        await asyncio.sleep(0)
