"""The HTTP servers of the recorder's grading API: one on TCP and one on a private Unix socket
(`a2rl.unix_server`), both serving the same service object, and their request-handler base. (The
driver gateway, whose every LLM call passes it, serves the same bounds from one event loop:
`a2rl_gateway.http1`.)

Both servers use daemon threads and a listen backlog of `LISTEN_BACKLOG` (the stdlib's default of
5 dropped most of 200 simultaneous clients; the kernel caps it at net.core.somaxconn).

A client cannot hold the server's threads or its stop (slowloris):

- at most `MAX_CONNECTIONS` connections are served at once (a thread each, counted over the
  servers that share one `Connections` table); further clients wait in the listen backlog until one
  ends, and are then served;
- a kept-alive connection waits at most `IDLE_TIMEOUT_S` for its next request, a request's line
  and headers must be complete `HEADER_TIMEOUT_S` after its first byte, and its body
  `BODY_TIMEOUT_S` after its headers (or after the handler says it starts reading it,
  `expect_body`); past its deadline a connection's reads end (EOF, `timed_out` set) and it closes;
- any one read or write that makes no progress for `IO_TIMEOUT_S` fails (a client that stops
  reading its answer);
- `shutdown()` ends the reads of every open connection at once: those waiting for a request, its
  headers or its body close now, while handlers busy with a request finish it (their answer is
  still written) and then close.

The deadlines are enforced by the serving loop (`service_actions`, every poll interval), which
shuts down the read side of a connection blocked past its deadline.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Generic, TypeVar

from a2rl.unix_server import PrivateUnixServer

LISTEN_BACKLOG = 1024
MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 60.0
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
IO_TIMEOUT_S = 60.0

S = TypeVar("S")

_IDLE, _HEADERS, _BODY = "idle", "headers", "body"


class Connection:
    """The read state of one accepted connection, shared by its handler thread (which reads) and
    the serving loop or a stopping thread (which may end its reads)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()
        self._phase = _IDLE
        self._deadline: float | None = None
        self._reading = False
        self._reads_closed = False
        #: The connection's reads ended because a deadline passed (not because the server stops).
        self.timed_out = False

    def expect(self, phase: str, seconds: float) -> None:
        """From now on the connection reads `phase` (idle, headers, body), for at most `seconds`."""
        with self._lock:
            self._phase, self._deadline = phase, time.monotonic() + seconds

    def begin_read(self) -> bool:
        """Whether the handler may block in a read now (False: its reads are over, EOF)."""
        with self._lock:
            if not self._reads_closed and self._deadline is not None and time.monotonic() >= self._deadline:
                self._reads_closed = self.timed_out = True
            if self._reads_closed:
                return False
            self._reading = True
            return True

    @property
    def reads_closed(self) -> bool:
        with self._lock:
            return self._reads_closed

    def end_read(self, got: int) -> None:
        with self._lock:
            self._reading = False
            if got and self._phase == _IDLE:  # the next request has begun: its headers are due
                self._phase, self._deadline = _HEADERS, time.monotonic() + HEADER_TIMEOUT_S

    def close_reads(self, *, only_if_late: bool = False) -> None:
        """End the connection's reads (a read blocked now returns EOF at once); with `only_if_late`,
        only when it is blocked in a read past its deadline."""
        with self._lock:
            if self._reads_closed:
                return
            late = self._deadline is not None and time.monotonic() >= self._deadline
            if only_if_late and not (self._reading and late):
                return
            self._reads_closed = True
            self.timed_out = self.timed_out or (only_if_late and late)
            if self._reading:
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RD)


class Connections:
    """The connections open on one service's servers (one table may serve the TCP and the Unix
    socket server of the same service): at most `limit`, their deadlines, their stop."""

    def __init__(self, limit: int = MAX_CONNECTIONS) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._open: dict[socket.socket, Connection] = {}
        self._stopping = False

    def __len__(self) -> int:
        with self._cond:
            return len(self._open)

    def admit(self, sock: socket.socket) -> Connection | None:
        """Wait (the caller is the accepting loop: the client waits in the backlog meanwhile) until
        fewer than `limit` connections are open; None once stopping."""
        with self._cond:
            while len(self._open) >= self.limit and not self._stopping:
                self._cond.wait(0.1)
                self.expire()
            if self._stopping:
                return None
            conn = self._open[sock] = Connection(sock)
            return conn

    def get(self, sock: socket.socket) -> Connection | None:
        with self._cond:
            return self._open.get(sock)

    def release(self, sock: socket.socket) -> None:
        with self._cond:
            if self._open.pop(sock, None) is not None:
                self._cond.notify_all()

    def expire(self) -> None:
        """End the reads of connections blocked in a read past their deadline."""
        with self._cond:
            conns = list(self._open.values())
        for conn in conns:
            conn.close_reads(only_if_late=True)

    def stop(self) -> None:
        """Admit no more connections and end the reads of every open one."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            conns = list(self._open.values())
        for conn in conns:
            conn.close_reads()


class _Bounded:
    """What both servers add to the stdlib's threading servers (a mixin before them)."""

    connections: Connections

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.connections.admit(request) is None:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)  # type: ignore[misc]

    def shutdown_request(self, request: Any) -> None:
        self.connections.release(request)
        super().shutdown_request(request)  # type: ignore[misc]

    def service_actions(self) -> None:
        super().service_actions()  # type: ignore[misc]
        self.connections.expire()

    def shutdown(self) -> None:
        """Stop the serving loop and end the reads of every open connection (see the module doc)."""
        self.connections.stop()
        super().shutdown()  # type: ignore[misc]


