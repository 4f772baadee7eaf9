"""The driver gateway against a real (scripted) upstream on loopback, every protocol, streaming and
not: metering equals the usage the upstream sent, the budget ends in the provider's error and a
flag, the token is checked, streams arrive incrementally, the key stays out of the records, and
`a2rl gateway serve` as a child process holds the key in neither its environment nor its argv.

The upstream here is this file's own small one (`Upstream`): it checks the real key, answers each
protocol with a different usage per call (cache fields included) and logs what it got.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from a2rl_gateway import Gateway, GatewayConfig, GatewayProcess, Limits, new_run_token

from a2rl import constants as c
from a2rl.errors import A2rlError
from a2rl.records.base import load_record
from a2rl.records.driver import DriverCallRecord, DriverSummary
from a2rl.records.driver_calls import iter_driver_calls
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from a2rl.tracing import Tracing, collect_spans

UPSTREAM_KEY = "sk-upstream-MARKER-7f3c9d1e2b"
PREFIX = "local/gw-0123456789ab"
LAYOUT = RunLayout.from_prefix(PREFIX)


def stored_call(store: ObjectStore, index: int) -> DriverCallRecord:
    """Call `index`'s record as the gateway stored it (in a batch object)."""
    return {r.index: r for r in iter_driver_calls(store, LAYOUT)}[index]


# --- the scripted upstream ------------------------------------------------------------------------
@dataclass
class Sent:
    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0


