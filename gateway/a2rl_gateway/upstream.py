"""`UpstreamPool`: kept-alive HTTP/1.1 connections to the upstream, reused call after call.

    pool = UpstreamPool(timeout_s=600)
    with pool.request("POST", url, body, headers) as resp:   # http.client.HTTPResponse
        ... resp.status, resp.headers, resp.read1(n) ...
    pool.close()

A new TCP (and TLS) connection per call cost more than the upstream's own work on a fast
self-hosted server; a pooled one costs a send and a read. A connection goes back to the pool only
when its answer was read to the end and the upstream did not ask to close it; one that waited
idle is checked before reuse (a server that closed it has made it readable: EOF), and a call that
finds a reused connection closed under it before any answer byte (the server's idle close racing
the send) is sent once more on a new one. At most `MAX_IDLE` idle connections are kept per
upstream, none longer than `IDLE_S`.

`HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (read once, as urllib reads them) apply: an https upstream
through a proxy is a CONNECT tunnel, an http one is sent to the proxy with its absolute URL.
Redirects are never followed (http.client does not): a 3xx goes back to the client as it is.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import select
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping

#: Idle connections kept per upstream (more than the gateway's concurrent calls are never needed).
MAX_IDLE = 32
#: An idle connection older than this is closed rather than reused (servers close theirs after
#: 5 s to a few minutes; the readability check catches most, this the rest).
IDLE_S = 30.0

_Key = tuple[str, str, int]
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class _Route:
    """How to reach one upstream origin: directly or through a proxy."""

    def __init__(self, scheme: str, host: str, port: int, proxy: str | None) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self.proxy: urllib.parse.SplitResult | None = urllib.parse.urlsplit(proxy) if proxy else None
        self.proxy_auth: str | None = None
        if self.proxy is not None and self.proxy.username is not None:
            user = urllib.parse.unquote(self.proxy.username)
            password = urllib.parse.unquote(self.proxy.password or "")
            self.proxy_auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def connect(self, timeout_s: float, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.proxy is None:
            host, port = self.host, self.port
        else:
            host = self.proxy.hostname or ""
            port = self.proxy.port or (443 if self.proxy.scheme == "https" else 80)
        if self.scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
            if self.proxy is not None:
                auth = {"Proxy-Authorization": self.proxy_auth} if self.proxy_auth else None
                conn.set_tunnel(self.host, self.port, headers=auth)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        conn.connect()
        with contextlib.suppress(OSError):
            assert conn.sock is not None
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def target(self, url: urllib.parse.SplitResult) -> str:
        """The request target: the path (a tunnel or no proxy), the absolute URL (an http proxy)."""
        if self.proxy is not None and self.scheme == "http":
            return urllib.parse.urlunsplit((url.scheme, url.netloc, url.path or "/", url.query, ""))
        return (url.path or "/") + (f"?{url.query}" if url.query else "")


class UpstreamPool:
    def __init__(self, timeout_s: float, *, context: ssl.SSLContext | None = None) -> None:
        self.timeout_s = timeout_s
        self._context = context
        self._proxies = urllib.request.getproxies()
        self._lock = threading.Lock()
        self._idle: dict[_Key, list[tuple[float, http.client.HTTPConnection]]] = {}
        self._routes: dict[_Key, _Route] = {}
        self._closed = False
        #: Connections opened so far (what a test or `/metrics` may count).
        self.opened = 0

    def _route(self, scheme: str, host: str, port: int) -> _Route:
        key = (scheme, host, port)
        with self._lock:
            route = self._routes.get(key)
        if route is None:
            proxy = None if urllib.request.proxy_bypass(host) else self._proxies.get(scheme)
            route = _Route(scheme, host, port, proxy)
            with self._lock:
                route = self._routes.setdefault(key, route)
        return route

    def _take(self, key: _Key) -> http.client.HTTPConnection | None:
        """An idle connection to `key` still fit to use, or None."""
        now = time.monotonic()
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                since, conn = idle.pop()
            sock = conn.sock
            # Idle and readable: the server closed it (EOF) or sent something unasked.
            if sock is not None and now - since < IDLE_S and not select.select([sock], [], [], 0)[0]:
                return conn
            conn.close()

    def _give_back(self, key: _Key, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if not self._closed and len(idle) < MAX_IDLE:
                idle.append((time.monotonic(), conn))
                return
        conn.close()

    @contextlib.contextmanager
    def request(
        self, method: str, url: str, body: bytes | None, headers: Mapping[str, str]
    ) -> Iterator[http.client.HTTPResponse]:
        """Send one request and yield its response (headers read, body not); OSError or
        `http.client.HTTPException` when the upstream cannot be reached or answers no HTTP. The
        connection is pooled again once the `with` block ends with the answer read to its end."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported upstream URL scheme {scheme!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, parts.hostname, port)
        route = self._route(*key)
        target = route.target(parts)
        sent = dict(headers)
        if route.proxy_auth and scheme == "http":
            sent["Proxy-Authorization"] = route.proxy_auth
        conn, resp = self._send(key, route, method=method, target=target, body=body, headers=sent)
        try:
            yield resp
        finally:
            if resp.isclosed() and not resp.will_close and not self._closed:
                self._give_back(key, conn)
            else:
                conn.close()

    def _send(
        self,
        key: _Key,
        route: _Route,
        *,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self._take(key)
        while True:
            reused = conn is not None
            if conn is None:
                conn = route.connect(self.timeout_s, self._context)
                with self._lock:
                    self.opened += 1
            try:
                conn.request(method, target, body=body, headers=headers)
                return conn, conn.getresponse()
            except _STALE:
                conn.close()
                if not reused:
                    raise
                conn = None  # the server closed the idle connection as the call was sent: a new one
            except BaseException:
                conn.close()
                raise

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for _, conn in conns:
                conn.close()
