"""The eval box reaches the evaluation's endpoints and nothing else (`a2rl.egress_proxy`).

The servers are real ones on the host's loopback: a judge (`JudgeServer`), a search API that
echoes (reached over CONNECT, as https is), and one the evaluation must not reach. The process in
the box is an attacker's: it tries the forbidden server directly, through the proxy by CONNECT and
by an absolute-form request, the cloud metadata address, an external name and the host's own
address, and the proxy with requests it must refuse.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.sandbox import eval_endpoints, submission_box

from a2rl.constants import ENV_EVAL_SANDBOX, ENV_JUDGE_BASE_URL, ENV_S3_ENDPOINT, ENV_SEARCH_URL
from a2rl.egress_proxy import EgressProxy, RefusedError, egress_addresses, endpoint_address, route
from a2rl.eval_sandbox import EvalBox, find_bwrap
from a2rl.sandbox_relay import listen as relay_listen
from a2rl.sandbox_relay import serve as relay_serve
from a2rl.store.local import LocalStore
from a2rl.store.s3 import http_client
from tests.support.judge_server import JudgeServer
from tests.support.recorder_support import PREFIX

NEEDS_BWRAP = pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap cannot create namespaces here")


class _Counting(ThreadingHTTPServer):
    """A plain HTTP server that names itself in every answer and counts what it receives."""

    def __init__(self, name: str, host: str = "127.0.0.1") -> None:
        self.name = name
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keeps connections open unless asked not to

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.seen.append((self.path, self.headers.get("Host")))
                body = f"{outer.name} {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__((host, 0), Handler)
        self.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def serving() -> Iterator[Any]:
    started: list[ThreadingHTTPServer] = []

    def start(server: ThreadingHTTPServer) -> ThreadingHTTPServer:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def _echo_server() -> socket.socket:
    """A TCP server that echoes: the far end of a CONNECT tunnel (what a TLS server would be)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server


def _host_address() -> str | None:
    """This machine's address on a non-loopback interface (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


_ATTACKER = r"""
import json, os, socket, sys, urllib.error, urllib.request
judge, search_port, other_port, host_ip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
proxy = ("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1]))
out = {"interfaces": [name for _, name in socket.if_nameindex()]}

def attempt(fn):
    try:
        return fn()
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}: {exc.read().decode().strip()}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

def raw(request, then=b""):
    with socket.create_connection(proxy, timeout=10) as s:
        s.sendall(request)
        reply = s.recv(4096)
        if then and reply.startswith(b"HTTP/1.1 200"):
            s.sendall(then)
            reply += s.recv(4096)
        return reply.decode(errors="replace")

def connect(host, port):
    with socket.create_connection((host, port), timeout=3):
        return "connected"

def get(url):
    return urllib.request.urlopen(url, timeout=10).read().decode()