@dataclass
class Upstream:
    """A provider on 127.0.0.1 speaking all four wire protocols (see the module doc)."""

    provider: str
    key: str = UPSTREAM_KEY
    requests: list[dict[str, Any]] = field(default_factory=list)
    sent: Sent = field(default_factory=Sent)
    #: When set, a stream sends its first event, then waits for `release` before the rest.
    hold: threading.Event | None = None
    release: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    _n: int = 0

    def start(self) -> Upstream:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                upstream._handle(self)

            def do_POST(self) -> None:
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
        root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        return f"{root}/v1" if self.provider in ("openai", "openai-compatible") else root

    # answers
    def _usage(self) -> Sent:
        self._n += 1
        n = self._n
        u = Sent(
            input=100 * n + 7,
            output=10 * n + 3,
            cached=5 * n,
            cache_write=2 * n if self.provider == "anthropic" else 0,
        )
        self.sent.input += u.input
        self.sent.output += u.output
        self.sent.cached += u.cached
        self.sent.cache_write += u.cache_write
        return u

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        if h.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        body = json.loads(raw) if raw else {}
        path, _, query = h.path.partition("?")
        self.requests.append(
            {"path": h.path, "headers": {k.lower(): v for k, v in h.headers.items()}, "body": body}
        )
        want = {"anthropic": ("x-api-key", self.key), "gemini": ("x-goog-api-key", self.key)}.get(
            self.provider, ("Authorization", f"Bearer {self.key}")
        )
        if h.headers.get(want[0]) != want[1]:
            self._json(h, 401, {"error": "bad key"})
            return
        if path.endswith("/models"):
            self._json(h, 200, {"data": [{"id": "m"}]})
            return
        if isinstance(body, dict) and body.get("model") == "overloaded":
            h.send_response(529)
            data = json.dumps(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            ).encode()
            h.send_header("Content-Type", "application/json")
            h.send_header("Retry-After", "7")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        u = self._usage()
        if path.endswith("/messages"):
            self._anthropic(h, body, u)
        elif path.endswith("/chat/completions"):
            self._chat(h, body, u)
        elif path.endswith("/responses"):
            self._responses(h, body, u)
        elif ":generateContent" in path or ":streamGenerateContent" in path:
            self._gemini(h, path, query, u)
        else:
            self._json(h, 404, {"error": "no"})

    def _json(self, h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _stream(self, h: BaseHTTPRequestHandler, events: list[tuple[str | None, Any]]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for i, (name, data) in enumerate(events):
            text = (
                f"event: {name}\n" if name else ""
            ) + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
            chunk = text.encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            h.wfile.flush()
            if i == 0 and self.hold is not None:
                self.hold.set()
                assert self.release.wait(10), "the test never released the stream"
        self.finished.set()  # everything sent but the end (so it is set before the gateway sees the end)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _anthropic(self, h: BaseHTTPRequestHandler, body: dict[str, Any], u: Sent) -> None:
        model = f"{body.get('model')}-20250929"
        usage = {
            "input_tokens": u.input - u.cached - u.cache_write,
            "output_tokens": u.output,
            "cache_read_input_tokens": u.cached,
            "cache_creation_input_tokens": u.cache_write,
        }
        if not body.get("stream"):
            self._json(
                h,
                200,
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": "hello"}],
                    "stop_reason": "end_turn",
                    "usage": usage,
                },
            )
            return
        start_usage = {**usage, "output_tokens": 1}
        self._stream(
            h,
            [
                (
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            "id": "msg_1",
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": [],
                            "usage": start_usage,
                        },
                    },
                ),
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                ),
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": "hel"},
                    },
                ),
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": "lo"},
                    },
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn"},
                        "usage": {"output_tokens": u.output},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ],
        )

    def _chat(self, h: BaseHTTPRequestHandler, body: dict[str, Any], u: Sent) -> None:
        model = str(body.get("model"))
        usage = {
            "prompt_tokens": u.input,
            "completion_tokens": u.output,
            "total_tokens": u.input + u.output,
            "prompt_tokens_details": {"cached_tokens": u.cached},
        }
        if not body.get("stream"):
            self._json(
                h,
                200,
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "hello"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                },
            )
            return

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        events: list[tuple[str | None, Any]] = [
            (None, chunk({"role": "assistant", "content": "hel"})),
            (None, chunk({"content": "lo"})),
            (None, chunk({}, "stop")),
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                (
                    None,
                    {
                        "id": "c1",
                        "object": "chat.completion.chunk",
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    },
                )
            )
        else:  # without include_usage a real server sends no usage: undo the count
            self.sent.input -= u.input
            self.sent.output -= u.output
            self.sent.cached -= u.cached
        events.append((None, "[DONE]"))
        self._stream(h, events)

    def _responses(self, h: BaseHTTPRequestHandler, body: dict[str, Any], u: Sent) -> None:
        model = str(body.get("model"))
        final = {
            "id": "resp_1",
            "object": "response",
            "model": model,
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "hello"}],
                }
            ],
            "usage": {
                "input_tokens": u.input,
                "output_tokens": u.output,
                "total_tokens": u.input + u.output,
                "input_tokens_details": {"cached_tokens": u.cached},
            },
        }
        if not body.get("stream"):
            self._json(h, 200, final)
            return
        self._stream(
            h,
            [
                (
                    "response.created",
                    {
                        "type": "response.created",
                        "response": {"id": "resp_1", "status": "in_progress", "model": model},
                    },
                ),
                ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "hel"}),
                ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "lo"}),
                ("response.completed", {"type": "response.completed", "response": final}),
            ],
        )

    def _gemini(self, h: BaseHTTPRequestHandler, path: str, query: str, u: Sent) -> None:
        model = path.rsplit("/", 1)[-1].split(":", maxsplit=1)[0]

        def chunk(text: str, out: int, last: bool) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
            if last:
                cand["finishReason"] = "STOP"
            return {
                "candidates": [cand],
                "usageMetadata": {
                    "promptTokenCount": u.input,
                    "candidatesTokenCount": out,
                    "totalTokenCount": u.input + out,
                    "cachedContentTokenCount": u.cached,
                },
                "modelVersion": model,
                "responseId": "g1",
            }

        if ":generateContent" in path:
            self._json(h, 200, chunk("hello", u.output, True))
            return
        assert "alt=sse" in query
        self._stream(h, [(None, chunk("hel", 1, False)), (None, chunk("lo", u.output, True))])


# --- helpers -------------------------------------------------------------------------------------
MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-5-mini",
    "openai-compatible": "qwen-local",
    "gemini": "gemini-2.5-flash",
}


def auth_headers(provider: str, token: str) -> dict[str, str]:
    if provider == "anthropic":
        return {"x-api-key": token, "anthropic-version": "2023-06-01"}
    if provider == "gemini":
        return {"x-goog-api-key": token}
    return {"Authorization": f"Bearer {token}"}


