"""The gateway's HTTP/1.1 server: asyncio connections parsed by llhttp (`httptools`), on TCP and on a
private Unix socket, one event loop for every connection (a thread per connection cost the gateway
most of its CPU: the GIL handed between 16 threads, the stdlib's header parsing).

    listeners = Listeners(handler, limit=64)            # in the loop's thread
    await listeners.listen(tcp_socket)                  # any number of bound, listening sockets
    ... async def handler(exchange): exchange.request, await exchange.read_body(limit), …
    await listeners.stop()                              # see below

A handler answers with `respond` (a whole body) or `start_stream` / `send_chunk` / `end_stream`
(chunked), and may ask for the body first (`read_body`: `100 Continue` is sent then, only then,
to a client that expects it). Requests on one connection are handled one after another.

A client cannot hold the server's memory, its connections or its stop (slowloris):

- at most `limit` connections are open at once over the listeners; further clients wait in the
  listen backlog (`LISTEN_BACKLOG`) until one ends;
- a kept-alive connection waits at most `IDLE_TIMEOUT_S` for its next request, a request's line and
  headers (at most `MAX_HEADER_BYTES`, `MAX_HEADERS`) must be complete `HEADER_TIMEOUT_S` after its
  first byte, its body `BODY_TIMEOUT_S` after its headers or after the handler asks for it; a
  connection past its deadline is closed (a handler waiting for the body gets `BodyError` 408);
- the body is framed strictly (llhttp: one Content-Length, digits only, not with
  Transfer-Encoding; here: Transfer-Encoding `chunked` alone, at most `MAX_CHUNKS` chunks) and
  bounded by the handler's limit (413) as it arrives; unread body bytes pause the reads past
  `READ_HIGH`;
- a write that makes no progress for `IO_TIMEOUT_S` (a client that stops reading) closes the
  connection and fails with `ConnectionResetError`;
- `stop()` stops accepting and closes the connections waiting for a request or its headers at
  once; a handler waiting for its body gets `BodyError` 400 (its answer is still written); handlers
  busy with a request finish it, then their connections close.

A connection closed with request bytes unsent or unread is closed after its answer is flushed and
what the client already sent is drained (at most `DRAIN_BYTES`, `DRAIN_S`): closing on unread bytes
makes the kernel send a reset that can destroy the answer before the client reads it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus

import httptools

from a2rl_gateway import errors as e
from a2rl_gateway.bodies import BodyError

LISTEN_BACKLOG = 1024
IDLE_TIMEOUT_S = 60.0
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
IO_TIMEOUT_S = 60.0
#: A request's line and headers together, and how many headers (the stdlib's server: 100).
MAX_HEADER_BYTES = 64 << 10
MAX_HEADERS = 100
#: Chunks of a chunked request body (a client sends its JSON in a few; a byte each is an attack).
MAX_CHUNKS = 1 << 14
#: Body bytes received and not yet asked for before the connection's reads pause.
READ_HIGH = 1 << 20
#: Requests parsed ahead of the one being handled (pipelining) before the reads pause.
MAX_PIPELINED = 4
#: How often deadlines are checked.
SWEEP_S = 0.1
DRAIN_BYTES = 1 << 20
DRAIN_S = 1.0

_IDLE, _HEADERS, _BODY, _DRAINING, _CLOSED = "idle", "headers", "body", "draining", "closed"
_ENDING = (_DRAINING, _CLOSED)

Handler = Callable[["Exchange"], Awaitable[None]]


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class Request:
    """One request's line and headers (names and values as sent, Latin-1)."""

    __slots__ = ("headers", "keep_alive", "method", "target", "version")

    def __init__(
        self, method: str, target: str, version: str, headers: list[tuple[str, str]], keep_alive: bool
    ) -> None:
        self.method, self.target, self.version = method, target, version
        self.headers, self.keep_alive = headers, keep_alive

    def get_all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def get(self, name: str) -> str | None:
        values = self.get_all(name)
        return values[0] if values else None


