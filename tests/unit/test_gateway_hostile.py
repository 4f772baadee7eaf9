"""The driver gateway against a hostile agent, over loopback against the real server: the agent
holds the run's token (or not) and tries to get upstream tokens unmetered, past its budget, or to
exhaust the gateway's memory, threads or stop.

- a lax OpenAI-compatible upstream (vLLM/SGLang style: `LaxUpstream`) coerces `"stream": "true"`
  into a stream without usage: the gateway refuses every field the meter relies on with the wrong
  type (400 in the provider's shape, nothing forwarded), and an answer whose usage it cannot read
  is counted as the most the call may use;
- 40 concurrent calls against a 1,000-token budget use at most the budget plus one call, counted
  by the upstream;
- a 1 MiB gzip body that expands to 1 GiB is a 401 unread without the token and a 413 with it,
  the gateway's resident memory growing by a few tens of MB at most (measured on `a2rl gateway
  serve` as a child process);
- slowloris connections: at most `MAX_CONNECTIONS` of them are served (the rest wait in the
  listen backlog), none holds a thread, each is closed at its deadline, and a stop with 100 of
  them hanging is prompt;
- the wire is strict (framing, head sizes) and complete (pipelining, HTTP/1.0, half-closed clients).
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from a2rl_gateway import Gateway, GatewayConfig, GatewayProcess, Limits, http1, new_run_token
from a2rl_gateway.gateway import MAX_CONNECTIONS

from tests.unit.test_gateway_server import auth_headers

UPSTREAM_KEY = "sk-upstream-MARKER-lax-4d1f0a9c"
MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-5-mini",
    "openai-compatible": "qwen2.5-coder-32b",
    "gemini": "gemini-2.5-flash",
}


# --- a lax upstream ------------------------------------------------------------------------------
def lax_bool(value: Any) -> bool:
    """What pydantic's lax mode makes of a boolean field (vLLM's request models)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on", "t", "y")
    return bool(value)


def lax_int(value: Any) -> int | None:
    try:
        return int(float(value)) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


@dataclass
class LaxUpstream:
    """An OpenAI-compatible server as lax as vLLM's: it reads `stream`, `max_tokens` and
    `stream_options.include_usage` by coercion, streams without usage unless `include_usage` is
    truthy, generates `max_tokens` (else `default_max_tokens`) per answer and counts every token it
    generated (`generated`: input + output), reported or not. With `always_stream` it streams every
    answer, never with usage (a misbehaving server)."""

    delay_s: float = 0.0
    always_stream: bool = False
    default_max_tokens: int = 500
    generated: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> LaxUpstream:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                upstream._handle(self)

            def do_GET(self) -> None:
                upstream._handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        if h.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        body = json.loads(raw) if raw else {}
        stream = self.always_stream or lax_bool(body.get("stream"))
        options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        with_usage = not self.always_stream and (not stream or lax_bool(options.get("include_usage")))
        max_tokens = lax_int(body.get("max_tokens")) or lax_int(body.get("max_completion_tokens"))
        prompt, completion = (
            max(1, len(raw) // 4),
            (max_tokens or self.default_max_tokens) * (lax_int(body.get("n")) or 1),
        )
        with self._lock:
            self.requests.append(body)
            self.generated += prompt + completion
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
            usage = {"prompt_tokens": prompt, "completion_tokens": completion}
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": body.get("model")}
            if stream:
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream")
                h.send_header("Connection", "close")
                h.end_headers()
                events = [{**chunk, "choices": [{"index": 0, "delta": {"content": "tok " * 50}}]}]
                if with_usage:
                    events.append({**chunk, "choices": [], "usage": usage})
                for ev in events:
                    h.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
                h.wfile.write(b"data: [DONE]\n\n")
                h.close_connection = True
                return
            data = json.dumps(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok"}}],
                    "usage": usage,
                }
            ).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        finally:
            with self._lock:
                self.in_flight -= 1