def call_spec(provider: str, endpoint: str, stream: bool) -> tuple[str, dict[str, Any]]:
    model = MODELS[provider]
    if endpoint == "messages":
        return "/v1/messages", {
            "model": model,
            "max_tokens": 100,
            "stream": stream,
            "messages": [{"role": "user", "content": "hi"}],
        }
    if endpoint == "chat":
        return "/v1/chat/completions", {
            "model": model,
            "stream": stream,
            "messages": [{"role": "user", "content": "hi"}],
        }
    if endpoint == "responses":
        return "/v1/responses", {"model": model, "stream": stream, "input": "hi"}
    verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/v1beta/models/{model}:{verb}", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    url: str | None, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Reply:
    assert url is not None, "the gateway serves no TCP port"
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return Reply(resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()})
    finally:
        conn.close()


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


@pytest.fixture
def make_gateway(store: LocalStore) -> Iterator[Any]:
    started: list[tuple[Gateway, Upstream]] = []

    def make(
        provider: str,
        *,
        limits: Limits | None = None,
        exhausted: list[str] | None = None,
        tracing: Tracing | None = None,
        **kw: Any,
    ) -> tuple[Gateway, Upstream]:
        upstream = Upstream(provider).start()
        cfg = GatewayConfig(
            provider=provider,
            token=new_run_token(),
            base_url=upstream.base_url,
            model=MODELS[provider],
            run_prefix=PREFIX,
            port=0,
            limits=limits or Limits(),
            **kw,
        )
        gw = Gateway(
            cfg,
            upstream_key=UPSTREAM_KEY,
            store=store,
            tracing=tracing,
            on_exhausted=None if exhausted is None else exhausted.append,
        )
        gw.start()
        started.append((gw, upstream))
        return gw, upstream

    yield make
    for gw, upstream in started:
        gw.stop(5)
        upstream.stop()


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def store_bytes(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in root.rglob("*"):
        if path.is_file():
            yield path, path.read_bytes()


# --- metering ------------------------------------------------------------------------------------
CASES = [
    ("anthropic", "messages", False),
    ("anthropic", "messages", True),
    ("openai", "chat", False),
    ("openai", "chat", True),
    ("openai", "responses", False),
    ("openai", "responses", True),
    ("openai-compatible", "chat", True),
    ("openai-compatible", "responses", False),
    ("gemini", "generate", False),
    ("gemini", "generate", True),
]


@pytest.mark.parametrize(("provider", "endpoint", "stream"), CASES)
def test_metered_tokens_equal_the_usage_the_upstream_sent(
    make_gateway: Any, store: LocalStore, provider: str, endpoint: str, stream: bool
) -> None:
    gw, upstream = make_gateway(provider)
    path, body = call_spec(provider, endpoint, stream)
    for _ in range(3):
        reply = request(gw.url, "POST", path, body, auth_headers(provider, gw.config.token))
        assert reply.status == 200, reply.body
        if stream:
            assert reply.headers["content-type"].startswith("text/event-stream")
            assert b"hel" in reply.body and b"lo" in reply.body
        else:
            assert b"hello" in reply.body
    s = gw.summary()
    assert (s.input_tokens, s.output_tokens, s.cached_tokens, s.cache_write_tokens) == (
        upstream.sent.input,
        upstream.sent.output,
        upstream.sent.cached,
        upstream.sent.cache_write,
    )
    assert upstream.sent.input > 0 and s.total_tokens == upstream.sent.input + upstream.sent.output
    assert s.calls == 3 and s.errors == 0 and s.usage_missing_calls == 0
    # the upstream got the real key in its provider's header, never the run's token
    for req in upstream.requests:
        assert gw.config.token not in json.dumps(req)
        if provider == "openai" and endpoint == "chat" and stream:
            assert req["body"]["stream_options"] == {"include_usage": True}
    # the records: per call, and the running summary in the store (complete once it stopped)
    assert gw.stop(5)
    stored = load_record(store, LAYOUT.driver_summary, DriverSummary)
    assert stored.total_tokens == s.total_tokens and stored.calls == 3
    [(model, per)] = stored.per_model.items()
    assert per.calls == 3 and per.input_tokens == s.input_tokens and model.startswith(MODELS[provider])
    rec = stored_call(store, 1)
    assert rec.status == 200 and rec.stream is stream and rec.request_model == MODELS[provider]
    assert rec.request_headers and set(rec.request_headers.values()) & {"[redacted]"}
    assert rec.latency_s is not None and rec.first_byte_s is not None and rec.first_byte_s <= rec.latency_s
    text = json.dumps(rec.response_body)
    assert "hello" in text  # a stream is reassembled into the final message
    if stream:
        assert rec.stream_events and rec.stream_events >= 2
    priced = provider != "openai-compatible"  # "qwen-local" has no price: cost 0, flagged
    assert rec.priced is priced and (s.cost_usd > 0) is priced
    assert (stored.unpriced_models == []) is priced


def test_usage_missing_from_an_answer_is_flagged(make_gateway: Any) -> None:
    gw, upstream = make_gateway("openai")
    body = {"model": "gpt-5-mini", "stream": True, "stream_options": {"include_usage": False}, "messages": []}
    # the client asked for no usage chunk explicitly: the gateway still asks for it
    reply = request(gw.url, "POST", "/v1/chat/completions", body, auth_headers("openai", gw.config.token))
    assert reply.status == 200 and gw.summary().usage_missing_calls == 0
    assert upstream.requests[-1]["body"]["stream_options"] == {"include_usage": True}


# --- auth ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("provider", "path", "shape"),
    [
        (
            "anthropic",
            "/v1/messages",
            lambda b: b["type"] == "error" and b["error"]["type"] == "authentication_error",
        ),
        ("openai", "/v1/chat/completions", lambda b: b["error"]["code"] == "invalid_api_key"),
        ("openai", "/v1/responses", lambda b: b["error"]["type"] == "invalid_request_error"),
        (
            "gemini",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            lambda b: b["error"]["status"] == "UNAUTHENTICATED",
        ),
    ],
)
@pytest.mark.parametrize("presented", ["none", "wrong", "upstream-key"])
def test_a_wrong_or_missing_token_gets_401_in_the_providers_shape(
    make_gateway: Any, provider: str, path: str, shape: Any, presented: str
) -> None:
    gw, upstream = make_gateway(provider)
    token = {"none": None, "wrong": new_run_token(), "upstream-key": UPSTREAM_KEY}[presented]
    headers = auth_headers(provider, token) if token else {}
    reply = request(gw.url, "POST", path, {"model": MODELS[provider]}, headers)
    assert reply.status == 401 and shape(reply.json())
    assert upstream.requests == []  # nothing reached the upstream
    assert gw.summary().calls == 1 and gw.summary().total_tokens == 0


