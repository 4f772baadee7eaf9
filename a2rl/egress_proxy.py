"""The eval box's only way out: an HTTP proxy on a Unix socket that reaches the evaluation's
endpoints (a judge, a search API, the S3 store) and nothing else.

The eval box has a network namespace of its own (`lo` only); its relay (`a2rl.sandbox_relay`)
forwards `127.0.0.1:EGRESS_PORT` inside to this proxy's socket, and the box's environment names
that port as the proxy (`proxy_env`). The proxy runs in the launcher, outside the box, and takes
one request per connection:

- ``CONNECT host:port`` (https: TLS stays end to end, the client verifies the host's certificate);
- an absolute-form plain-HTTP request, ``GET http://host:port/path HTTP/1.1`` (http endpoints such
  as a loopback judge or MinIO), passed on in origin form with ``Connection: close`` — a client
  that keeps the connection for its next request, to another origin, reconnects instead.

Allowed are exactly the (host, port) pairs of the endpoints' URLs, by name as written; the proxy
resolves names itself. Anything else is refused with a status and a one-line reason: a malformed
request 400, another destination 403, an unreachable one 502, too many connections 503. Once
the first request is let through, the bytes are spliced both ways unread: they can only go to
that origin.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from a2rl.sandbox_relay import pipe

#: The loopback port inside the eval box that the relay forwards to the proxy.
EGRESS_PORT = 3128
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_HEAD_BYTES = 16 << 10
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64
#: Request headers meant for the proxy or the client's connection to it, and Host (set from the URL).
_HOP_BY_HOP = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"host"})
_REASONS = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}

Address = tuple[str, int]


class RefusedError(Exception):
    """A request the proxy answers itself: `status` and a one-line `reason`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def endpoint_address(url: str) -> Address | None:
    """(host, port) of an http(s) URL, or of a bare ``host:port`` (as ``AWS_ENDPOINT_URL`` may
    be); None when `url` is neither."""
    url = url.strip()
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def egress_addresses(urls: Iterable[str]) -> tuple[Address, ...]:
    """The distinct (host, port) pairs of `urls`, in their order; URLs that are not http(s) are left
    out (the evaluation reports its own configuration error)."""
    found = (endpoint_address(url) for url in urls)
    return tuple(dict.fromkeys(a for a in found if a is not None))


def proxy_env(port: int = EGRESS_PORT) -> dict[str, str]:
    """The environment that sends a box's HTTP clients to the relayed proxy. Nothing bypasses it:
    inside the box 127.0.0.1 is the box itself, so a host-loopback endpoint is the proxy's too."""
    url = f"http://127.0.0.1:{port}"
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    return env | {"NO_PROXY": "", "no_proxy": ""}


def describe_addresses(addresses: Iterable[Address]) -> str:
    return ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in addresses)


def read_head(conn: socket.socket, limit: int = MAX_HEAD_BYTES) -> tuple[bytes, bytes]:
    """(the request head up to its blank line, the bytes read after it)."""
    data = b""
    while (end := data.find(b"\r\n\r\n")) < 0:
        if len(data) > limit:
            raise RefusedError(400, f"request head over {limit} bytes")
        chunk = conn.recv(4096)
        if not chunk:
            raise RefusedError(400, "connection closed before the end of the request head")
        data += chunk
    if end > limit:
        raise RefusedError(400, f"request head over {limit} bytes")
    return data[:end], data[end + 4 :]


def route(head: bytes) -> tuple[Address, bytes | None]:
    """Where the request goes, and what to send there first (None: a CONNECT, answered here)."""
    lines = head.split(b"\r\n")
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise RefusedError(400, "malformed request line") from None
    if method == "CONNECT":
        parts = urlsplit(f"//{target}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None or parts.netloc != target:
            raise RefusedError(400, f"CONNECT takes host:port, got {target!r}")
        return (parts.hostname, port), None
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise RefusedError(400, f"only CONNECT and absolute http:// requests, got {method} {target!r}")
    try:
        address = (parts.hostname, parts.port or DEFAULT_PORTS["http"])
    except ValueError:
        raise RefusedError(400, f"bad port in {target!r}") from None
    if any(line[:1] in (b" ", b"\t") for line in lines[1:]):
        raise RefusedError(400, "folded header lines")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    authority = parts.netloc.rpartition("@")[2]
    kept = [line for line in lines[1:] if line.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP]
    first = f"{method} {path} {version}\r\nHost: {authority}".encode()
    return address, b"\r\n".join([first, *kept, b"Connection: close", b"", b""])


def _answer(conn: socket.socket, status: int, reason: str) -> None:
    body = f"a2rl eval egress: {reason}\n".encode()
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        conn.sendall(head.encode() + body)


class EgressProxy:
    """The proxy on a Unix socket at `path` (made here, mode 0600), serving from a daemon thread
    until `close()`."""

    def __init__(
        self,
        allowed: Iterable[Address],
        path: Path,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.allowed = frozenset((host.lower(), port) for host, port in allowed)
        self.path = path
        self.connect_timeout_s = connect_timeout_s
        self.head_timeout_s = head_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        path.chmod(0o600)
        self._listener.listen(MAX_CONNECTIONS)
        self._thread = threading.Thread(target=self._serve, name="a2rl-eval-egress", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                conn.settimeout(1)
                _answer(conn, 503, "too many connections")
                conn.close()
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            if self._closed:
                raise RefusedError(503, "the evaluation is over")
            self._open.add(sock)

    def _handle(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            self._track(conn)
            conn.settimeout(self.head_timeout_s)
            head, early = read_head(conn)
            (host, port), first = route(head)
            where = describe_addresses([(host, port)])
            if (host.lower(), port) not in self.allowed:
                raise RefusedError(403, f"{where} is not an endpoint of this evaluation")
            try:
                upstream = socket.create_connection((host, port), timeout=self.connect_timeout_s)
            except OSError as exc:
                raise RefusedError(502, f"cannot reach {where}: {exc}") from None
            self._track(upstream)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(None)
            upstream.settimeout(None)
            if first is None:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = b""
            upstream.sendall(first + early)
            back = threading.Thread(target=pipe, args=(upstream, conn), daemon=True)
            back.start()
            pipe(conn, upstream)
            back.join()
        except RefusedError as refused:
            _answer(conn, refused.status, refused.reason)
        except OSError:
            pass  # the client or the origin went away
        finally:
            for sock in (conn, upstream):
                if sock is not None:
                    with self._lock:
                        self._open.discard(sock)
                    sock.close()
            self._slots.release()

    def close(self) -> None:
        """Stop accepting and cut every open connection (the evaluation is over)."""
        with self._lock:
            self._closed = True
            live = list(self._open)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __enter__(self) -> EgressProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