# --- helpers -------------------------------------------------------------------------------------
@pytest.fixture
def lax() -> Iterator[LaxUpstream]:
    upstream = LaxUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def make_gateway() -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []

    def make(provider: str, upstream: LaxUpstream, *, limits: Limits | None = None, **kw: Any) -> Gateway:
        base = upstream.base_url + ("/v1" if provider.startswith("openai") else "")
        cfg = GatewayConfig(
            provider=provider, token=new_run_token(), base_url=base, port=0, limits=limits or Limits()
        )
        gw = Gateway(cfg, upstream_key=UPSTREAM_KEY, **kw)
        gw.start()
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop(5)


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


def send(
    gw: Gateway, path: str, body: bytes, headers: dict[str, str] | None = None, timeout: float = 30
) -> Reply:
    assert gw.port is not None
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return Reply(resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()})
    finally:
        conn.close()


def chat(**fields: Any) -> bytes:
    return json.dumps(
        {"model": MODELS["openai-compatible"], "messages": [{"role": "user", "content": "hi"}], **fields}
    ).encode()


SHAPES: dict[str, Callable[[Any], bool]] = {
    "anthropic": lambda b: b["type"] == "error" and b["error"]["type"] == "invalid_request_error",
    "openai": lambda b: b["error"]["type"] == "invalid_request_error" and "message" in b["error"],
    "openai-compatible": lambda b: b["error"]["type"] == "invalid_request_error",
    "gemini": lambda b: b["error"]["code"] == 400 and b["error"]["status"] == "INVALID_ARGUMENT",
}
GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:generateContent"


# --- what the meter relies on, with the wrong type -------------------------------------------------
BAD_REQUESTS: list[tuple[str, str, bytes, str]] = [
    ("openai-compatible", "/v1/chat/completions", chat(stream="true"), "stream must be true or false"),
    ("openai-compatible", "/v1/chat/completions", chat(stream=1), "stream must be true or false"),
    ("openai-compatible", "/v1/chat/completions", chat(stream=True, stream_options="yes"), "stream_options"),
    (
        "openai-compatible",
        "/v1/chat/completions",
        chat(stream=True, stream_options={"include_usage": "false"}),
        "include_usage",
    ),
    ("openai-compatible", "/v1/chat/completions", chat(max_tokens="50"), "max_tokens must be a positive"),
    ("openai-compatible", "/v1/chat/completions", chat(max_tokens=0), "max_tokens must be a positive"),
    ("openai-compatible", "/v1/chat/completions", chat(max_tokens=50.5), "max_tokens must be a positive"),
    ("openai-compatible", "/v1/chat/completions", chat(max_completion_tokens=-1), "max_completion_tokens"),
    ("openai-compatible", "/v1/chat/completions", chat(n="4"), "n must be a positive"),
    ("openai-compatible", "/v1/chat/completions", chat(n=1, best_of=8), "best_of (8) greater than n"),
    # two parsers, two answers: Python's json keeps the last key, others the first
    (
        "openai-compatible",
        "/v1/chat/completions",
        b'{"model": "m", "messages": [], "stream": false, "stream": true}',
        "names 'stream' twice",
    ),
    ("openai-compatible", "/v1/chat/completions", '{"model": "m", "stream": true}'.encode("utf-16"), "UTF-8"),
    ("openai-compatible", "/v1/chat/completions", b"stream=true&model=m", "not JSON"),
    ("openai-compatible", "/v1/chat/completions", b'["stream", true]', "must be a JSON object"),
    (
        "openai",
        "/v1/responses",
        json.dumps({"model": "gpt-5-mini", "stream": "True", "input": "x"}).encode(),
        "stream",
    ),
    (
        "openai",
        "/v1/responses",
        json.dumps({"model": "gpt-5-mini", "max_output_tokens": "9"}).encode(),
        "max_output",
    ),
    (
        "openai",
        "/v1/responses",
        json.dumps({"model": "gpt-5-mini", "background": True}).encode(),
        "background",
    ),
    (
        "anthropic",
        "/v1/messages",
        json.dumps({"model": "claude-sonnet-4-5", "max_tokens": "1024", "messages": []}).encode(),
        "max_tokens must be a positive",
    ),
    (
        "anthropic",
        "/v1/messages",
        json.dumps(
            {"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": "yes", "messages": []}
        ).encode(),
        "stream must be true or false",
    ),
    (
        "gemini",
        GEMINI_PATH,
        json.dumps({"contents": [], "generationConfig": {"maxOutputTokens": "8"}}).encode(),
        "maxOutputTokens",
    ),
    (
        "gemini",
        GEMINI_PATH,
        json.dumps(
            {"contents": [], "generationConfig": {"max_output_tokens": 8, "maxOutputTokens": 8}}
        ).encode(),
        "the same field",
    ),
    (
        "gemini",
        GEMINI_PATH,
        json.dumps(
            {"contents": [], "generationConfig": {}, "generation_config": {"candidate_count": 9}}
        ).encode(),
        "the same field",
    ),
    (
        "gemini",
        GEMINI_PATH,
        json.dumps({"contents": [], "generationConfig": {"candidateCount": 0}}).encode(),
        "candidateCount",
    ),
]