def test_the_token_is_accepted_wherever_a_client_puts_its_key(make_gateway: Any) -> None:
    gw, upstream = make_gateway("gemini")
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    body: dict[str, Any] = {"contents": []}
    assert request(gw.url, "POST", f"{path}?key={gw.config.token}", body).status == 200
    assert request(gw.url, "POST", path, body, {"Authorization": f"Bearer {gw.config.token}"}).status == 200
    assert all("key=" not in r["path"] for r in upstream.requests)  # the token is not forwarded
    gw2, _ = make_gateway("anthropic")
    ok = request(
        gw2.url,
        "POST",
        "/v1/messages",
        {"model": "claude-sonnet-4-5"},
        {"Authorization": f"Bearer {gw2.config.token}"},
    )
    assert ok.status == 200


def test_unknown_endpoint_and_unreachable_upstream(make_gateway: Any) -> None:
    gw, upstream = make_gateway("openai")
    headers = auth_headers("openai", gw.config.token)
    reply = request(gw.url, "POST", "/v1/batches", {}, headers)
    assert reply.status == 404 and "not served by a2rl's driver gateway" in reply.json()["error"]["message"]
    upstream.stop()
    reply = request(gw.url, "POST", "/v1/chat/completions", {"model": "gpt-5-mini"}, headers)
    assert reply.status == 502 and reply.json()["error"]["code"] == "upstream_unreachable"
    assert gw.summary().errors == 2
    upstream.start()  # the fixture stops it again


@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_a_gzipped_request_is_read_and_forwarded(make_gateway: Any, store: LocalStore, endpoint: str) -> None:
    gw, upstream = make_gateway("openai")
    path, body = call_spec("openai", endpoint, True)
    host, port = gw.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        **auth_headers("openai", gw.config.token),
    }
    conn.request("POST", path, body=gzip.compress(json.dumps(body).encode()), headers=headers)
    assert conn.getresponse().read()
    conn.close()
    assert gw.stop(5)
    assert upstream.requests[0]["body"]["model"] == "gpt-5-mini"
    if endpoint == "chat":  # rewritten (include_usage): sent as plain JSON
        assert "content-encoding" not in upstream.requests[0]["headers"]
    rec = stored_call(store, 1)
    assert rec.request_body["model"] == "gpt-5-mini" and rec.stream
    assert gw.summary().output_tokens == upstream.sent.output > 0


