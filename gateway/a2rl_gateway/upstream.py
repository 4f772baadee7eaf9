"""`Upstream`: the gateway's client to the provider, kept-alive connections reused call after call
(aiohttp's connector, in the gateway's event loop).

    upstream = Upstream(timeout_s=600)
    await upstream.open()                                            # in the loop
    async with upstream.request("POST", url, body, headers) as resp:  # `UpstreamResponse`
        ... resp.status, resp.headers, await resp.read(), await resp.read_some() ...
    await upstream.close()

A new TCP (and TLS) connection per call cost more than the upstream's own work on a fast
self-hosted server; a pooled one costs a send and a read. A connection goes back to the pool once
its answer was read to the end and the upstream did not ask to close it; none is kept idle longer
than `IDLE_S`. A call that finds a reused connection closed
under it before any answer byte (the server's idle close racing the send) is sent once more on a
new one; a call on a new connection is never sent twice.

What is sent is exactly what the gateway says: the target as given (not re-quoted), its
headers, no added `Accept`, `Accept-Encoding` or `User-Agent`; the answer's bytes come back as the
upstream sent them (not decompressed). `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` apply, read once as
urllib reads them (an https upstream through a proxy is a CONNECT tunnel, an http one is sent to the
proxy with its absolute URL; credentials in the proxy's URL are sent as `Proxy-Authorization`).
Redirects are never followed: a 3xx goes back to the client as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

import aiohttp
from yarl import URL

#: An idle connection older than this is closed rather than reused (servers close theirs after
#: 5 s to a few minutes).
IDLE_S = 30.0


class UpstreamError(Exception):
    """The upstream could not be reached, or answered no HTTP."""


class UpstreamResponse:
    """One answer: status and headers read, the body not yet."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.raw_headers]

    def header(self, name: str) -> str | None:
        return self._resp.headers.get(name)

    async def read(self) -> bytes:
        """The rest of the body; `UpstreamError` when it broke off."""
        try:
            return await self._resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise UpstreamError(_reason(exc)) from exc

    def at_end(self) -> bool:
        """Whether the whole body has been read (the next `read_some` would return b"")."""
        return self._resp.content.at_eof()

    async def read_some(self) -> bytes:
        """The next bytes of the body as they arrive (b"" at its end); `UpstreamError`."""
        try:
            return await self._resp.content.readany()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise UpstreamError(_reason(exc)) from exc


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class Upstream:
    def __init__(self, timeout_s: float, *, context: ssl.SSLContext | None = None) -> None:
        self.timeout_s = timeout_s
        self._context = context
        self._session: aiohttp.ClientSession | None = None
        self._proxies = urllib.request.getproxies()
        self._routes: dict[tuple[str, str], tuple[URL | None, dict[str, str] | None]] = {}
        #: Connections opened so far (what a test or `/metrics` may count).
        self.opened = 0

    async def open(self) -> None:
        trace = aiohttp.TraceConfig()
        trace.on_connection_create_end.append(self._created)
        trace.on_connection_reuseconn.append(self._reused)
        connector = aiohttp.TCPConnector(
            limit=0, keepalive_timeout=IDLE_S, ssl=self._context if self._context is not None else True
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent"),
            timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout_s, sock_read=self.timeout_s),
            trace_configs=[trace],
        )

    def _route(self, scheme: str, host: str) -> tuple[URL | None, dict[str, str] | None]:
        """The proxy for `scheme://host` (None: direct), and the headers with its credentials."""
        route = self._routes.get((scheme, host))
        if route is None:
            proxy = None if urllib.request.proxy_bypass(host) else self._proxies.get(scheme)
            if not proxy:
                route = (None, None)
            else:
                url = URL(proxy)
                auth = None
                if url.user is not None:
                    user, password = urllib.parse.unquote(url.user), urllib.parse.unquote(url.password or "")
                    auth = {"Proxy-Authorization": aiohttp.encode_basic_auth(user, password)}
                route = (url.with_user(None), auth)
            self._routes[(scheme, host)] = route
        return route

    async def _created(self, session: Any, ctx: SimpleNamespace, params: Any) -> None:
        self.opened += 1

    async def _reused(self, session: Any, ctx: SimpleNamespace, params: Any) -> None:
        if ctx.trace_request_ctx is not None:
            ctx.trace_request_ctx.reused = True

    @contextlib.asynccontextmanager
    async def request(
        self, method: str, url: str, body: bytes | None, headers: Mapping[str, str]
    ) -> AsyncIterator[UpstreamResponse]:
        """Send one request and yield its answer (headers read, body not); `UpstreamError` when
        the upstream cannot be reached or answers no HTTP, `ValueError` for a URL it cannot reach."""
        if self._session is None:
            raise UpstreamError("the gateway's upstream client is closed")
        target = URL(url, encoded=True)
        if target.scheme not in ("http", "https") or not target.host:
            raise ValueError(f"unsupported upstream URL scheme {target.scheme!r}")
        proxy, proxy_headers = self._route(target.scheme, target.host)
        sent = dict(headers)
        if proxy_headers and target.scheme == "http":  # sent to the proxy with the request itself
            sent.update(proxy_headers)
        for attempt in (1, 2):
            used = SimpleNamespace(reused=False)
            try:
                resp = await self._session.request(
                    method,
                    target,
                    data=body,
                    headers=sent,
                    allow_redirects=False,
                    proxy=proxy,
                    proxy_headers=proxy_headers,
                    trace_request_ctx=used,
                )
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if attempt == 1 and used.reused:
                    continue  # the server closed the idle connection as the call was sent: a new one
                raise UpstreamError(_reason(exc)) from exc
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise UpstreamError(_reason(exc)) from exc
        try:
            yield UpstreamResponse(resp)
        finally:
            resp.release()  # pooled again when read to its end, else closed

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
            await asyncio.sleep(0)
