"""The HTTP servers of a2rl's services (the grading API, the driver gateway): one on TCP and one on
a private Unix socket (`a2rl.unix_server`), both serving the same service object, and the
request-handler base both services' handlers share.

Both servers use daemon threads and a listen backlog of `LISTEN_BACKLOG` (the stdlib's default of
5 dropped most of 200 simultaneous clients; the kernel caps it at net.core.somaxconn).
"""

from __future__ import annotations

import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Generic, TypeVar

from a2rl.unix_server import PrivateUnixServer

LISTEN_BACKLOG = 1024

S = TypeVar("S")


class ServiceHTTPServer(ThreadingHTTPServer, Generic[S]):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG
    allow_reuse_address = True

    def __init__(self, service: S, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self.service = service
        super().__init__((host, port), handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class ServiceUnixServer(PrivateUnixServer, Generic[S]):
    """The service on a Unix socket at `path` (mode 0600, a stale socket replaced, the file removed
    by `server_close`)."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, service: S, path: Path, handler: type[BaseHTTPRequestHandler]) -> None:
        self.service = service
        super().__init__(path, handler)


class ServiceRequestHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive without Nagle's delay, and Unix-socket peers named `unix`."""

    protocol_version = "HTTP/1.1"
    # A two-word request line ("GET /health", HTTP/0.9) still gets a status line and headers.
    default_request_version = "HTTP/1.0"

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            # Headers and body leave in two writes: with Nagle's algorithm and the client's delayed
            # ACK each keep-alive request would wait ~40 ms for its body.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def address_string(self) -> str:
        # A Unix socket's peer has no address ('' in client_address).
        addr = self.client_address
        return str(addr[0]) if isinstance(addr, tuple) and addr else "unix"