def test_a_fault_of_the_gateway_answers_500_in_the_providers_shape(
    make_gateway: Any, store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import a2rl_gateway.server

    gw, _ = make_gateway("anthropic")
    path, body = call_spec("anthropic", "messages", False)
    headers = auth_headers("anthropic", gw.config.token)

    def boom(*args: Any) -> Any:
        raise RuntimeError("boom")

    with monkeypatch.context() as m:
        m.setattr(a2rl_gateway.server, "from_json", boom)
        reply = request(gw.url, "POST", path, body, headers)
    assert reply.status == 500 and reply.json()["error"] == {
        "type": "api_error",
        "message": "internal error in a2rl's driver gateway: boom",
    }
    assert request(gw.url, "POST", path, body, headers).status == 200  # it goes on serving
    assert gw.stop(5)
    assert stored_call(store, 1).refused == "internal"
    assert gw.summary().calls == 2


def test_upstream_errors_pass_through_unchanged(make_gateway: Any, store: LocalStore) -> None:
    gw, _ = make_gateway("anthropic")
    body = {"model": "overloaded", "max_tokens": 5, "messages": [], "stream": True}
    reply = request(gw.url, "POST", "/v1/messages", body, auth_headers("anthropic", gw.config.token))
    assert reply.status == 529 and reply.headers["retry-after"] == "7"
    assert reply.json()["error"]["type"] == "overloaded_error"
    assert gw.stop(5)
    rec = stored_call(store, 1)
    assert rec.status == 529 and rec.refused is None and rec.usage is None and not rec.usage_missing
    assert gw.summary().errors == 1 and gw.summary().total_tokens == 0


def test_a_client_hanging_up_mid_stream_is_still_metered_in_full(make_gateway: Any) -> None:
    gw, upstream = make_gateway("anthropic")
    upstream.hold = threading.Event()
    path, body = call_spec("anthropic", "messages", True)
    host, port = gw.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json", **auth_headers("anthropic", gw.config.token)}
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    assert resp.read1(65536)
    conn.close()  # the agent goes away; the upstream goes on generating (and billing)
    upstream.release.set()
    wait_for(lambda: gw.summary().calls == 1)
    s = gw.summary()
    assert (s.input_tokens, s.output_tokens) == (upstream.sent.input, upstream.sent.output)


def test_a_zero_budget_refuses_the_first_call(make_gateway: Any) -> None:
    exhausted: list[str] = []
    gw, upstream = make_gateway("openai", limits=Limits(tokens=0), exhausted=exhausted)
    assert gw.exhausted.is_set() and exhausted == [
        "the run's driver budget (0 tokens) is exhausted: 0 tokens used"
    ]
    path, body = call_spec("openai", "chat", False)
    assert request(gw.url, "POST", path, body, auth_headers("openai", gw.config.token)).status == 403
    assert upstream.requests == []


# --- budgets -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("provider", "endpoint", "shape"),
    [
        (
            "anthropic",
            "messages",
            lambda b: b["type"] == "error" and b["error"]["type"] == "permission_error",
        ),
        ("openai", "chat", lambda b: b["error"]["code"] == "driver_budget_exhausted"),
        ("openai", "responses", lambda b: b["error"]["type"] == "insufficient_quota"),
        (
            "gemini",
            "generate",
            lambda b: b["error"]["code"] == 403 and b["error"]["status"] == "PERMISSION_DENIED",
        ),
    ],
)
def test_an_exhausted_token_budget_answers_the_providers_error_and_flags_it(
    make_gateway: Any, store: LocalStore, provider: str, endpoint: str, shape: Any
) -> None:
    exhausted: list[str] = []
    gw, upstream = make_gateway(provider, limits=Limits(tokens=100), exhausted=exhausted)
    path, body = call_spec(provider, endpoint, True)
    headers = auth_headers(provider, gw.config.token)
    first = request(gw.url, "POST", path, body, headers)
    assert first.status == 200  # the call that crosses the budget is answered in full
    assert gw.exhausted.is_set() and not gw.refused.is_set()
    wait_for(lambda: exhausted)  # the callback runs once the call's record is written
    assert exhausted == [
        f"the run's driver budget (100 tokens) is exhausted: {gw.summary().total_tokens} tokens used"
    ]
    for _ in range(2):
        reply = request(gw.url, "POST", path, body, headers)
        assert reply.status == 403 and shape(reply.json())
        assert "the run's driver budget (100 tokens) is exhausted" in json.dumps(reply.json())
    assert len(upstream.requests) == 1  # refused calls never reach the upstream
    assert gw.stop(5) and gw.refused.is_set() and len(exhausted) == 1
    stored = load_record(store, LAYOUT.driver_summary, DriverSummary)
    assert stored.budget.exhausted and stored.budget.refused_calls == 2 and stored.budget.driver_tokens == 100
    assert stored.budget.reason == exhausted[0] and stored.budget.first_refused_at is not None
    assert stored_call(store, 3).refused == "budget_exhausted"
    assert c.REASON_DRIVER_BUDGET_EXHAUSTED == "DriverBudgetExhausted"


