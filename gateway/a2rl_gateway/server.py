"""The gateway's HTTP side: one handler per request (stdlib `ThreadingHTTPServer`, HTTP/1.1 keep-alive)
on 127.0.0.1 and/or a Unix socket, forwarding to the upstream with `urllib` (proxies from the
environment apply; redirects are passed back, not followed).

Per request: `/health` answers itself; otherwise the token is checked (401), the endpoint routed
(404), the budget consulted (403), then the request goes upstream with the real key. A streamed
answer is relayed chunk by chunk as it arrives (chunked transfer encoding, flushed per chunk);
if the agent hangs up mid-stream the gateway still reads the upstream to its end, so the usage
is metered. Every request ends in `Meter.finish` (record + summary) inside one GenAI span.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.records.driver import DriverCallRecord, DriverSummary
from a2rl.records.times import utc_now
from a2rl.service_server import ServiceHTTPServer, ServiceRequestHandler, ServiceUnixServer
from a2rl_gateway import errors as e
from a2rl_gateway import protocols as p
from a2rl_gateway.redact import redact_headers, redact_query, redact_url, redact_value
from a2rl_gateway.spans import span_attributes, span_name, span_result_attributes
from a2rl_gateway.usage import Answer, from_json, from_stream

if TYPE_CHECKING:
    from a2rl_gateway.gateway import Gateway

log = logging.getLogger(__name__)

#: Largest request body accepted (prompts with images run to a few MiB).
MAX_REQUEST_BYTES = 64 << 20
#: Largest body kept in a call record (the rest is cut, `truncated: true`).
MAX_RECORD_BODY_BYTES = 8 << 20
_CHUNK = 1 << 16


class GatewayHTTPServer(ServiceHTTPServer["Gateway"]):
    def __init__(self, gateway: Gateway, host: str, port: int) -> None:
        super().__init__(gateway, host, port, _Handler)


class GatewayUnixServer(ServiceUnixServer["Gateway"]):
    """The gateway on a Unix socket at `path` (for the local sandbox to relay)."""

    def __init__(self, gateway: Gateway, path: Path) -> None:
        super().__init__(gateway, path, _Handler)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx goes back to the client as it is


def upstream_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirect)


class _RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _decoded(raw: bytes, encoding: str) -> bytes:
    """The body as sent, decompressed for reading when the upstream compressed it anyway."""
    encoding = encoding.strip().lower()
    try:
        if encoding == "gzip":
            return gzip.decompress(raw)
        if encoding == "deflate":
            return zlib.decompress(raw)
    except (OSError, zlib.error, EOFError):
        return raw
    return raw


def recorded_body(raw: bytes) -> tuple[Any, bool]:
    """(what a record keeps of a body: JSON when it is JSON, else text; whether it was cut)."""
    if not raw:
        return None, False
    if len(raw) > MAX_RECORD_BODY_BYTES:
        return raw[:MAX_RECORD_BODY_BYTES].decode("utf-8", errors="replace"), True
    try:
        return json.loads(raw), False
    except ValueError:
        return raw.decode("utf-8", errors="replace"), False


class _Handler(ServiceRequestHandler):
    server: GatewayHTTPServer | GatewayUnixServer

    def log_message(self, format: str, *args: Any) -> None:
        # The request line may carry `?key=<token>`.
        text = (format % args).replace(self.path, redact_query(self.path)) if self.path else format % args
        log.info("%s %s", self.address_string(), text[:1000])

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    # --- answers ------------------------------------------------------------------------------
    def send_response(self, code: int, message: str | None = None) -> None:
        self._responded = True
        super().send_response(code, message)

    def _send_json(self, status: int, body: Any, headers: Sequence[tuple[str, str]] = ()) -> bytes:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        return data

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
        except ValueError:
            raise _RequestError(e.BAD_REQUEST, f"bad Content-Length {raw[:40]!r}") from None
        if length < 0:
            raise _RequestError(e.BAD_REQUEST, "bad Content-Length")
        if length > MAX_REQUEST_BYTES:
            raise _RequestError(e.TOO_LARGE, f"request body over {MAX_REQUEST_BYTES >> 20} MiB")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip() or b"x", 16)
            except ValueError:
                raise _RequestError(e.BAD_REQUEST, "malformed chunked request body") from None
            if size == 0:
                while self.rfile.readline(1024).strip():
                    pass  # trailers
                return bytes(out)
            if len(out) + size > MAX_REQUEST_BYTES:
                raise _RequestError(e.TOO_LARGE, f"request body over {MAX_REQUEST_BYTES >> 20} MiB")
            out += self.rfile.read(size)
            self.rfile.readline(16)

    # --- one request --------------------------------------------------------------------------
    def _handle(self) -> None:
        gw = self.server.service
        path, _, query = self.path.partition("?")
        if path.rstrip("/") == "/health" and self.command in ("GET", "HEAD"):
            self._send_json(200, {"status": "ok"})
            return
        with gw.in_flight():
            self._call(gw, path, query)

    def _call(self, gw: Gateway, path: str, query: str) -> None:
        self._t0 = time.monotonic()
        self._pending: tuple[DriverSummary, str | None] | None = None
        self._reencoded = False
        self._responded = False
        cfg = gw.config
        secrets = gw.secrets
        rec = DriverCallRecord(
            index=gw.meter.next_index(),
            started_at=utc_now(),
            provider=cfg.provider,
            method=self.command,
            path=redact_query(self.path),
            request_headers=redact_headers(self.headers.items(), secrets),
        )
        err_protocol = p.error_protocol(cfg.provider, path)
        try:
            try:
                body = self._read_body()
            except _RequestError as exc:
                self.close_connection = True
                self._refuse(rec, err_protocol, exc.status, str(exc), "bad_request")
                return
            # A compressed request (gzip/deflate) is read decompressed; it is forwarded as sent.
            plain = _decoded(body, self.headers.get("Content-Encoding") or "")
            rec.request_body, rec.truncated = recorded_body(plain)
            if not gw.authorized(self.headers.items(), query):
                self._refuse(
                    rec,
                    err_protocol,
                    e.UNAUTHORIZED,
                    "invalid or missing API key: present this run's driver token "
                    "(x-api-key, Authorization: Bearer, x-goog-api-key or ?key=)",
                    "unauthorized",
                )
                return
            endpoint = p.route(cfg.provider, self.command, path)
            if endpoint is None:
                self._refuse(
                    rec,
                    err_protocol,
                    e.NOT_FOUND,
                    f"{self.command} {path[:200]} is not served by a2rl's driver gateway "
                    f"for provider {cfg.provider}",
                    "unknown_endpoint",
                )
                return
            parsed: Any = None
            if body:
                with contextlib.suppress(ValueError):
                    parsed = json.loads(plain)
            rec.protocol, rec.operation = endpoint.protocol, endpoint.operation
            rec.request_model = p.request_model(endpoint, parsed)
            rec.stream = p.wants_stream(endpoint, parsed, query)
            attrs = span_attributes(cfg, endpoint, rec, parsed)
            with gw.tracing.span(span_name(endpoint, rec.request_model), attrs) as sp:
                refusal = gw.meter.refusal()
                if refusal is not None:
                    self._refuse(rec, endpoint.protocol, e.BUDGET_EXHAUSTED, refusal, "budget_exhausted")
                else:
                    sent = p.with_stream_usage(endpoint, parsed)
                    if sent is not parsed:
                        body = json.dumps(sent).encode()
                        self._reencoded = True
                    self._proxy(gw, rec, endpoint, path=path, query=query, body=body)
                if sp.is_recording():
                    sp.set_attributes(span_result_attributes(rec))
        except Exception as exc:
            log.exception("driver call %d failed in the gateway", rec.index)
            self.close_connection = True
            if not self._responded:
                self._refuse(
                    rec,
                    err_protocol,
                    e.INTERNAL,
                    f"internal error in a2rl's driver gateway: {exc}",
                    "internal",
                )
            else:
                rec.error = f"internal error in a2rl's driver gateway: {exc}"
        finally:
            if self._pending is None:
                self._account(rec)
            assert self._pending is not None
            clean = DriverCallRecord.model_validate(redact_value(rec.to_json(), secrets))
            gw.meter.persist(clean, *self._pending)

    def _account(self, rec: DriverCallRecord) -> None:
        """Count the call (before the agent has the end of its answer: see `Meter.account`); once."""
        if self._pending is not None:
            return
        rec.finished_at = utc_now()
        rec.latency_s = round(time.monotonic() - self._t0, 6)
        self._pending = self.server.service.meter.account(rec)

    def _refuse(self, rec: DriverCallRecord, protocol: str, status: int, message: str, why: str) -> None:
        rec.status, rec.refused, rec.error = status, why, message
        body = e.error_body(protocol, status, message)
        rec.response_body = body
        self._account(rec)
        with contextlib.suppress(OSError):
            self._send_json(status, body)

    def _proxy(
        self,
        gw: Gateway,
        rec: DriverCallRecord,
        endpoint: p.Endpoint,
        *,
        path: str,
        query: str,
        body: bytes,
    ) -> None:
        cfg = gw.config
        url = p.upstream_url(cfg.base_url, path, p.forwarded_query(query))
        rec.upstream_url = redact_url(url)
        headers = p.forward_headers(cfg.provider, self.headers.items(), gw.upstream_key)
        if self._reencoded:  # the gateway rewrote the body: it is plain JSON now
            headers = {k: v for k, v in headers.items() if k.lower() != "content-encoding"}
        if body:
            headers["Content-Length"] = str(len(body))
        request = urllib.request.Request(url, data=body or None, headers=headers, method=self.command)
        try:
            resp: Any = gw.opener.open(request, timeout=cfg.upstream_timeout_s)
        except urllib.error.HTTPError as exc:
            resp = exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            self._refuse(
                rec,
                endpoint.protocol,
                e.BAD_GATEWAY,
                f"the driver gateway could not reach the upstream {redact_url(cfg.base_url)}: {reason}",
                "upstream_unreachable",
            )
            return
        with contextlib.closing(resp):
            self._relay(rec, endpoint, resp)

    def _relay(self, rec: DriverCallRecord, endpoint: p.Endpoint, resp: Any) -> None:
        status = int(getattr(resp, "status", None) or resp.code)
        rec.status = status
        upstream_headers = list(resp.headers.items())
        rec.response_headers = redact_headers(upstream_headers, self.server.service.secrets)
        ctype = (resp.headers.get("Content-Type") or "").lower()
        length = resp.headers.get("Content-Length")
        streamed = "text/event-stream" in ctype or (rec.stream and length is None)
        headers = p.returned_headers(upstream_headers)
        encoding = resp.headers.get("Content-Encoding") or ""
        read1 = getattr(resp, "read1", None) or getattr(getattr(resp, "fp", None), "read1", None)
        buf = bytearray()
        client_ok = True
        if not streamed or read1 is None:
            try:
                data = resp.read()
            except (OSError, ValueError) as exc:
                rec.error = f"reading the upstream's answer failed: {exc}"
                data = b""
            rec.first_byte_s = round(time.monotonic() - self._t0, 6)
            self._meter(rec, endpoint, status=status, raw=data, streamed=False, encoding=encoding)
            self._account(rec)
            with contextlib.suppress(OSError):
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
        else:
            try:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("X-Accel-Buffering", "no")
                self.end_headers()
                self.wfile.flush()
            except OSError:
                client_ok = False
            while True:
                try:
                    chunk = read1(_CHUNK)
                except (OSError, ValueError) as exc:
                    rec.error = f"the upstream's stream broke off: {exc}"
                    break
                if not chunk:
                    break
                if rec.first_byte_s is None:
                    rec.first_byte_s = round(time.monotonic() - self._t0, 6)
                buf += chunk
                if client_ok:
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    except OSError:
                        client_ok = False  # keep reading: the usage comes at the end
                        rec.error = "the client hung up before the stream ended"
            self._meter(rec, endpoint, status=status, raw=bytes(buf), streamed=True, encoding=encoding)
            self._account(rec)
            if client_ok:
                with contextlib.suppress(OSError):
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            else:
                self.close_connection = True

    def _meter(
        self,
        rec: DriverCallRecord,
        endpoint: p.Endpoint,
        *,
        status: int,
        raw: bytes,
        streamed: bool,
        encoding: str,
    ) -> None:
        gw = self.server.service
        data = _decoded(raw, encoding)
        answer: Answer
        if streamed:
            answer = from_stream(endpoint.protocol, data)
        else:
            parsed, _ = recorded_body(data)
            answer = (
                from_json(endpoint.protocol, parsed)
                if isinstance(parsed, dict | list)
                else Answer(body=parsed)
            )
        body = answer.body
        if len(data) > MAX_RECORD_BODY_BYTES:
            body, rec.truncated = data[:MAX_RECORD_BODY_BYTES].decode("utf-8", errors="replace"), True
        elif streamed and body is None:
            body = data.decode("utf-8", errors="replace")
        rec.response_body = body
        rec.stream_events = answer.events if streamed else None
        rec.response_model = answer.model
        rec.usage = answer.usage
        ok = 200 <= status < 300
        rec.usage_missing = endpoint.generates and ok and answer.usage is None
        if answer.usage is not None:
            rec.cost_usd, rec.priced = gw.meter.price(answer.model or rec.request_model, answer.usage)
        rec.response_id = answer.response_id
        rec.finish_reasons = answer.finish_reasons