@pytest.mark.parametrize(("provider", "path", "body", "says"), BAD_REQUESTS)
def test_fields_the_meter_relies_on_with_the_wrong_type_are_a_400_never_forwarded(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream, provider: str, path: str, body: bytes, says: str
) -> None:
    gw = make_gateway(provider, lax)
    reply = send(gw, path, body, auth_headers(provider, gw.config.token))
    assert reply.status == 400, reply.body
    assert SHAPES[provider](reply.json()) and says in json.dumps(reply.json())
    assert lax.requests == [] and lax.generated == 0
    s = gw.summary()
    assert s.calls == 1 and s.errors == 1 and s.total_tokens == 0


def test_stream_as_a_string_gets_nothing_from_a_lax_upstream(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream
) -> None:
    """The measured attack: 30 calls with `"stream": "true"` (the gateway took them for plain calls,
    the lax upstream streamed without usage: 15,000 tokens, 0 metered). Now each is a 400, and
    a real stream is metered exactly."""
    gw = make_gateway("openai-compatible", lax)
    headers = auth_headers("openai-compatible", gw.config.token)
    for _ in range(30):
        reply = send(gw, "/v1/chat/completions", chat(stream="true", max_tokens=500), headers)
        assert (
            reply.status == 400
            and reply.json()["error"]["message"] == "stream must be true or false, not 'true'"
        )
    assert lax.generated == 0 and gw.summary().total_tokens == 0
    # the same call as a real stream: the gateway asks for the usage, the upstream reports it
    reply = send(gw, "/v1/chat/completions", chat(stream=True, max_tokens=500), headers)
    assert reply.status == 200 and b"[DONE]" in reply.body
    assert lax.requests[-1]["stream_options"] == {"include_usage": True}
    s = gw.summary()
    assert s.total_tokens == lax.generated > 500 and s.usage_missing_calls == 0


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_without_readable_usage_counts_the_most_the_call_may_use(
    make_gateway: Callable[..., Gateway], stream: bool
) -> None:
    """A server that streams when not asked to (or ignores `include_usage`) and never reports usage:
    every call is counted at its reservation (its body's bytes + its max_tokens), at least what the
    upstream generated, and flagged."""
    upstream = LaxUpstream(always_stream=True).start()
    try:
        gw = make_gateway("openai-compatible", upstream)
        headers = auth_headers("openai-compatible", gw.config.token)
        sent = 0
        for _ in range(5):
            body = chat(stream=stream, max_tokens=300)
            sent += len(body)
            reply = send(gw, "/v1/chat/completions", body, headers)
            assert reply.status == 200 and reply.headers["content-type"] == "text/event-stream"
        s = gw.summary()
        assert s.usage_missing_calls == 5 and s.output_tokens == 5 * 300
        assert s.total_tokens >= upstream.generated > 0
        assert s.input_tokens <= sent + 5 * len(b'"stream_options": {"include_usage": true}, ')
    finally:
        upstream.stop()


