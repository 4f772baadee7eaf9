"""The gateway's call handler: one coroutine per request (`handle`), served by `a2rl_gateway.http1`
(one event loop: HTTP/1.1 keep-alive, bounded connections and deadlines) on 127.0.0.1 and/or a Unix
socket, forwarding to the upstream over kept-alive pooled connections (`a2rl_gateway.upstream`:
proxies from the environment apply; redirects are passed back, not followed).

Per request: `/health` and `/metrics` answer themselves; otherwise the token is checked (401) and
the endpoint routed (404) before a byte of the body is asked for; then the call waits for one of
the run's call slots (`Gateway.call_slot`: 429 when none frees in time), its body is read (within
`MAX_REQUEST_BYTES` and `http1.BODY_TIMEOUT_S`: 413, 408), decompressed within the same limit
(`a2rl_gateway.bodies`: 413, 415) and checked (`a2rl_gateway.validation`: 400); the budget reserves
the most the call may use or refuses it (403); then the body the gateway read goes upstream with
the real key. A streamed answer is relayed chunk by chunk as it arrives (chunked transfer
encoding); if the agent hangs up mid-stream the gateway still reads the upstream to its end, so the
usage is metered. A successful generation answer without usage the gateway can read is counted as
the call's reservation (`usage_missing`). Every request ends in `Meter.account` (the totals and the
budget, the reservation settled: before the agent has the last byte of its answer) and then
`Meter.persist` (the record, scrubbed and written by the meter's writer thread, after the answer)
inside one GenAI span.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import re
import time
import zlib
from typing import TYPE_CHECKING, Any

from a2rl.metrics import CONTENT_TYPE
from a2rl.records.driver import DriverCallRecord, DriverUsage
from a2rl.records.times import utc_now
from a2rl_gateway import errors as e
from a2rl_gateway import protocols as p
from a2rl_gateway import validation as v
from a2rl_gateway.bodies import BodyError, decode, parse_json
from a2rl_gateway.budget import Reservation
from a2rl_gateway.http1 import Exchange
from a2rl_gateway.redact import redact_headers, redact_query, redact_url
from a2rl_gateway.spans import span_attributes, span_name, span_result_attributes
from a2rl_gateway.upstream import UpstreamError, UpstreamResponse
from a2rl_gateway.usage import Answer, from_json, from_stream

if TYPE_CHECKING:
    from a2rl_gateway.gateway import Gateway

log = logging.getLogger(__name__)

#: Largest request body accepted, as sent and once decompressed (Anthropic's own limit for the
#: Messages API; prompts with images run to a few MiB).
MAX_REQUEST_BYTES = 32 << 20
#: Largest body kept in a call record (the rest is cut, `truncated: true`).
MAX_RECORD_BODY_BYTES = 8 << 20

_DIGITS = re.compile(r"[0-9]{1,12}")
_JSON = [("Content-Type", "application/json")]


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


async def handle(gw: Gateway, ex: Exchange) -> None:
    """One request on the gateway (see the module doc)."""
    req = ex.request
    path, _, query = req.target.partition("?")
    if log.isEnabledFor(logging.DEBUG):  # the request line may carry `?key=<token>`
        log.debug("%s %s %s", ex.peer, req.method, redact_query(req.target)[:1000])
    if req.method in ("GET", "HEAD") and path.rstrip("/") in ("/health", "/metrics"):
        if path.rstrip("/") == "/health":
            await ex.respond(200, _JSON, b'{"status": "ok"}')
        else:
            await ex.respond(200, [("Content-Type", CONTENT_TYPE)], gw.metrics.render().encode())
        return
    gw.call_began()
    try:
        await _Call(gw, ex).run(path, query)
    finally:
        gw.call_ended()


class _Call:
    """One driver call: its record, its reservation, its answer."""

    def __init__(self, gw: Gateway, ex: Exchange) -> None:
        self.gw, self.ex = gw, ex
        self.t0 = time.monotonic()
        self.accounted = False
        self.newly: str | None = None
        self.reservation: Reservation | None = None
        self.most: DriverUsage | None = None
        self.forwarded = False
        self.upstream_end = self.t0

    async def run(self, path: str, query: str) -> None:
        gw, req = self.gw, self.ex.request
        cfg = gw.config
        rec = DriverCallRecord(
            index=gw.meter.next_index(),
            started_at=utc_now(),
            provider=cfg.provider,
            method=req.method,
            path=redact_query(req.target),
            request_headers=redact_headers(req.headers, gw.secrets),
        )
        err_protocol = p.error_protocol(cfg.provider, path)
        try:
            # Nothing of the body is asked for (nor decompressed) before the token and the endpoint.
            if not gw.authorized(req.headers, query):
                await self.refuse(
                    rec,
                    err_protocol,
                    e.UNAUTHORIZED,
                    "invalid or missing API key: present this run's driver token "
                    "(x-api-key, Authorization: Bearer, x-goog-api-key or ?key=)",
                    "unauthorized",
                )
                return
            endpoint = p.route(cfg.provider, req.method, path)
            if endpoint is None:
                await self.refuse(
                    rec,
                    err_protocol,
                    e.NOT_FOUND,
                    f"{req.method} {path[:200]} is not served by a2rl's driver gateway "
                    f"for provider {cfg.provider}",
                    "unknown_endpoint",
                )
                return
            rec.protocol, rec.operation = endpoint.protocol, endpoint.operation
            async with gw.call_slot() as slot:
                if slot is None:
                    message = "a2rl's driver gateway is stopping"
                    await self.refuse(rec, endpoint.protocol, e.STOPPING, message, "stopping")
                    return
                if not slot:
                    message = f"more than {gw.max_calls} driver calls at once; retry shortly"
                    await self.refuse(rec, endpoint.protocol, e.TOO_MANY, message, "too_many_calls")
                    return
                await self.serve(rec, endpoint, path=path, query=query)
        except ConnectionError as exc:
            rec.error = rec.error or f"the client connection failed: {exc}"
            raise
        except Exception as exc:
            log.exception("driver call %d failed in the gateway", rec.index)
            self.ex.close = True
            if self.forwarded and rec.usage is None and self.most and self.most.total_tokens:
                rec.usage, rec.usage_missing = self.most, True  # it reached the upstream: count its most
                rec.cost_usd, rec.priced = gw.meter.price(rec.request_model, self.most)
            message = f"internal error in a2rl's driver gateway: {exc}"
            if not self.ex.responded:
                await self.refuse(rec, err_protocol, e.INTERNAL, message, "internal")
            else:
                rec.error = message
        finally:
            self.account(rec)
            gw.meter.persist(rec, self.newly)  # the writer scrubs the secrets from it

    async def body(self) -> bytes:
        """The body as the client sent it, within the limits; `BodyError` when it is not."""
        req = self.ex.request
        lengths = req.get_all("Content-Length")
        if lengths and not req.get_all("Transfer-Encoding"):
            if len(set(lengths)) > 1 or not _DIGITS.fullmatch(lengths[0].strip()):
                raise BodyError(e.BAD_REQUEST, f"bad Content-Length {', '.join(lengths)[:40]!r}")
            if int(lengths[0]) > MAX_REQUEST_BYTES:
                raise BodyError(e.TOO_LARGE, f"request body over {MAX_REQUEST_BYTES >> 20} MiB")
        return await self.ex.read_body(MAX_REQUEST_BYTES)

    async def serve(self, rec: DriverCallRecord, endpoint: p.Endpoint, *, path: str, query: str) -> None:
        """An authorised call to a served endpoint, holding a call slot: body, checks, budget, upstream."""
        gw = self.gw
        try:
            raw = await self.body()
        except BodyError as exc:
            await self.refuse(rec, endpoint.protocol, exc.status, str(exc), "bad_request")
            return
        try:
            plain = decode(raw, ", ".join(self.ex.request.get_all("Content-Encoding")), MAX_REQUEST_BYTES)
        except BodyError as exc:
            await self.refuse(rec, endpoint.protocol, exc.status, str(exc), "bad_request")
            return
        del raw
        try:
            parsed = parse_json(plain) if plain else None
        except BodyError as exc:
            rec.request_body, rec.truncated = recorded_body(plain)
            await self.refuse(rec, endpoint.protocol, e.BAD_REQUEST, str(exc), "bad_request")
            return
        if len(plain) > MAX_RECORD_BODY_BYTES:
            rec.request_body, rec.truncated = recorded_body(plain)
        else:
            rec.request_body = parsed  # never changed after (`with_stream_usage` copies)
        try:
            rec.request_model = p.request_model(endpoint, parsed)
            shape = v.check(endpoint, parsed)
        except v.InvalidRequestError as exc:
            await self.refuse(rec, endpoint.protocol, e.BAD_REQUEST, str(exc), "bad_request")
            return
        rec.stream = shape.stream
        attrs = span_attributes(gw.config, endpoint, rec, parsed)
        with gw.tracing.span(span_name(endpoint, rec.request_model), attrs) as sp:
            most = v.max_usage(shape, len(plain))
            cost_usd, _ = gw.meter.price(rec.request_model, most)
            reservation = Reservation(most.total_tokens, cost_usd)
            refusal = gw.meter.admit(reservation)
            if refusal is not None:
                await self.refuse(rec, endpoint.protocol, e.BUDGET_EXHAUSTED, refusal, "budget_exhausted")
            else:
                self.reservation, self.most = reservation, most
                sent = p.with_stream_usage(endpoint, parsed)
                body = plain if sent is parsed else json.dumps(sent).encode()
                await self.proxy(rec, endpoint, path=path, query=query, body=body)
            if sp.is_recording():
                sp.set_attributes(span_result_attributes(rec))

    def account(self, rec: DriverCallRecord) -> None:
        """Count the call (before the agent has the end of its answer: see `Meter.account`) and
        release its reservation; once."""
        if self.accounted:
            return
        self.accounted = True
        rec.finished_at = utc_now()
        rec.latency_s = round(time.monotonic() - self.t0, 6)
        self.newly = self.gw.meter.account(rec, self.reservation)

    async def refuse(self, rec: DriverCallRecord, protocol: str, status: int, message: str, why: str) -> None:
        """Answer the call itself. A request whose body was not read (or not all of it) closes its
        connection after the answer (`http1` drains what the client already sent)."""
        rec.status, rec.refused, rec.error = status, why, message
        body = e.error_body(protocol, status, message)
        rec.response_body = body
        self.account(rec)
        with contextlib.suppress(ConnectionError):
            await self.ex.respond(
                status, _JSON, b"" if self.ex.request.method == "HEAD" else json.dumps(body).encode()
            )

    async def proxy(
        self, rec: DriverCallRecord, endpoint: p.Endpoint, *, path: str, query: str, body: bytes
    ) -> None:
        gw, req = self.gw, self.ex.request
        cfg = gw.config
        url = p.upstream_url(cfg.base_url, path, p.forwarded_query(query))
        rec.upstream_url = redact_url(url)
        headers = p.forward_headers(cfg.provider, req.headers, gw.upstream_key)
        if body:
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(body))
        self.forwarded = True
        sent = time.monotonic()
        try:
            async with gw.upstream.request(req.method, url, body or None, headers) as resp:
                await self.relay(rec, endpoint, resp)
        except (UpstreamError, ValueError) as exc:
            if rec.status is not None:
                raise
            self.forwarded = False  # no answer: nothing was generated
            await self.refuse(
                rec,
                endpoint.protocol,
                e.BAD_GATEWAY,
                f"the driver gateway could not reach the upstream {redact_url(cfg.base_url)}: {exc}",
                "upstream_unreachable",
            )
            return
        ok = rec.status is not None and 200 <= rec.status < 300
        gw.metrics.upstream.observe(
            self.upstream_end - sent, protocol=endpoint.protocol, outcome="ok" if ok else "upstream_error"
        )

    async def relay(self, rec: DriverCallRecord, endpoint: p.Endpoint, resp: UpstreamResponse) -> None:
        ex = self.ex
        status = resp.status
        rec.status = status
        rec.response_headers = redact_headers(resp.headers, self.gw.secrets)
        ctype = (resp.header("Content-Type") or "").lower()
        streamed = "text/event-stream" in ctype or (rec.stream and resp.header("Content-Length") is None)
        headers = p.returned_headers(resp.headers)
        encoding = resp.header("Content-Encoding") or ""
        if not streamed:
            try:
                data = await resp.read()
            except UpstreamError as exc:
                rec.error = f"reading the upstream's answer failed: {exc}"
                data = b""
            self.upstream_end = time.monotonic()
            rec.first_byte_s = round(self.upstream_end - self.t0, 6)
            self.meter(rec, endpoint, status=status, raw=data, streamed=False, encoding=encoding)
            self.account(rec)
            try:
                await ex.respond(status, headers, b"" if ex.request.method == "HEAD" else data)
            except ConnectionError:
                rec.error = rec.error or "the client hung up before the answer was sent"
            return
        client_ok = True
        await ex.start_stream(status, [*headers, ("X-Accel-Buffering", "no")])  # leaves with the first bytes
        buf = bytearray()
        while not self.accounted:
            try:
                chunk = await resp.read_some()
            except UpstreamError as exc:
                rec.error = f"the upstream's stream broke off: {exc}"
                chunk = b""
            last = not chunk or resp.at_end()
            if chunk:
                if rec.first_byte_s is None:
                    rec.first_byte_s = round(time.monotonic() - self.t0, 6)
                buf += chunk
            if last:  # metered and counted before the agent has the end of its answer
                self.upstream_end = time.monotonic()
                self.meter(rec, endpoint, status=status, raw=bytes(buf), streamed=True, encoding=encoding)
                self.account(rec)
            if client_ok:
                try:
                    await ex.send_chunk(chunk, last=last)  # the end with the last bytes: one write
                except ConnectionError:
                    client_ok = False  # keep reading: the usage comes at the end
                    rec.error = "the client hung up before the stream ended"
        if not client_ok:
            ex.close = True

    def meter(
        self,
        rec: DriverCallRecord,
        endpoint: p.Endpoint,
        *,
        status: int,
        raw: bytes,
        streamed: bool,
        encoding: str,
    ) -> None:
        gw = self.gw
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
            rec.usage = self.most
        if rec.usage is not None:
            rec.cost_usd, rec.priced = gw.meter.price(answer.model or rec.request_model, rec.usage)
        rec.response_id = answer.response_id
        rec.finish_reasons = answer.finish_reasons