class Exchange:
    """One request and its answer on a connection (see the module doc)."""

    def __init__(self, conn: HTTPConnection, request: Request) -> None:
        self.conn = conn
        self.request = request
        self.peer = conn.peer
        self._body = bytearray()
        self._limit = conn.listeners.max_body
        self._chunks = 0
        self.complete = False  # the body arrived to its end
        self.error: BodyError | None = None  # what ended its body early
        self._wanted = False
        self._arrived: asyncio.Event | None = None
        self.responded = False  # the status line is out
        self.finished = False  # the answer is complete
        self.close = False  # close the connection after the answer
        self._chunked = False
        self._pending_head = b""

    # --- the body ---------------------------------------------------------------------------
    @property
    def expects_continue(self) -> bool:
        return (self.request.get("Expect") or "").strip().lower() == "100-continue"

    async def read_body(self, limit: int) -> bytes:
        """The whole body (at most `limit` bytes), once it arrived; `BodyError` when it cannot."""
        self._limit = limit
        if len(self._body) > limit:
            self._fail(BodyError(e.TOO_LARGE, f"request body over {limit >> 20} MiB"))
        if not self._wanted:
            self._wanted = True
            if not self.complete and self.error is None:
                if self.expects_continue and not self.responded:
                    self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.conn.body_wanted()
        if not self.complete and self.error is None:
            self._arrived = asyncio.Event()
            await self._arrived.wait()
        if self.error is not None:
            raise self.error
        return bytes(self._body)

    @property
    def body_unread(self) -> bool:
        return not self.complete

    def _data(self, data: bytes) -> None:
        if self.error is not None:
            return
        self._body += data
        if len(self._body) > self._limit:
            self._fail(BodyError(e.TOO_LARGE, f"request body over {self._limit >> 20} MiB"))

    def _chunk(self) -> None:
        self._chunks += 1
        if self._chunks > MAX_CHUNKS:
            self._fail(BodyError(e.BAD_REQUEST, f"a chunked request body of more than {MAX_CHUNKS} chunks"))

    def _complete(self) -> None:
        if self.error is None:
            self.complete = True
            self._wake()

    def _fail(self, error: BodyError) -> None:
        if self.error is None and not self.complete:
            self.error = error
            self.close = True
            self.conn.body_failed()
            self._wake()

    def _wake(self) -> None:
        if self._arrived is not None:
            self._arrived.set()

    @property
    def unconsumed(self) -> int:
        return 0 if self._wanted else len(self._body)

    # --- the answer -------------------------------------------------------------------------
    def _head(
        self, status: int, headers: Iterable[tuple[str, str]], framing: tuple[str, str] | None
    ) -> bytes:
        self.responded = True
        if not self.request.keep_alive or self.conn.stopping:
            self.close = True
        lines = [f"HTTP/1.1 {status} {_phrase(status)}"]
        lines.extend(f"{k}: {v}" for k, v in headers)
        if framing is not None:
            lines.append(f"{framing[0]}: {framing[1]}")
        if self.close and not any(k.lower() == "connection" for k, _ in headers):
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def respond(
        self, status: int, headers: Iterable[tuple[str, str]], body: bytes, *, close: bool = False
    ) -> None:
        """The whole answer in one write (no body for HEAD; its length still said)."""
        self.close = (
            self.close
            or close
            or any(k.lower() == "connection" and v.strip().lower() == "close" for k, v in headers)
        )
        head = self._head(status, headers, ("Content-Length", str(len(body))))
        self.finished = True
        await self.conn.send(head if self.request.method == "HEAD" else head + body)

    async def start_stream(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        """A streamed answer: chunked, or (an HTTP/1.0 client) ended by closing. Its head leaves
        with its first chunk (one write less per answer)."""
        self._chunked = self.request.version == "1.1"
        if not self._chunked:
            self.close = True
        self._pending_head = self._head(
            status, headers, ("Transfer-Encoding", "chunked") if self._chunked else None
        )

    async def send_chunk(self, data: bytes, *, last: bool = False) -> None:
        """The next bytes of the stream; with `last`, its end too (in the same write)."""
        head, self._pending_head = self._pending_head, b""
        out = head + (b"%x\r\n%s\r\n" % (len(data), data) if self._chunked and data else data)
        if last:
            self.finished = True
            out += b"0\r\n\r\n" if self._chunked else b""
        if out:
            await self.conn.send(out)

    async def end_stream(self) -> None:
        if not self.finished:
            await self.send_chunk(b"", last=True)


class HTTPConnection(asyncio.Protocol):
    """One accepted connection: its parser, its deadline, its exchanges (one handled at a time)."""

    def __init__(self, listeners: Listeners, peer: str) -> None:
        self.listeners = listeners
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self.phase = _IDLE
        self.deadline: float | None = time.monotonic() + IDLE_TIMEOUT_S
        self._header_bytes = 0
        self._head_size = 0  # the request line and headers parsed so far
        self._url = bytearray()
        self._headers: list[tuple[str, str]] = []
        self._parsing: Exchange | None = None  # the exchange whose message is being parsed
        self._queue: collections.deque[Exchange] = collections.deque()
        self._current: Exchange | None = None
        self._worker: asyncio.Task[None] | None = None
        self._paused_reads = False
        self._paused_writes = False
        self._drained: asyncio.Event | None = None
        self._drain_left = DRAIN_BYTES
        self._broken = False  # the parser stopped: nothing more is read as a request
        self._refusal: _RefusedError | None = None  # why a parser callback stopped the parser
        self._eof = False  # the client sends no more
        self.stopping = False
        self.lost = False

    # --- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.listeners._opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.phase = _CLOSED
        self.deadline = None
        for ex in [self._parsing, self._current, *self._queue]:
            if ex is not None and not ex.complete:
                ex._fail(BodyError(e.BAD_REQUEST, "the request body ended early"))
        if self._drained is not None:
            self._drained.set()
        self.listeners._closed(self)

    def pause_writing(self) -> None:
        self._paused_writes = True
        self._drained = asyncio.Event()

    def resume_writing(self) -> None:
        self._paused_writes = False
        if self._drained is not None:
            self._drained.set()

    def data_received(self, data: bytes) -> None:
        if self.phase == _DRAINING:
            self._drain_left -= len(data)
            if self._drain_left <= 0:
                self._close()
            return
        if self._broken or self.phase == _CLOSED:
            return
        if self.phase == _IDLE:
            self._begin_headers()
        if self.phase == _HEADERS:
            self._header_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse_malformed(400, "protocol upgrades are not served")
            return
        except httptools.HttpParserError as exc:
            self._malformed(str(exc) or "malformed request")
            return
        # Still in the headers after this read (reads are at most 256 KiB): too large.
        if self.phase == _HEADERS and self._header_bytes > MAX_HEADER_BYTES:
            self._refuse_malformed(431, f"request line and headers over {MAX_HEADER_BYTES >> 10} KiB")

    def eof_received(self) -> bool | None:
        self._eof = True
        if self._parsing is not None and not self._parsing.complete:
            self._parsing._fail(BodyError(e.BAD_REQUEST, "the request body ended early"))
        if self._current is None and not self._queue:
            return None  # nothing to answer: close
        return True  # keep the write side: an answer is coming

    # --- parser callbacks -------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url.clear()
        self._headers = []
        self._head_size = 0
        if self.phase == _IDLE:
            self._begin_headers()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))
        self._head_size += len(name) + len(value) + 4
        if len(self._headers) > MAX_HEADERS:
            self._refusal = _RefusedError(431, f"more than {MAX_HEADERS} request headers")
            raise self._refusal
        self._check_head_size()

    def _check_head_size(self) -> None:
        if self._head_size > MAX_HEADER_BYTES:
            self._refusal = _RefusedError(431, f"request line and headers over {MAX_HEADER_BYTES >> 10} KiB")
            raise self._refusal

    def on_headers_complete(self) -> None:
        self._check_head_size()
        p = self._parser
        version = p.get_http_version()
        request = Request(
            p.get_method().decode("latin-1"),
            self._url.decode("latin-1"),
            version,
            self._headers,
            p.should_keep_alive() and version != "0.9",
        )
        ex = Exchange(self, request)
        coding = [v.strip().lower() for v in request.get_all("Transfer-Encoding")]
        if coding and coding != ["chunked"]:
            ex._fail(
                BodyError(e.BAD_REQUEST, "Transfer-Encoding must be chunked alone, without Content-Length")
            )
            self._broken = True
        self._parsing = ex
        self._header_bytes = 0
        self.phase = _BODY
        self.deadline = time.monotonic() + BODY_TIMEOUT_S
        self._queue.append(ex)
        if len(self._queue) > MAX_PIPELINED:
            self._pause_reads()
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._work())

    def on_body(self, body: bytes) -> None:
        ex = self._parsing
        if ex is not None:
            ex._data(body)
            if ex.unconsumed > READ_HIGH:
                self._pause_reads()

    def on_chunk_header(self) -> None:
        if self._parsing is not None:
            self._parsing._chunk()

    def on_message_complete(self) -> None:
        ex, self._parsing = self._parsing, None
        if ex is not None:
            ex._complete()
        self.phase = _IDLE
        # No deadline while a request is handled; the next one's starts with its first byte.
        self.deadline = (
            None if (self._current is not None or self._queue) else time.monotonic() + IDLE_TIMEOUT_S
        )

    # --- states -----------------------------------------------------------------------------
    def _begin_headers(self) -> None:
        self.phase = _HEADERS
        self._header_bytes = 0
        self.deadline = time.monotonic() + HEADER_TIMEOUT_S

    def body_wanted(self) -> None:
        """The handler asks for the body: its deadline starts now, reads resume."""
        if self.phase == _BODY:
            self.deadline = time.monotonic() + BODY_TIMEOUT_S
        self._resume_reads()

    def body_failed(self) -> None:
        """The body being parsed was refused: nothing more is read as a request."""
        self._broken = True
        self._pause_reads()

    def expire(self, now: float) -> None:
        """Act on a deadline that passed (the sweeper calls this)."""
        if self.deadline is None or now < self.deadline or (self._paused_reads and self.phase == _BODY):
            return
        if self.phase == _BODY and self._parsing is not None:
            self.deadline = None
            self._parsing._fail(BodyError(e.TIMEOUT, "the request body did not arrive in time"))
        else:
            self._close()  # idle, headers, draining

    def stop(self) -> None:
        """The server stops: close unless an answer is coming (see the module doc)."""
        self.stopping = True
        if self._parsing is not None and not self._parsing.complete:
            self._parsing._fail(BodyError(e.BAD_REQUEST, "the request body ended early"))
        if self._current is None and not self._queue:
            self._close()

    def _pause_reads(self) -> None:
        if not self._paused_reads and self.transport is not None:
            self._paused_reads = True
            self.transport.pause_reading()

    def _resume_reads(self) -> None:
        if self._paused_reads and self.transport is not None and not self._broken:
            self._paused_reads = False
            self.transport.resume_reading()

    # --- malformed requests -----------------------------------------------------------------
    def _malformed(self, message: str) -> None:
        if self._refusal is not None:
            self._refuse_malformed(self._refusal.status, self._refusal.message)
            return
        ex = self._parsing
        if ex is not None and not ex.complete:  # its body is malformed: its handler answers
            ex._fail(BodyError(e.BAD_REQUEST, f"malformed request body: {message}"))
            return
        self._refuse_malformed(400, f"malformed HTTP request: {message}")

    def _refuse_malformed(self, status: int, message: str) -> None:
        """A request the parser refused before its handler could: answered here, then closed."""
        self._broken = True
        self._pause_reads()
        if self._current is not None or self._queue:
            return  # after the answers before it, the connection closes
        error = {"type": "invalid_request_error", "message": message}
        body = json.dumps({"type": "error", "error": error}).encode()
        head = (
            f"HTTP/1.1 {status} {_phrase(status)}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        self.write(head + body)
        self._linger()

    # --- writes -----------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.transport is None or self.lost or self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self.transport.write(data)

    async def send(self, data: bytes) -> None:
        """Write `data`; wait while the client is not reading (at most `IO_TIMEOUT_S`)."""
        self.write(data)
        if self._paused_writes and self._drained is not None:
            try:
                await asyncio.wait_for(self._drained.wait(), IO_TIMEOUT_S)
            except TimeoutError:
                self._close()
                raise ConnectionResetError("the client stopped reading its answer") from None
            if self.lost:
                raise ConnectionResetError("the client closed the connection")

    # --- the exchanges ----------------------------------------------------------------------
    async def _work(self) -> None:
        handler = self.listeners.handler
        try:
            while self._queue and not self.lost:
                ex = self._current = self._queue.popleft()
                if len(self._queue) <= MAX_PIPELINED and not (self.phase == _BODY and self._paused_reads):
                    self._resume_reads()
                try:
                    await handler(ex)
                except ConnectionError:
                    ex.close = True
                except Exception:
                    self.listeners.on_error(ex)
                    ex.close = True
                if not ex.finished and not ex.responded and not self.lost:
                    with contextlib.suppress(ConnectionError):
                        await ex.respond(
                            500, [("Content-Type", "text/plain")], b"internal error\n", close=True
                        )
                self._current = None
                if (
                    ex.close
                    or not ex.finished
                    or ex.body_unread
                    or self.stopping
                    or self._broken
                    or self._eof
                ):
                    self._queue.clear()
                    self._linger()
                    return
                if not self._queue and self.phase == _IDLE:
                    self.deadline = time.monotonic() + IDLE_TIMEOUT_S
        finally:
            self._worker = None
            self._current = None

    def _linger(self) -> None:
        """Close once the answer is flushed, draining what the client still sends (bounded)."""
        if self.lost or self.transport is None:
            return
        self.phase = _DRAINING
        self._parsing = None
        self.deadline = time.monotonic() + DRAIN_S
        self._broken = True
        if self._paused_reads:
            self._paused_reads = False
            self.transport.resume_reading()
        if self._eof:
            self._close()
        elif self.transport.can_write_eof():
            with contextlib.suppress(OSError):
                self.transport.write_eof()
        else:
            self._close()

    def _close(self) -> None:
        self.phase = _CLOSED
        self.deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class _RefusedError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Listeners:
    """The listening sockets of one service, the connections they accepted (at most `limit`), their
    deadlines and their stop. Every method runs in the event loop's thread, except `__len__`."""

    def __init__(
        self,
        handler: Handler,
        *,
        limit: int,
        max_body: int,
        on_error: Callable[[Exchange], None] = lambda ex: None,
    ) -> None:
        self.handler = handler
        self.limit = limit
        self.max_body = max_body
        self.on_error = on_error
        self._open: set[HTTPConnection] = set()
        self._free = asyncio.Event()
        self._free.set()
        self._pending = 0  # accepted, not yet open
        self._accepting: list[asyncio.Task[None]] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._sockets: list[socket.socket] = []
        self._stopping = False

    def __len__(self) -> int:
        return len(self._open)

    def listen(self, sock: socket.socket) -> None:
        """Serve the bound socket `sock` (listening with `LISTEN_BACKLOG`) from now on."""
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        self._sockets.append(sock)
        loop = asyncio.get_running_loop()
        self._accepting.append(loop.create_task(self._accept(sock)))
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep())

    async def _accept(self, lsock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        inet = lsock.family in (socket.AF_INET, socket.AF_INET6)
        while not self._stopping:
            await self._free.wait()
            try:
                sock, addr = await loop.sock_accept(lsock)
            except OSError:
                if self._stopping:
                    return
                await asyncio.sleep(0.05)  # out of descriptors: wait for one to close
                continue
            if inet:
                # Headers and body leave in two writes: without this each kept-alive request would
                # wait for the client's delayed ACK (~40 ms).
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = str(addr[0]) if inet and isinstance(addr, tuple) else "unix"
            self._reserve()
            try:
                await loop.connect_accepted_socket(functools.partial(HTTPConnection, self, peer), sock)
            except OSError:
                sock.close()
                self._release()

    def _reserve(self) -> None:
        self._pending += 1
        if len(self._open) + self._pending >= self.limit:
            self._free.clear()

    def _release(self) -> None:
        self._pending -= 1
        self._update()

    def _opened(self, conn: HTTPConnection) -> None:
        self._pending -= 1
        self._open.add(conn)
        if self._stopping:
            conn.stop()

    def _closed(self, conn: HTTPConnection) -> None:
        self._open.discard(conn)
        self._update()

    def _update(self) -> None:
        if len(self._open) + self._pending < self.limit:
            self._free.set()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            now = time.monotonic()
            for conn in list(self._open):
                conn.expire(now)

    def close_listening(self) -> None:
        """Stop accepting: the listening sockets close (their backlog is reset)."""
        self._stopping = True
        self._free.set()
        for task in self._accepting:
            task.cancel()
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    def stop(self) -> None:
        """Stop accepting; close what waits for a request; answers in progress finish."""
        self.close_listening()
        for conn in list(self._open):
            conn.stop()

    async def closed(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until every connection closed or only drains what its client
        still sends after its last answer; then close them all and stop the sweeper. False when
        an answer was still being written."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while not (done := not self._pending and all(c.phase in _ENDING for c in self._open)):
            if loop.time() >= end:
                break
            await asyncio.sleep(0.01)
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self._open):
            conn._close()
        return done