def test_a_gateway_fault_after_forwarding_still_counts_the_call(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    import a2rl_gateway.server

    def boom(*args: Any) -> Any:
        raise RuntimeError("boom")

    gw = make_gateway("openai-compatible", lax)
    monkeypatch.setattr(a2rl_gateway.server, "from_json", boom)
    reply = send(
        gw, "/v1/chat/completions", chat(max_tokens=200), auth_headers("openai-compatible", gw.config.token)
    )
    assert reply.status == 500 and lax.generated > 0
    s = gw.summary()
    assert s.usage_missing_calls == 1 and s.total_tokens >= lax.generated


# --- the budget under concurrency ------------------------------------------------------------------
def _burst(gw: Gateway, provider: str, bodies: list[bytes]) -> list[Reply]:
    headers = auth_headers(provider, gw.config.token)
    barrier = threading.Barrier(len(bodies))
    replies: list[Reply | None] = [None] * len(bodies)

    def one(i: int) -> None:
        barrier.wait()
        replies[i] = send(gw, "/v1/chat/completions", bodies[i], headers, timeout=60)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert all(r is not None for r in replies)
    return [r for r in replies if r is not None]


@pytest.mark.parametrize(
    ("fields", "stream"),
    [({"max_tokens": 400}, False), ({"max_tokens": 400}, True), ({}, False)],
    ids=["max_tokens", "max_tokens-stream", "no-max_tokens"],
)
def test_40_concurrent_calls_stay_within_the_budget_plus_one_call(
    make_gateway: Callable[..., Gateway], fields: dict[str, Any], stream: bool
) -> None:
    upstream = LaxUpstream(delay_s=0.3).start()
    try:
        exhausted: list[str] = []
        gw = make_gateway(
            "openai-compatible", upstream, limits=Limits(tokens=1000), on_exhausted=exhausted.append
        )
        body = chat(stream=stream, **fields)
        replies = _burst(gw, "openai-compatible", [body] * 40)
        ok = [r for r in replies if r.status == 200]
        refused = [r for r in replies if r.status == 403]
        assert len(ok) + len(refused) == 40 and ok and refused
        assert all(r.json()["error"]["code"] == "driver_budget_exhausted" for r in refused)
        # what the upstream generated: the budget plus at most one call (the one admitted last)
        one_call = max((len(body) // 4) + (fields.get("max_tokens") or upstream.default_max_tokens), 1)
        assert upstream.generated <= 1000 + one_call, (upstream.generated, len(ok))
        assert len(upstream.requests) == len(ok)
        gw.stop(5)
        s = gw.summary()
        assert s.total_tokens == upstream.generated  # metered exactly
        assert s.budget.exhausted and s.budget.refused_calls == len(refused) and exhausted
        assert "the run's driver budget (1000 tokens) is exhausted" in (s.budget.reason or "")
    finally:
        upstream.stop()


def test_no_more_calls_than_the_cap_reach_the_upstream_at_once(make_gateway: Callable[..., Gateway]) -> None:
    upstream = LaxUpstream(delay_s=0.2).start()
    try:
        gw = make_gateway("openai-compatible", upstream, max_calls=4)
        replies = _burst(gw, "openai-compatible", [chat(max_tokens=5)] * 20)
        assert [r.status for r in replies] == [200] * 20  # the others waited for a slot
        assert upstream.most_in_flight == 4
    finally:
        upstream.stop()


def test_a_call_that_finds_no_slot_in_time_gets_a_429(make_gateway: Callable[..., Gateway]) -> None:
    upstream = LaxUpstream(delay_s=1.5).start()
    try:
        gw = make_gateway("anthropic", upstream, max_calls=1, call_wait_s=0.3)
        body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}).encode()
        headers = auth_headers("anthropic", gw.config.token)
        first = threading.Thread(target=send, args=(gw, "/v1/messages", body, headers))
        first.start()
        time.sleep(0.3)
        reply = send(gw, "/v1/messages", body, headers)
        first.join()
        assert reply.status == 429 and reply.json()["error"]["type"] == "rate_limit_error"
        assert len(upstream.requests) == 1
    finally:
        upstream.stop()


# --- bodies: compression, size, time -------------------------------------------------------------
@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """1 MiB of gzip that expands to 1 GiB of zeros: one deflate segment for 64 MiB (the compressor's
    state reset after it, so it can be repeated) 16 times, the final block, the gzip trailer."""
    zeros = bytes(64 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    segment = co.compress(zeros) + co.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(16):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    bomb = header + segment * 16 + co.flush() + struct.pack("<II", crc, (16 * len(zeros)) & 0xFFFFFFFF)
    assert len(bomb) < 1.1 * (1 << 20)
    assert zlib.decompressobj(31).decompress(bomb, 1 << 20) == bytes(1 << 20)  # it is gzip
    return bomb


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "Threads"):
            fields[name] = int(value.split()[0])
    return fields


def _hwm_reset(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak resident size starts again from now


@pytest.fixture
def gateway_process(tmp_path: Path, lax: LaxUpstream) -> Iterator[GatewayProcess]:
    cfg = GatewayConfig(
        provider="openai-compatible",
        token=new_run_token(),
        base_url=lax.base_url + "/v1",
        port=0,
        limits=Limits(tokens=10**6),
    )
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    proc = GatewayProcess(cfg, tmp_path / "gateway.log", upstream_key=UPSTREAM_KEY, base_env=env)
    proc.start()
    yield proc
    proc.stop(30)


def _raw_post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_gzip_bomb_is_refused_with_bounded_memory(
    gateway_process: GatewayProcess, lax: LaxUpstream, gzip_bomb: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = gateway_process
    assert proc.pid is not None and proc.url is not None
    port = int(proc.url.rsplit(":", 1)[1])
    token = proc.config.token
    plain = {"Content-Type": "application/json"}
    # warm up: one real (gzipped) call
    status, _ = _raw_post(
        port,
        "/v1/chat/completions",
        gzip.compress(chat(max_tokens=5)),
        {**plain, "Content-Encoding": "gzip", "Authorization": f"Bearer {token}"},
    )
    assert status == 200
    growth: dict[str, int] = {}
    for who, headers, want in [
        ("no token", {}, 401),
        ("the token", {"Authorization": f"Bearer {token}"}, 413),
    ]:
        before = _status(proc.pid)["VmRSS"]
        _hwm_reset(proc.pid)
        t0 = time.monotonic()
        status, body = _raw_post(
            port, "/v1/chat/completions", gzip_bomb, {**plain, "Content-Encoding": "gzip", **headers}
        )
        took = time.monotonic() - t0
        assert status == want, body
        growth[who] = _status(proc.pid)["VmHWM"] - before
        with capsys.disabled():
            print(f"\ngzip bomb with {who}: {status} in {took:.2f} s, peak RSS +{growth[who] / 1024:.1f} MiB")
        assert took < 10
    assert growth["no token"] < 8 * 1024  # KiB: nothing was decompressed
    assert growth["the token"] < 64 * 1024  # at most the 32 MiB limit (and a little)
    assert len(lax.requests) == 1


def _exchange(port: int, head: bytes, body: bytes | None = None) -> bytes:
    """Send `head`; once the gateway says `100 Continue`, `body`; everything until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        answer = sock.recv(65536)
        if body is not None and answer == b"HTTP/1.1 100 Continue\r\n\r\n":
            sock.sendall(body)
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_body_is_asked_for_only_once_the_call_is_authorised_and_its_size_fits(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream
) -> None:
    """`Expect: 100-continue`: no `100 Continue` (the client keeps its body) for a request without
    the token or with a body over the limit; an authorised one of a fitting size gets it."""
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    auth = f"Authorization: Bearer {gw.config.token}\r\n".encode()
    huge = b"Expect: 100-continue\r\nContent-Length: 1000000000\r\n\r\n"
    assert _exchange(gw.port, head + huge).startswith(b"HTTP/1.1 401 ")
    assert _exchange(gw.port, head + auth + huge).startswith(b"HTTP/1.1 413 ")
    body = chat(max_tokens=3)
    fits = f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    answer = _exchange(gw.port, head + auth + fits, body)
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ")
    assert len(lax.requests) == 1


def _chunked(body: bytes, size: int) -> bytes:
    return b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)
    )


@pytest.mark.parametrize(
    ("framing", "status"),
    [
        (lambda b: b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b, 100) + b"0\r\n\r\n", 200),
        (lambda b: b"Transfer-Encoding: chunked\r\n\r\n-5\r\n" + b, 400),
        (
            lambda b: b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b, 1) + b"0\r\n\r\n",
            400,
        ),  # > MAX_CHUNKS
        (lambda b: b"Transfer-Encoding: gzip, chunked\r\n\r\n" + _chunked(b, 100) + b"0\r\n\r\n", 400),
        (lambda b: b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + _chunked(b, 100), 400),
        (lambda b: f"Content-Length: {len(b)}\r\nContent-Length: 5\r\n\r\n".encode() + b, 400),
        (lambda b: f"Content-Length: +{len(b)}\r\n\r\n".encode() + b, 400),
    ],
    ids=[
        "chunked",
        "negative-chunk",
        "a-byte-a-chunk",
        "coded-transfer",
        "chunked-and-length",
        "two-lengths",
        "signed-length",
    ],
)
def test_request_framing_is_strict(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream, framing: Callable[[bytes], bytes], status: int
) -> None:
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    body = chat(max_tokens=3, pad="x" * 20_000)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + b"Connection: close\r\n"
        + f"Authorization: Bearer {gw.config.token}\r\n".encode()
    )
    answer = _exchange(gw.port, head + framing(body))
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:300]
    assert len(lax.requests) == (status == 200)


def _statuses(answer: bytes) -> list[int]:
    """The status of every answer in `answer` (bodies here hold no status line)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


def test_pipelined_requests_are_answered_in_order(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream
) -> None:
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    body = chat(max_tokens=3)
    call = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {gw.config.token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = _exchange(gw.port, health + call + health + call + last)  # one write
    assert _statuses(answer) == [200] * 5
    assert answer.count(b'{"status": "ok"}') == 3 and answer.index(b"chat.completion") > answer.index(b"ok")
    assert len(lax.requests) == 2


def test_an_http_1_0_client_gets_its_stream_ended_by_the_close(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream
) -> None:
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    body = chat(max_tokens=4, stream=True)
    answer = _exchange(
        gw.port,
        b"POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {gw.config.token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body,
    )
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"chunked" not in head.lower()
    assert rest.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]")
    gw.stop(5)
    assert gw.summary().total_tokens == lax.generated > 0


@pytest.mark.parametrize(
    "headers",
    [b"X-Big: " + b"a" * (70 << 10) + b"\r\n", b"".join(b"X-%d: 1\r\n" % i for i in range(101))],
    ids=["70-KiB-header", "101-headers"],
)
def test_oversized_request_heads_are_a_431(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream, headers: bytes
) -> None:
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    answer = _exchange(gw.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    assert _statuses(answer) == [431]


def test_a_client_that_half_closes_after_its_request_still_gets_the_answer(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream
) -> None:
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    body = chat(max_tokens=3)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {gw.config.token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert _statuses(answer) == [200] and b"chat.completion" in answer


@pytest.mark.parametrize(
    ("encoding", "body", "status"),
    [
        ("br", b"\x0b\x02\x80{}\x03", 415),
        ("gzip", gzip.compress(b'{"model": "m", "messages": []}')[:-12], 400),
        ("gzip, gzip, gzip", b"{}", 415),
    ],
)
def test_content_codings_the_gateway_cannot_read_are_refused(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream, encoding: str, body: bytes, status: int
) -> None:
    gw = make_gateway("openai-compatible", lax)
    headers = {"Content-Encoding": encoding, **auth_headers("openai-compatible", gw.config.token)}
    reply = send(gw, "/v1/chat/completions", body, headers)
    assert reply.status == status and reply.json()["error"]["type"] == "invalid_request_error"
    assert lax.requests == []


def test_a_compressed_request_goes_upstream_as_the_gateway_read_it(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream
) -> None:
    gw = make_gateway("openai-compatible", lax)
    headers = {"Content-Encoding": "gzip", **auth_headers("openai-compatible", gw.config.token)}
    assert send(gw, "/v1/chat/completions", gzip.compress(chat(max_tokens=7)), headers).status == 200
    assert lax.requests[-1]["max_tokens"] == 7


# --- slowloris ------------------------------------------------------------------------------------
def _hang(port: int, kind: str, token: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == "headers":  # a request line and half its headers
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    elif kind == "body":  # an authorised call whose body never finishes
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {token}\r\nContent-Length: 100000\r\n\r\n".encode()
            + b'{"model": "m", "messages": [{"role": "user", "content": "'
        )
    return sock  # "idle": connected, nothing sent


def test_slowloris_connections_are_bounded_and_a_stop_is_prompt(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    threads_before = threading.active_count()
    socks = [_hang(gw.port, ("headers", "body", "idle")[i % 3], gw.config.token) for i in range(100)]
    try:
        deadline = time.monotonic() + 10
        while len(gw.connections) < MAX_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert len(gw.connections) == MAX_CONNECTIONS  # the other 36 wait in the listen backlog
        assert threading.active_count() - threads_before <= 1  # the meter's writer, at most: no thread each
        t0 = time.monotonic()
        assert gw.stop(30)
        took = time.monotonic() - t0
        with capsys.disabled():
            print(f"\nGateway.stop() with 100 hanging connections: {took:.2f} s")
        assert took < 2.0
        assert gw.summary().calls >= 1  # the hanging bodies were answered (400, not read to the end)
    finally:
        for s in socks:
            s.close()


def test_deadlines_close_slow_headers_and_bodies(
    make_gateway: Callable[..., Gateway], lax: LaxUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http1, "HEADER_TIMEOUT_S", 0.5)
    monkeypatch.setattr(http1, "BODY_TIMEOUT_S", 0.5)
    gw = make_gateway("openai-compatible", lax)
    assert gw.port is not None
    # headers dribbled one byte every 0.1 s: closed at the deadline, not kept alive by each byte
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        closed = None
        for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = time.monotonic() - t0
                break
            time.sleep(0.1)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    closed = time.monotonic() - t0
                    break
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
    assert closed is not None and 0.4 < closed < 2.0
    # a body that stops half way: 408 in the provider's shape at the deadline
    sock = _hang(gw.port, "body", gw.config.token)
    with sock:
        sock.settimeout(5)
        answer = b""
        while chunk := sock.recv(65536):  # until the gateway closes
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive in time" in answer
    assert len(lax.requests) == 0


def test_stopping_a_gateway_process_with_hanging_connections_is_prompt(
    gateway_process: GatewayProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = gateway_process
    assert proc.pid is not None and proc.url is not None
    port = int(proc.url.rsplit(":", 1)[1])
    socks = [_hang(port, ("headers", "body", "idle")[i % 3], proc.config.token) for i in range(100)]
    try:
        time.sleep(1.0)
        threads = _status(proc.pid)["Threads"]
        assert threads <= 8, threads  # main, event loop, record writer, refusal watcher, span exporter…
        t0 = time.monotonic()
        assert proc.stop(30) == 0
        took = time.monotonic() - t0
        with capsys.disabled():
            print(
                f"\na2rl gateway serve: {threads} threads with 100 hanging connections; "
                f"SIGTERM to exit {took:.2f} s"
            )
        assert took < 5.0
    finally:
        for s in socks:
            s.close()
