"""The gateway's HTTP side: one handler per request (`a2rl.service_server`: threads, HTTP/1.1
keep-alive, bounded connections and deadlines) on 127.0.0.1 and/or a Unix socket, forwarding to the
upstream over kept-alive pooled connections (`a2rl_gateway.upstream`: proxies from the environment
apply; redirects are passed back, not followed).

Per request: `/health` answers itself; otherwise the token is checked (401) and the endpoint
routed (404) before a byte of the body is read; then the call waits for one of the run's call slots
(`Gateway.call_slot`: 429 when none frees in time), its body is read (within `MAX_REQUEST_BYTES`
and `BODY_TIMEOUT_S`: 413, 408), decompressed within the same limit (`a2rl_gateway.bodies`: 413,
415) and checked (`a2rl_gateway.validation`: 400); the budget reserves the most the call may use
or refuses it (403); then the body the gateway read goes upstream with the real key. A streamed
answer is relayed chunk by chunk as it arrives (chunked transfer encoding, flushed per chunk); if
the agent hangs up mid-stream the gateway still reads the upstream to its end, so the usage is
metered. A successful generation answer without usage the gateway can read is counted as the
call's reservation (`usage_missing`). Every request ends in `Meter.account` (the totals and the
budget, the reservation settled: before the agent has the last byte of its answer) and then
`Meter.persist` (the record, scrubbed and written by the meter's writer thread, after the answer)
inside one GenAI span.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import logging
import re
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.metrics import CONTENT_TYPE
from a2rl.records.driver import DriverCallRecord, DriverUsage
from a2rl.records.times import utc_now
from a2rl.service_server import Connections, ServiceHTTPServer, ServiceRequestHandler, ServiceUnixServer
from a2rl_gateway import errors as e
from a2rl_gateway import protocols as p
from a2rl_gateway import validation as v
from a2rl_gateway.bodies import BodyError, decode, parse_json
from a2rl_gateway.budget import Reservation
from a2rl_gateway.redact import redact_headers, redact_query, redact_url
from a2rl_gateway.spans import span_attributes, span_name, span_result_attributes
from a2rl_gateway.usage import Answer, from_json, from_stream

if TYPE_CHECKING:
    from a2rl_gateway.gateway import Gateway

log = logging.getLogger(__name__)

#: Largest request body accepted, as sent and once decompressed (Anthropic's own limit for the
#: Messages API; prompts with images run to a few MiB).
MAX_REQUEST_BYTES = 32 << 20
#: Largest body kept in a call record (the rest is cut, `truncated: true`).
MAX_RECORD_BODY_BYTES = 8 << 20
#: Chunks of a chunked request body (a client sends its JSON in a few; a byte each is an attack).
MAX_CHUNKS = 1 << 14
_CHUNK = 1 << 16


class GatewayHTTPServer(ServiceHTTPServer["Gateway"]):
    def __init__(
        self, gateway: Gateway, host: str, port: int, connections: Connections | None = None
    ) -> None:
        super().__init__(gateway, host, port, _Handler, connections)


class GatewayUnixServer(ServiceUnixServer["Gateway"]):
    """The gateway on a Unix socket at `path` (for the local sandbox to relay)."""

    def __init__(self, gateway: Gateway, path: Path, connections: Connections | None = None) -> None:
        super().__init__(gateway, path, _Handler, connections)


_DIGITS = re.compile(r"[0-9]{1,12}")


def _decoded(raw: bytes, encoding: str) -> bytes:
    """The upstream's answer as sent, decompressed for reading when it compressed it anyway."""
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
        path = getattr(self, "path", None)  # unset when the request line was malformed
        text = (format % args).replace(path, redact_query(path)) if path else format % args
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
        self._end_headers_with(b"" if self.command == "HEAD" else data)
        return data

    def _send_metrics(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self._end_headers_with(b"" if self.command == "HEAD" else data)

    def _end_headers_with(self, body: bytes) -> None:
        """`end_headers` and `body` in one write (a second small write costs a system call)."""
        buffered: list[bytes] = getattr(self, "_headers_buffer", [])  # what send_header gathered
        self._headers_buffer: list[bytes] = []
        self.wfile.write(b"".join(buffered) + b"\r\n" + body)

    # --- the request body -----------------------------------------------------------------------
    def handle_expect_100(self) -> bool:
        # `Expect: 100-continue` is answered only once the body is wanted (`_request_body`): a
        # request refused before (a bad token) is answered without the client sending its body.
        self._expect_100 = True
        return True

    def _request_body(self) -> bytes:
        """The body as the client sent it, read within the limits; `BodyError` when it is not."""
        expect_100, self._expect_100 = getattr(self, "_expect_100", False), False
        chunked = self.headers.get_all("Transfer-Encoding")
        lengths = self.headers.get_all("Content-Length") or []
        length: int | None = None
        if chunked:
            if len(chunked) > 1 or chunked[0].strip().lower() != "chunked" or lengths:
                raise BodyError(
                    e.BAD_REQUEST, "Transfer-Encoding must be chunked alone, without Content-Length"
                )
        elif lengths:
            if len(set(lengths)) > 1 or not _DIGITS.fullmatch(lengths[0].strip()):
                raise BodyError(e.BAD_REQUEST, f"bad Content-Length {', '.join(lengths)[:40]!r}")
            length = int(lengths[0])
            if length > MAX_REQUEST_BYTES:
                raise BodyError(e.TOO_LARGE, f"request body over {MAX_REQUEST_BYTES >> 20} MiB")
        else:
            return b""
        if expect_100:
            self.send_response_only(100)
            self.end_headers()
        self.expect_body()
        out = bytearray()
        if length is None:
            self._read_chunked(out)
        else:
            self._read_into(out, length)
        return bytes(out)

    def _read_into(self, out: bytearray, n: int) -> None:
        """Append the next `n` bytes of the body to `out`."""
        end = len(out) + n
        stalled = False
        try:
            while len(out) < end:
                chunk = self.rfile.read1(min(_CHUNK, end - len(out)))
                if not chunk:
                    break
                out += chunk
        except TimeoutError:
            stalled = True
        except OSError as exc:
            raise BodyError(e.BAD_REQUEST, f"reading the request body failed: {exc}") from None
        if len(out) < end:
            if stalled or self.timed_out:
                raise BodyError(e.TIMEOUT, "the request body did not arrive in time")
            raise BodyError(e.BAD_REQUEST, "the request body ended early")

    def _read_chunked(self, out: bytearray) -> None:
        for _ in range(MAX_CHUNKS):
            line = self._line()
            try:
                size = int(line.split(b";", 1)[0].strip() or b"x", 16)
            except ValueError:
                size = -1
            if size < 0 or not line.endswith(b"\n"):
                raise BodyError(e.BAD_REQUEST, "malformed chunked request body")
            if size == 0:
                for _ in range(100):  # trailers
                    if not self._line().strip():
                        return
                raise BodyError(e.BAD_REQUEST, "malformed chunked request body")
            if len(out) + size > MAX_REQUEST_BYTES:
                raise BodyError(e.TOO_LARGE, f"request body over {MAX_REQUEST_BYTES >> 20} MiB")
            self._read_into(out, size)
            if self._line().strip():
                raise BodyError(e.BAD_REQUEST, "malformed chunked request body")
        raise BodyError(e.BAD_REQUEST, f"a chunked request body of more than {MAX_CHUNKS} chunks")

    def _line(self) -> bytes:
        stalled = False
        try:
            line = self.rfile.readline(1024)
        except OSError as exc:
            line, stalled = b"", isinstance(exc, TimeoutError)
        if not line and (stalled or self.timed_out):
            raise BodyError(e.TIMEOUT, "the request body did not arrive in time")
        return line

    # --- one request --------------------------------------------------------------------------
    def _handle(self) -> None:
        gw = self.server.service
        path, _, query = self.path.partition("?")
        if path.rstrip("/") == "/health" and self.command in ("GET", "HEAD"):
            self._send_json(200, {"status": "ok"})
            return
        if path.rstrip("/") == "/metrics" and self.command in ("GET", "HEAD"):
            self._send_metrics(gw.metrics.render().encode())
            return
        try:
            with gw.in_flight():
                self._call(gw, path, query)
        finally:
            self._expect_100 = False

    def _call(self, gw: Gateway, path: str, query: str) -> None:
        self._t0 = time.monotonic()
        self._accounted = False
        self._newly: str | None = None
        self._responded = False
        self._reservation: Reservation | None = None
        self._most: DriverUsage | None = None
        self._forwarded = False
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
            # Nothing of the body is read (nor decompressed) before the token and the endpoint.
            if not gw.authorized(self.headers.items(), query):
                self._refuse(
                    rec,
                    err_protocol,
                    e.UNAUTHORIZED,
                    "invalid or missing API key: present this run's driver token "
                    "(x-api-key, Authorization: Bearer, x-goog-api-key or ?key=)",
                    "unauthorized",
                    unread=True,
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
                    unread=True,
                )
                return
            rec.protocol, rec.operation = endpoint.protocol, endpoint.operation
            with gw.call_slot() as slot:
                if slot is None:
                    message = "a2rl's driver gateway is stopping"
                    self._refuse(rec, endpoint.protocol, e.STOPPING, message, "stopping", unread=True)
                    return
                if not slot:
                    message = f"more than {gw.max_calls} driver calls at once; retry shortly"
                    self._refuse(rec, endpoint.protocol, e.TOO_MANY, message, "too_many_calls", unread=True)
                    return
                self._serve(gw, rec, endpoint, path=path, query=query)
        except Exception as exc:
            log.exception("driver call %d failed in the gateway", rec.index)
            self.close_connection = True
            if self._forwarded and rec.usage is None and self._most and self._most.total_tokens:
                rec.usage, rec.usage_missing = self._most, True  # it reached the upstream: count its most
                rec.cost_usd, rec.priced = gw.meter.price(rec.request_model, self._most)
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
            self._account(rec)
            gw.meter.persist(rec, self._newly)  # the writer scrubs the secrets from it

    def _serve(
        self, gw: Gateway, rec: DriverCallRecord, endpoint: p.Endpoint, *, path: str, query: str
    ) -> None:
        """An authorised call to a served endpoint, holding a call slot: body, checks, budget, upstream."""
        try:
            raw = self._request_body()
        except BodyError as exc:
            self._refuse(rec, endpoint.protocol, exc.status, str(exc), "bad_request", unread=True)
            return
        try:
            plain = decode(raw, ", ".join(self.headers.get_all("Content-Encoding") or []), MAX_REQUEST_BYTES)
        except BodyError as exc:
            self._refuse(rec, endpoint.protocol, exc.status, str(exc), "bad_request")
            return
        del raw
        try:
            parsed = parse_json(plain) if plain else None
        except BodyError as exc:
            rec.request_body, rec.truncated = recorded_body(plain)
            self._refuse(rec, endpoint.protocol, e.BAD_REQUEST, str(exc), "bad_request")
            return
        if len(plain) > MAX_RECORD_BODY_BYTES:
            rec.request_body, rec.truncated = recorded_body(plain)
        else:
            rec.request_body = parsed  # never changed after (`with_stream_usage` copies)
        try:
            rec.request_model = p.request_model(endpoint, parsed)
            shape = v.check(endpoint, parsed)
        except v.InvalidRequestError as exc:
            self._refuse(rec, endpoint.protocol, e.BAD_REQUEST, str(exc), "bad_request")
            return
        rec.stream = shape.stream
        attrs = span_attributes(gw.config, endpoint, rec, parsed)
        with gw.tracing.span(span_name(endpoint, rec.request_model), attrs) as sp:
            most = v.max_usage(shape, len(plain))
            cost_usd, _ = gw.meter.price(rec.request_model, most)
            reservation = Reservation(most.total_tokens, cost_usd)
            refusal = gw.meter.admit(reservation)
            if refusal is not None:
                self._refuse(rec, endpoint.protocol, e.BUDGET_EXHAUSTED, refusal, "budget_exhausted")
            else:
                self._reservation, self._most = reservation, most
                sent = p.with_stream_usage(endpoint, parsed)
                body = plain if sent is parsed else json.dumps(sent).encode()
                self._proxy(gw, rec, endpoint, path=path, query=query, body=body)
            if sp.is_recording():
                sp.set_attributes(span_result_attributes(rec))

    def _account(self, rec: DriverCallRecord) -> None:
        """Count the call (before the agent has the end of its answer: see `Meter.account`) and
        release its reservation; once."""
        if self._accounted:
            return
        self._accounted = True
        rec.finished_at = utc_now()
        rec.latency_s = round(time.monotonic() - self._t0, 6)
        self._newly = self.server.service.meter.account(rec, self._reservation)

    def _refuse(
        self,
        rec: DriverCallRecord,
        protocol: str,
        status: int,
        message: str,
        why: str,
        *,
        unread: bool = False,
    ) -> None:
        """Answer the call itself. `unread`: the request's body was not read (or not all of it): the
        connection closes after the answer, once what the client already sent is drained."""
        rec.status, rec.refused, rec.error = status, why, message
        body = e.error_body(protocol, status, message)
        rec.response_body = body
        self._account(rec)
        if unread:
            self.close_connection = True
        with contextlib.suppress(OSError):
            self._send_json(status, body, [("Connection", "close")] if unread else ())
            if unread:
                self.wfile.flush()
                self.drain_request()

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
        if body:
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(body))
        self._forwarded = True
        sent = time.monotonic()
        with contextlib.ExitStack() as stack:
            try:
                resp = stack.enter_context(gw.upstream.request(self.command, url, body or None, headers))
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self._forwarded = False  # no answer: nothing was generated
                self._refuse(
                    rec,
                    endpoint.protocol,
                    e.BAD_GATEWAY,
                    f"the driver gateway could not reach the upstream {redact_url(cfg.base_url)}: "
                    f"{exc or type(exc).__name__}",
                    "upstream_unreachable",
                )
                return
            self._relay(rec, endpoint, resp)
        ok = rec.status is not None and 200 <= rec.status < 300
        gw.metrics.upstream.observe(
            self._upstream_end - sent, protocol=endpoint.protocol, outcome="ok" if ok else "upstream_error"
        )

    def _relay(self, rec: DriverCallRecord, endpoint: p.Endpoint, resp: http.client.HTTPResponse) -> None:
        status = resp.status
        rec.status = status
        upstream_headers = list(resp.headers.items())
        rec.response_headers = redact_headers(upstream_headers, self.server.service.secrets)
        ctype = (resp.headers.get("Content-Type") or "").lower()
        length = resp.headers.get("Content-Length")
        streamed = "text/event-stream" in ctype or (rec.stream and length is None)
        headers = p.returned_headers(upstream_headers)
        encoding = resp.headers.get("Content-Encoding") or ""
        buf = bytearray()
        client_ok = True
        if not streamed:
            try:
                data = resp.read()
            except (OSError, ValueError, http.client.HTTPException) as exc:
                rec.error = f"reading the upstream's answer failed: {exc}"
                data = b""
            self._upstream_end = time.monotonic()
            rec.first_byte_s = round(self._upstream_end - self._t0, 6)
            self._meter(rec, endpoint, status=status, raw=data, streamed=False, encoding=encoding)
            self._account(rec)
            with contextlib.suppress(OSError):
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self._end_headers_with(b"" if self.command == "HEAD" else data)
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
                    chunk = resp.read1(_CHUNK)
                except (OSError, ValueError, http.client.HTTPException) as exc:
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
            self._upstream_end = time.monotonic()
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
        if rec.usage_missing:
            # Generated, but the answer says not how much (a stream the gateway did not ask for, a
            # server that ignores `include_usage`, a stream cut short): count the most it may be.
            rec.usage = self._most
        if rec.usage is not None:
            rec.cost_usd, rec.priced = gw.meter.price(answer.model or rec.request_model, rec.usage)
        rec.response_id = answer.response_id
        rec.finish_reasons = answer.finish_reasons