class ServiceHTTPServer(_Bounded, ThreadingHTTPServer, Generic[S]):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG
    allow_reuse_address = True

    def __init__(
        self,
        service: S,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        connections: Connections | None = None,
    ) -> None:
        self.service = service
        self.connections = connections if connections is not None else Connections()
        super().__init__((host, port), handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class ServiceUnixServer(_Bounded, PrivateUnixServer, Generic[S]):
    """The service on a Unix socket at `path` (mode 0600, a stale socket replaced, the file removed
    by `server_close`)."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        service: S,
        path: Path,
        handler: type[BaseHTTPRequestHandler],
        connections: Connections | None = None,
    ) -> None:
        self.service = service
        self.connections = connections if connections is not None else Connections()
        super().__init__(path, handler)


class _WatchedReader(io.RawIOBase):
    """The socket's reads, each allowed by the connection's state (EOF once its reads are over)."""

    def __init__(self, sock: socket.socket, conn: Connection) -> None:
        self._sock, self._conn = sock, conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._conn.begin_read():
            return 0
        got = 0
        try:
            got = self._sock.recv_into(buffer)
            return got
        finally:
            self._conn.end_read(got)


class ServiceRequestHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive without Nagle's delay, Unix-socket peers named `unix`, and the deadlines
    of the module doc."""

    protocol_version = "HTTP/1.1"
    # A two-word request line ("GET /health", HTTP/0.9) still gets a status line and headers.
    default_request_version = "HTTP/1.0"
    timeout = IO_TIMEOUT_S
    conn: Connection | None = None

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            # Headers and body leave in two writes: with Nagle's algorithm and the client's delayed
            # ACK each keep-alive request would wait ~40 ms for its body.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connections: Connections | None = getattr(self.server, "connections", None)
        self.conn = connections.get(self.connection) if connections is not None else None
        if self.conn is not None:
            self.rfile.close()
            self.rfile = io.BufferedReader(_WatchedReader(self.connection, self.conn))

    def handle_one_request(self) -> None:
        if self.conn is not None:
            self.conn.expect(_IDLE, IDLE_TIMEOUT_S)
        super().handle_one_request()

    def parse_request(self) -> bool:
        # A request line or headers cut short by a deadline or a stop are not a request: close.
        if self._cut_short() or not super().parse_request():
            return False
        if self._cut_short():
            return False
        self.expect_body()
        return True

    def _cut_short(self) -> bool:
        if self.conn is not None and self.conn.reads_closed:
            self.close_connection = True
            return True
        return False

    def expect_body(self) -> None:
        """The body is read from now on: it must be complete within `BODY_TIMEOUT_S`."""
        if self.conn is not None:
            self.conn.expect(_BODY, BODY_TIMEOUT_S)

    @property
    def timed_out(self) -> bool:
        """Whether this connection's reads ended at a deadline (a short read is the client's)."""
        return self.conn is not None and self.conn.timed_out

    def drain_request(self, max_bytes: int = 1 << 20, max_s: float = 1.0) -> None:
        """Before closing with request bytes unread (an answer given without reading the body):
        read what the client already sent, bounded, so the kernel does not answer it with a reset
        that can destroy the answer before the client reads it."""
        with contextlib.suppress(OSError, ValueError):
            self.connection.settimeout(0.1)
            end, left = time.monotonic() + max_s, max_bytes
            while left > 0 and time.monotonic() < end:
                chunk = self.rfile.read1(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)

    def address_string(self) -> str:
        # A Unix socket's peer has no address ('' in client_address).
        addr = self.client_address
        return str(addr[0]) if isinstance(addr, tuple) and addr else "unix"
