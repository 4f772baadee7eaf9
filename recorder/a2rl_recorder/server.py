"""The grading API over HTTP (stdlib `ThreadingHTTPServer`, bound to 127.0.0.1 only), and the
same API on a Unix socket when asked (`RecorderUnixServer`, for the local sandbox to relay).

    POST /submit        {"model_path": "output/v1"}
    GET  /health        GET /time        GET /submissions     (HEAD: the same, without the body)

Every answer is JSON, errors included (`{"error": "..."}`): bad JSON → 400, unknown path → 404,
wrong method → 405 (with `Allow`), and what the HTTP layer itself refuses — a malformed request
line or header (400), a request line over 64 KiB (414), an unknown method (501), an
unsupported HTTP version (505) — closes the connection after a JSON error as well.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from a2rl.service_server import ServiceHTTPServer, ServiceRequestHandler, ServiceUnixServer
from a2rl_recorder.service import Recorder, Reply

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
#: After a protocol error, what is still unread of the request is read (at most this much, for at
#: most this long) before closing, so the client gets the JSON answer instead of a reset.
_MAX_ECHO = 200  # characters of a bad request line quoted back

ROUTES: dict[str, dict[str, str]] = {
    "/submit": {"POST": "submit"},
    "/health": {"GET": "health"},
    "/time": {"GET": "time_info"},
    "/submissions": {"GET": "submissions"},
}


class RecorderHTTPServer(ServiceHTTPServer[Recorder]):
    def __init__(self, recorder: Recorder, host: str, port: int) -> None:
        super().__init__(recorder, host, port, _Handler)


class RecorderUnixServer(ServiceUnixServer[Recorder]):
    """The grading API on a Unix socket at `path` (for the local sandbox to relay)."""

    def __init__(self, recorder: Recorder, path: Path) -> None:
        super().__init__(recorder, path, _Handler)


def _shown(text: str, limit: int) -> str:
    """`text` as it may be echoed or logged: control characters escaped, at most `limit` long."""
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text[:limit])
    return shown if len(text) <= limit else shown + "…"


class _Handler(ServiceRequestHandler):
    server: RecorderHTTPServer | RecorderUnixServer

    def log_message(self, format: str, *args: Any) -> None:
        # The request line is the client's: no terminal escapes into the log, no 64 KiB lines.
        text = _shown(format % args, 1000)
        log.info("%s %s", self.address_string(), text)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors of the HTTP layer itself (bad request line or header, unknown method, a line
        over 64 KiB, …): JSON like every other answer, then the connection is closed."""
        short = self.responses.get(code, ("error", ""))[0]
        text = _shown(message or short, _MAX_ECHO)
        self.log_error("code %d, message %s", code, text)
        if not self.request_version:  # the 414 path leaves it empty: answer in HTTP/1.0 then
            self.request_version = "HTTP/1.0"
        self.close_connection = True
        self._send(code, {"error": f"{short}: {text}" if text != short else short}, {"Connection": "close"})
        with contextlib.suppress(OSError):
            self.wfile.flush()
        self.drain_request()

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, sort_keys=True).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        methods = ROUTES.get(path)
        if method == "HEAD" and methods is not None and "GET" in methods:
            method = "GET"  # GET without the body (`_send` leaves it out)
        if methods is None:
            self._discard_body()
            shown = _shown(path, _MAX_ECHO)
            self._send(404, {"error": f"unknown endpoint {shown}; try {', '.join(sorted(ROUTES))}"})
            return
        if method not in methods:
            self._discard_body()
            allowed = ", ".join(sorted({*methods, *(["HEAD"] if "GET" in methods else [])}))
            self._send(
                405, {"error": f"{method} is not allowed on {path}; use {allowed}"}, {"Allow": allowed}
            )
            return
        handler = getattr(self.server.service, methods[method])
        try:
            if method == "POST":
                parsed = self._json_body()
                if parsed is None:
                    return
                reply: Reply = handler(parsed[0])
            else:
                reply = handler()
        except Exception:
            log.exception("%s %s failed", method, path)
            self._send(500, {"error": "internal error in the grading server; the request was not recorded"})
            return
        self._send(*reply)

    def _content_length(self) -> int:
        try:
            return max(0, int(self.headers.get("Content-Length") or 0))
        except ValueError:
            return 0

    def _discard_body(self) -> None:
        length = self._content_length()
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        elif length > MAX_BODY_BYTES:
            self.close_connection = True  # not read: the connection cannot carry another request

    def _json_body(self) -> tuple[Any] | None:
        length = self._content_length()
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(413, {"error": "request body too large"})
            return None
        raw = self.rfile.read(length) if length else b""
        try:
            return (json.loads(raw),)
        except (ValueError, UnicodeDecodeError):
            self._send(400, {"error": 'request body must be JSON, e.g. {"model_path": "output/v1"}'})
            return None

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_OPTIONS(self) -> None:
        self._route("OPTIONS")