def test_an_exhausted_cost_budget_refuses_too(make_gateway: Any) -> None:
    gw, _ = make_gateway("openai", limits=Limits(cost_usd=0.00001))
    path, body = call_spec("openai", "responses", False)
    headers = auth_headers("openai", gw.config.token)
    assert request(gw.url, "POST", path, body, headers).status == 200
    assert gw.exhausted.is_set()
    reply = request(gw.url, "POST", path, body, headers)
    assert (
        reply.status == 403
        and "the run's driver budget ($1e-05) is exhausted" in reply.json()["error"]["message"]
    )


# --- streaming latency ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("provider", "endpoint"), [("anthropic", "messages"), ("openai", "chat"), ("gemini", "generate")]
)
def test_a_stream_reaches_the_client_before_the_upstream_finished(
    make_gateway: Any, provider: str, endpoint: str
) -> None:
    gw, upstream = make_gateway(provider)
    upstream.hold = threading.Event()
    path, body = call_spec(provider, endpoint, True)
    host, port = gw.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(
        "POST",
        path,
        body=json.dumps(body),
        headers={"Content-Type": "application/json", **auth_headers(provider, gw.config.token)},
    )
    resp = conn.getresponse()
    assert resp.status == 200
    first = resp.read1(65536)  # the upstream is holding the rest until we release it
    assert first.startswith((b"event:", b"data:")) and not upstream.finished.is_set()
    upstream.release.set()
    rest = resp.read()
    conn.close()
    assert upstream.finished.is_set() and rest
    wait_for(lambda: gw.summary().calls == 1)
    assert gw.summary().output_tokens == upstream.sent.output


# --- secrets -------------------------------------------------------------------------------------
def test_the_upstream_key_and_the_token_are_nowhere_in_the_store(
    make_gateway: Any, store: LocalStore, tmp_path: Path
) -> None:
    gw, _ = make_gateway("anthropic")
    token = gw.config.token
    headers = auth_headers("anthropic", token)
    # the agent pastes both into a prompt; the upstream echoes the key in a header
    body = {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": f"{token} {UPSTREAM_KEY}"}],
        "stream": True,
    }
    assert request(gw.url, "POST", "/v1/messages", body, headers).status == 200
    assert request(gw.url, "POST", f"/v1/messages?key={token}", {**body, "stream": False}, {}).status == 200
    assert request(gw.url, "POST", "/v1/messages", body, {"x-api-key": UPSTREAM_KEY}).status == 401
    gw.stop(5)
    assert [r.index for r in iter_driver_calls(store, LAYOUT)] == [1, 2, 3]
    files = list(store_bytes(tmp_path / "store"))
    assert len(files) >= 2  # the summary, the records
    for path, data in files:
        assert UPSTREAM_KEY.encode() not in data, path
        assert token.encode() not in data, path


def test_credentials_an_agent_printed_are_scrubbed_from_the_call_record(
    make_gateway: Any, store: LocalStore
) -> None:
    gw, _ = make_gateway("anthropic")
    leaked = "sk-proj-4fQ8zT1mW9xK2bN7vR3cY6hJ0pL5sD8g AKIAIOSFODNN7EXAMPLE tgp_v1_Qm8Zr2Xp4Lw7Tn1Vb5Kc9Hd3"
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": f"$ env\n{leaked}\nok"}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": [tool_result]}],
    }
    assert (
        request(gw.url, "POST", "/v1/messages", body, auth_headers("anthropic", gw.config.token)).status
        == 200
    )
    assert gw.stop(5)
    rec = stored_call(store, 1)
    text = json.dumps(rec.request_body)
    assert "$ env" in text and "ok" in text and text.count("[redacted]") == 3
    for secret in leaked.split():
        assert secret not in text