body = {"model": "m", "messages": [{"role": "user", "content": "Gold answer: 7\nPredicted answer: 7"}]}
headers = {"Authorization": "Bearer test-judge-key", "Content-Type": "application/json"}
req = urllib.request.Request(judge + "/chat/completions", data=json.dumps(body).encode(), headers=headers)
out["judge"] = attempt(lambda: json.load(urllib.request.urlopen(req, timeout=10))["choices"][0]["message"])
out["search"] = attempt(lambda: raw(f"CONNECT 127.0.0.1:{search_port} HTTP/1.1\r\n\r\n".encode(), b"ping"))
other = f"127.0.0.1:{other_port}"
out["other_direct"] = attempt(lambda: connect("127.0.0.1", other_port))
out["other_urllib"] = attempt(lambda: get(f"http://{other}/"))
out["other_connect"] = attempt(lambda: raw(f"CONNECT {other} HTTP/1.1\r\n\r\n".encode()))
out["other_absolute"] = attempt(lambda: raw(f"GET http://{other}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()))
judge_port = judge.split(":")[2].split("/")[0]
out["judge_by_other_name"] = attempt(lambda: raw(f"CONNECT localhost:{judge_port} HTTP/1.1\r\n\r\n".encode()))
out["metadata_urllib"] = attempt(lambda: get("http://169.254.169.254/latest/meta-data/"))
out["metadata_direct"] = attempt(lambda: connect("169.254.169.254", 80))
out["external_urllib"] = attempt(lambda: get("https://example.com/"))
out["external_direct"] = attempt(lambda: connect("example.com", 443))
out["host_direct"] = attempt(lambda: connect(host_ip, other_port)) if host_ip else "no host address"
out["garbage"] = attempt(lambda: raw(b"HELLO\r\n\r\n"))
out["https_absolute"] = attempt(lambda: raw(f"GET https://{other}/ HTTP/1.1\r\n\r\n".encode()))
out["huge_head"] = attempt(lambda: raw(b"GET http://x/ HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n"))
print(json.dumps(out))
"""


@NEEDS_BWRAP
def test_the_eval_box_reaches_its_endpoints_and_nothing_else(tmp_path: Path, serving: Any) -> None:
    other = serving(_Counting("other", host="0.0.0.0"))  # the host's every address
    echo = _echo_server()
    echo_port = echo.getsockname()[1]
    host_ip = _host_address()
    if host_ip:  # reachable from the host itself: the box's failure below is the box's doing
        with socket.create_connection((host_ip, other.port), timeout=3):
            pass
    store = LocalStore(tmp_path / "store")
    with JudgeServer() as judge:
        search_url = f"https://127.0.0.1:{echo_port}/search"
        env = {**os.environ, **judge.env(), ENV_SEARCH_URL: search_url}
        try:
            heldout = tmp_path / "heldout"
            heldout.mkdir()
            box = submission_box(
                1, task="deepsearchqa", store_uri=store.uri, run_prefix=PREFIX, heldout=heldout, env=env
            )
            with box:
                described = box.describe()
                args = [judge.base_url, str(echo_port), str(other.port), host_ip or ""]
                done = subprocess.run(
                    [*box.prefix, sys.executable, "-c", _ATTACKER, *args],
                    env={**env, **box.env},
                    preexec_fn=box.preexec,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
        finally:
            echo.close()
        judged = judge.requests
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    judge_at = f"127.0.0.1:{judge.base_url.split(':')[2].split('/')[0]}"
    assert f"network: only {judge_at}, 127.0.0.1:{echo_port} (through a proxy)" in described
    assert seen["interfaces"] == ["lo"]
    # The endpoints: the judge over plain HTTP (absolute form, passed on in origin form), the
    # search API through a CONNECT tunnel.
    assert seen["judge"] == {"role": "assistant", "content": "correct"} and judged == 1
    assert seen["search"] == "HTTP/1.1 200 Connection established\r\n\r\nping"
    # Everything else.
    refused = f"HTTP 403: a2rl eval egress: 127.0.0.1:{other.port} is not an endpoint of this evaluation"
    assert seen["other_direct"].startswith("ConnectionRefusedError"), seen["other_direct"]
    assert seen["other_urllib"] == refused
    for how in ("other_connect", "other_absolute"):
        assert seen[how].startswith("HTTP/1.1 403 Forbidden\r\n"), seen[how]
        assert seen[how].endswith(f"127.0.0.1:{other.port} is not an endpoint of this evaluation\n")
    assert seen["judge_by_other_name"].startswith("HTTP/1.1 403 Forbidden\r\n")  # allowed as written only
    assert seen["metadata_urllib"] == (
        "HTTP 403: a2rl eval egress: 169.254.169.254:80 is not an endpoint of this evaluation"
    )
    assert seen["metadata_direct"].startswith("OSError: [Errno 101]"), seen["metadata_direct"]  # unreachable
    assert seen["external_urllib"].startswith("URLError: <urlopen error Tunnel connection failed: 403")
    assert seen["external_direct"].startswith(("gaierror", "OSError", "ConnectionRefusedError"))
    if host_ip:
        assert seen["host_direct"].startswith("OSError: [Errno 101]"), seen["host_direct"]
    assert seen["garbage"].startswith("HTTP/1.1 400 Bad Request\r\n")
    assert seen["https_absolute"].startswith("HTTP/1.1 400 Bad Request\r\n")
    assert seen["huge_head"].startswith("HTTP/1.1 400 Bad Request\r\n")
    assert other.seen == []


@NEEDS_BWRAP
def test_a_box_without_endpoints_has_no_proxy_and_without_bubblewrap_the_hosts_network(
    tmp_path: Path,
) -> None:
    with EvalBox("no-endpoints") as box:
        assert box.egress is None and "HTTP_PROXY" not in box.env
        assert "network: loopback only;" in box.describe()
    env = {**os.environ, ENV_EVAL_SANDBOX: "none"}
    with EvalBox("no-sandbox", endpoints=["http://127.0.0.1:1/v1"], env=env) as box:
        assert box.egress is None and box.prefix == [] and "HTTP_PROXY" not in box.env
        assert "network: the host's network;" in box.describe()


def test_the_endpoints_are_the_tasks_urls_and_a_remote_stores(tmp_path: Path) -> None:
    env = {
        ENV_JUDGE_BASE_URL: " https://judge.example/v1 ",
        ENV_SEARCH_URL: "http://10.0.0.5:8080/search",
        ENV_S3_ENDPOINT: "minio.internal:9000",
    }
    local = str(tmp_path / "store")
    assert eval_endpoints("arith", local, env) == []
    assert eval_endpoints("alpacaeval", local, env) == ["https://judge.example/v1"]
    assert eval_endpoints("deepsearchqa", "s3://bucket/root", env) == [
        "https://judge.example/v1", "http://10.0.0.5:8080/search", "minio.internal:9000",
    ]  # fmt: skip
    assert eval_endpoints("arith", "s3://bucket/root", {}) == []
    urls = [*eval_endpoints("deepsearchqa", "s3://b", env), "ftp://x", "http://[::1]:9/"]
    assert egress_addresses(urls) == (
        ("judge.example", 443), ("10.0.0.5", 8080), ("minio.internal", 9000), ("::1", 9),
    )  # fmt: skip
    assert endpoint_address("http://Judge.Example") == ("judge.example", 80)
    assert endpoint_address("http://host:99999/") is None


def test_the_proxy_routes_connect_and_absolute_requests_only() -> None:
    connect = route(b"CONNECT judge.example:443 HTTP/1.1\r\nHost: judge.example:443")
    assert connect == (("judge.example", 443), None)
    address, first = route(
        b"POST http://127.0.0.1:9000/b/k?uploads HTTP/1.1\r\nHost: evil:1\r\nProxy-Authorization: x\r\n"
        b"Connection: keep-alive\r\nContent-Length: 2"
    )
    assert address == ("127.0.0.1", 9000)
    assert first == (
        b"POST /b/k?uploads HTTP/1.1\r\nHost: 127.0.0.1:9000\r\n"
        b"Content-Length: 2\r\nConnection: close\r\n\r\n"
    )
    for bad in (
        b"GET / HTTP/1.1",  # origin form: no destination
        b"GET https://judge.example/ HTTP/1.1",  # TLS is the client's: CONNECT
        b"CONNECT judge.example HTTP/1.1",  # no port
        b"CONNECT judge.example:443/x HTTP/1.1",
        b"GET http://x/ HTTP/1.1\r\nA: b\r\n c",  # folded header
        b"GET  http://x/ HTTP/1.1",
    ):
        with pytest.raises(RefusedError) as refused:
            route(bad)
        assert refused.value.status == 400


@pytest.fixture
def relayed(tmp_path: Path) -> Iterator[Any]:
    """An `EgressProxy` for the given endpoints, reached at a loopback port (as through the box's relay)."""
    proxies: list[EgressProxy] = []

    def make(urls: list[str], **kwargs: Any) -> tuple[EgressProxy, int]:
        proxy = EgressProxy(egress_addresses(urls), tmp_path / f"p{len(proxies)}.sock", **kwargs)
        proxies.append(proxy)
        listener = relay_listen(0)
        threading.Thread(target=relay_serve, args=(listener, str(proxy.path)), daemon=True).start()
        return proxy, listener.getsockname()[1]

    yield make
    for proxy in proxies:
        proxy.close()


def test_a_client_that_keeps_its_proxy_connection_still_reaches_each_origin(
    relayed: Any, serving: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """urllib3's ProxyManager (the S3 store's client in the box) shares one pool of proxy
    connections among all plain-HTTP origins: each request must still reach its own origin."""
    one, two = serving(_Counting("one")), serving(_Counting("two"))
    _, port = relayed([f"http://127.0.0.1:{one.port}", f"http://127.0.0.1:{two.port}"])
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setenv("no_proxy", "")
    pool = http_client(f"127.0.0.1:{one.port}", False)
    assert type(pool).__name__ == "ProxyManager"
    answers = [
        pool.request("GET", f"http://127.0.0.1:{server.port}/{n}").data.decode()
        for n in range(3)
        for server in (one, two)
    ]
    assert answers == [f"{name} /{n}" for n in range(3) for name in ("one", "two")]
    assert one.seen == [(f"/{n}", f"127.0.0.1:{one.port}") for n in range(3)]
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert type(http_client(f"127.0.0.1:{one.port}", False)).__name__ == "PoolManager"


def test_the_proxy_is_bounded_and_closes_promptly(relayed: Any) -> None:
    echo = _echo_server()
    try:
        endpoint = f"https://127.0.0.1:{echo.getsockname()[1]}"
        proxy, port = relayed([endpoint], max_connections=1, head_timeout_s=1)
        tunnel = socket.create_connection(("127.0.0.1", port), timeout=10)
        tunnel.sendall(f"CONNECT 127.0.0.1:{echo.getsockname()[1]} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.recv(1024) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as second:
            assert second.recv(1024).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        tunnel.sendall(b"still there")
        assert tunnel.recv(1024) == b"still there"
        started = time.monotonic()
        proxy.close()
        assert tunnel.recv(1024) == b""  # cut
        assert time.monotonic() - started < 2
        assert not proxy.path.exists()
        tunnel.close()
    finally:
        echo.close()


def test_a_client_that_sends_no_head_is_dropped(relayed: Any) -> None:
    _, port = relayed(["http://127.0.0.1:1"], head_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
        idle.sendall(b"GET http://127.0.0.1:1/ HTTP/1.1\r\n")  # and nothing more
        started = time.monotonic()
        assert idle.recv(1024) == b""
        assert time.monotonic() - started < 5