def test_serving_on_a_unix_socket(make_gateway: Any, tmp_path: Path) -> None:
    sock_path = tmp_path / "gw.sock"
    gw, _ = make_gateway("openai", socket_path=sock_path)
    assert sock_path.is_socket() and oct(sock_path.stat().st_mode & 0o777) == "0o600"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock_path))
    body = json.dumps({"model": "gpt-5-mini", "messages": []}).encode()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {gw.config.token}\r\nContent-Length: {len(body)}\r\n".encode()
        + b"Connection: close\r\n\r\n"
        + body
    )
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    assert data.startswith(b"HTTP/1.1 200") and b"hello" in data
    gw.stop(5)
    assert not sock_path.exists()


AGENT_CLIENT = r"""
import http.client, json, os, sys
port, token, marker = int(sys.argv[1]), sys.argv[2], sys.argv[3]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": True, "messages": []}
conn.request("POST", "/v1/messages", body=json.dumps(body),
             headers={"x-api-key": token, "content-type": "application/json"})
resp = conn.getresponse()
first = resp.read1(65536)
open(marker + ".tmp", "w").write(first.decode())
os.replace(marker + ".tmp", marker)
rest = resp.read()
print(json.dumps({"status": resp.status, "body": (first + rest).decode()}))
"""


def test_through_the_sandbox_relay_a_stream_still_arrives_incrementally(
    make_gateway: Any, tmp_path: Path
) -> None:
    """The agent's loopback port, relayed to the gateway's Unix socket as in the local sandbox."""
    import subprocess
    import sys

    sock_path = tmp_path / "gw.sock"
    gw, upstream = make_gateway("anthropic", socket_path=sock_path)
    upstream.hold = threading.Event()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    marker = tmp_path / "first-chunk"
    argv = [sys.executable, "-m", "a2rl.sandbox_relay", "--listen", f"{port}={sock_path}", "--"]
    agent = [sys.executable, "-c", AGENT_CLIENT, str(port), gw.config.token, str(marker)]
    with subprocess.Popen([*argv, *agent], stdout=subprocess.PIPE, text=True) as proc:
        assert upstream.hold.wait(20)
        wait_for(marker.exists, 20)  # the agent holds the first event; the upstream is still holding
        assert not upstream.finished.is_set() and marker.read_text().startswith("event: message_start")
        upstream.release.set()
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    answer = json.loads(out)
    assert answer["status"] == 200 and "message_stop" in answer["body"]
    wait_for(lambda: gw.summary().calls == 1)
    assert gw.summary().output_tokens == upstream.sent.output


# --- spans ---------------------------------------------------------------------------------------
def test_one_genai_span_per_call(make_gateway: Any, store: LocalStore) -> None:
    tracing = Tracing(c.COMPONENT_GATEWAY, store=store, run_prefix=PREFIX, new_trace=True, environ={})
    gw, upstream = make_gateway("anthropic", tracing=tracing)
    path, body = call_spec("anthropic", "messages", True)
    assert request(gw.url, "POST", path, body, auth_headers("anthropic", gw.config.token)).status == 200
    assert gw.stop(5)  # the call has ended: its span too
    assert tracing.flush()
    spans = [s for s in collect_spans(store, LAYOUT) if s["service"] == "a2rl-gateway"]
    tracing.shutdown()
    [span] = spans
    a = span["attributes"]
    assert span["name"] == "chat claude-sonnet-4-5"
    assert a["gen_ai.system"] == "anthropic" and a["gen_ai.operation.name"] == "chat"
    assert (
        a["gen_ai.request.model"] == "claude-sonnet-4-5"
        and a["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    )
    assert (
        a["gen_ai.usage.input_tokens"] == upstream.sent.input
        and a["gen_ai.usage.output_tokens"] == upstream.sent.output
    )
    assert (
        a["gen_ai.usage.cache_read.input_tokens"] == upstream.sent.cached
        and a["gen_ai.request.max_tokens"] == 100
    )
    assert a["http.response.status_code"] == 200 and a["a2rl.driver.call.index"] == 1


# --- the child process ---------------------------------------------------------------------------
def test_gateway_process_holds_the_key_in_neither_environment_nor_argv(
    store: LocalStore, tmp_path: Path
) -> None:
    upstream = Upstream("anthropic").start()
    cfg = GatewayConfig(
        provider="anthropic",
        token=new_run_token(),
        base_url=upstream.base_url,
        model="claude-sonnet-4-5",
        store_uri=(tmp_path / "store").as_uri(),
        run_prefix=PREFIX,
        port=0,
        socket_path=tmp_path / "gw.sock",
        limits=Limits(tokens=100),
    )
    reasons: list[str] = []
    # the runner's environment holds the key (the user's shell); the gateway's must not
    base_env = {
        **os.environ,
        "ANTHROPIC_API_KEY": UPSTREAM_KEY,
        "MY_DRIVER_KEY": UPSTREAM_KEY,
        "OTEL_SDK_DISABLED": "true",
    }
    proc = GatewayProcess(
        cfg,
        tmp_path / "gateway.log",
        upstream_key=UPSTREAM_KEY,
        base_env=base_env,
        strip_env=["MY_DRIVER_KEY"],
        on_exhausted=reasons.append,
    )
    try:
        proc.start()
        assert proc.url is not None and proc.pid is not None and proc.socket_path == str(tmp_path / "gw.sock")
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert UPSTREAM_KEY.encode() not in environ and UPSTREAM_KEY.encode() not in cmdline
        assert b"A2RL_GATEWAY_KEY_SOURCE=stdin" in environ
        path, body = call_spec("anthropic", "messages", False)
        headers = auth_headers("anthropic", cfg.token)
        assert request(proc.url, "POST", path, body, headers).status == 200  # the key reached the upstream
        assert upstream.requests[-1]["headers"]["x-api-key"] == UPSTREAM_KEY
        assert proc.exhausted.wait(10) and reasons and "100 tokens" in reasons[0]
        assert request(proc.url, "POST", path, body, headers).status == 403
        assert proc.refused.wait(10)
    finally:
        code = proc.stop(30)
        upstream.stop()
    assert code == 0
    stored = load_record(store, LAYOUT.driver_summary, DriverSummary)
    assert stored.calls == 2 and stored.budget.exhausted and stored.budget.refused_calls == 1
    assert UPSTREAM_KEY not in (tmp_path / "gateway.log").read_text()
    assert "a2rl-gateway listening on http://127.0.0.1:" in (tmp_path / "gateway.log").read_text()


def test_gateway_process_refuses_an_environment_holding_the_key(tmp_path: Path) -> None:
    cfg = GatewayConfig(provider="openai", token=new_run_token(), port=0)
    env = {"PATH": os.environ.get("PATH", ""), "SOME_OTHER_NAME": UPSTREAM_KEY}
    with pytest.raises(
        A2rlError, match=r"the upstream key is in the gateway's environment \(SOME_OTHER_NAME\)"
    ):
        GatewayProcess(cfg, tmp_path / "g.log", upstream_key=UPSTREAM_KEY, base_env=env)
    # stripped by name: fine
    GatewayProcess(
        cfg, tmp_path / "g.log", upstream_key=UPSTREAM_KEY, base_env=env, strip_env=["SOME_OTHER_NAME"]
    )


def test_gateway_process_environment_carries_the_current_trace_context(store: LocalStore) -> None:
    from a2rl_gateway import gateway_env

    from a2rl.tracing import installed

    cfg = GatewayConfig(provider="openai", token=new_run_token(), port=0)
    base = {
        "PATH": "/bin",
        c.ENV_TRACEPARENT: "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        "OPENAI_API_KEY": "x",
    }
    assert gateway_env(cfg, base)[c.ENV_TRACEPARENT] == base[c.ENV_TRACEPARENT]  # no span here: kept
    assert "OPENAI_API_KEY" not in gateway_env(cfg, base)
    tracing = Tracing(c.COMPONENT_RUNNER, store=store, run_prefix=PREFIX, new_trace=True, environ={})
    with installed(tracing), tracing.span("agent") as sp:
        ctx = sp.get_span_context()
        env = gateway_env(cfg, base)
    tracing.shutdown()
    assert env[c.ENV_TRACEPARENT].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")


def test_gateway_serve_without_configuration_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from a2rl_cli import main

    for name in (c.ENV_GATEWAY_PROVIDER, c.ENV_GATEWAY_TOKEN):
        monkeypatch.delenv(name, raising=False)
    assert main(["gateway", "serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("a2rl: error: gateway configuration incomplete") and err.count("\n") == 1
