"""The grading API over real HTTP: endpoints, JSON errors, drain on stop, SIGTERM on the CLI."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2rl_recorder.app import serve
from a2rl_recorder.drain import CANCEL_WAIT_S, DrainOutcome

from a2rl.errors import A2rlError
from a2rl.launch import a2rl_argv
from a2rl.store.local import LocalStore
from tests.support.recorder_support import (
    LAYOUT,
    PREFIX,
    StoreBackedDispatcher,
    make_config,
    make_model,
    make_workspace,
    write_baseline,
)


def call(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Running:
    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        self.ws = make_workspace(tmp_path)
        self.store = LocalStore(tmp_path / "store")
        self.dispatcher = StoreBackedDispatcher(self.store)
        self.config = make_config(self.ws, **overrides)
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.port = 0
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def on_ready(port: int) -> None:
            self.port = port
            self.ready.set()

        self.exit_code = serve(
            self.config, store=self.store, dispatcher=self.dispatcher, stop=self.stop, on_ready=on_ready
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def submit(self, path: str) -> tuple[int, Any]:
        return call(f"{self.url}/submit", "POST", json.dumps({"model_path": path}).encode())


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    r = Running(tmp_path)
    r.thread.start()
    assert r.ready.wait(10)
    yield r
    r.stop.set()
    r.thread.join(30)


def test_health_time_and_submissions(running: Running) -> None:
    status, health = call(f"{running.url}/health")
    assert status == 200 and health["status"] == "ok" and health["task"] == "arith"
    assert health["accepting_submissions"] is True
    status, t = call(f"{running.url}/time")
    assert status == 200
    assert {"start_time", "timeout_s", "elapsed", "remaining", "deadline"} <= set(t)
    assert t["timeout_s"] == 3600.0 and 3590 < t["remaining"] <= 3600 and t["elapsed"] >= 0
    assert t["deadline"].endswith("Z")
    time.sleep(0.05)
    assert call(f"{running.url}/time")[1]["remaining"] < t["remaining"]
    assert call(f"{running.url}/submissions") == (200, [])


def test_submit_over_http(running: Running) -> None:
    write_baseline(running.store, 2.0)
    make_model(running.ws / "output" / "v1", score=30.0)
    status, reply = running.submit("output/v1")
    assert status == 200
    assert reply["submission_id"] == 1 and reply["score"] == 30.0 and reply["improvement"] == 28.0
    status, listing = call(f"{running.url}/submissions")
    assert status == 200 and len(listing) == 1
    entry = listing[0]
    assert set(entry) == {"submission_id", "submitted_at", "score", "error", "model_digest", "code_revision"}
    assert entry["score"] == 30.0


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "text"),
    [
        ("POST", "/submit", b"{not json", 400, "must be JSON"),
        ("POST", "/submit", b"", 400, "must be JSON"),
        ("POST", "/submit", b"{}", 400, "Missing model_path"),
        ("GET", "/submit", None, 405, "use POST"),
        ("POST", "/health", b"{}", 405, "use GET"),
        ("POST", "/set_baseline", b'{"score": 100}', 404, "unknown endpoint"),
        ("GET", "/nope", None, 404, "unknown endpoint"),
    ],
)
def test_json_errors(
    running: Running, method: str, path: str, body: bytes | None, status: int, text: str
) -> None:
    got_status, reply = call(f"{running.url}{path}", method, body)
    assert got_status == status and text in reply["error"]
    assert list(running.store.list(LAYOUT.submissions)) == []


def test_stop_drains_the_evaluation_in_flight(tmp_path: Path) -> None:
    r = Running(tmp_path)
    r.dispatcher.release.clear()  # the first evaluation blocks until released
    r.thread.start()
    assert r.ready.wait(10)
    make_model(r.ws / "output" / "v1", score=7.0)
    first: list[tuple[int, Any]] = []
    t = threading.Thread(target=lambda: first.append(r.submit("output/v1")))
    t.start()
    assert r.dispatcher.started.wait(10)
    (r.ws / "code" / "train.py").write_text("edited during the drain\n")
    r.stop.set()  # what SIGTERM does
    time.sleep(0.2)
    status, reply = r.submit("output/v1")
    assert status == 503 and "submissions are closed" in reply["error"]
    assert call(f"{r.url}/health")[1]["accepting_submissions"] is False
    r.dispatcher.release.set()
    t.join(10)
    r.thread.join(10)
    assert r.exit_code == 0
    assert first[0][0] == 200 and first[0][1]["score"] == 7.0
    revisions = [r.store.get_json(k) for k in r.store.list(LAYOUT.revisions)]
    assert revisions[-1]["reason"] == "final"


def test_drain_timeout_cancels(tmp_path: Path) -> None:
    r = Running(tmp_path, drain_timeout_s=0.3)
    r.dispatcher.release.clear()
    cancelled = threading.Event()

    def cancel() -> None:
        cancelled.set()
        r.dispatcher.release.set()

    r.dispatcher.cancel = cancel  # type: ignore[attr-defined]
    r.thread.start()
    assert r.ready.wait(10)
    make_model(r.ws / "output" / "v1")
    t = threading.Thread(target=lambda: r.submit("output/v1"))
    t.start()
    assert r.dispatcher.started.wait(10)
    r.stop.set()
    r.thread.join(20)
    t.join(10)
    assert cancelled.is_set() and r.exit_code == 0


def stop_mid_evaluation(r: Running) -> tuple[threading.Thread, float]:
    """Start `r`, submit in the background, stop once the evaluation started; the submitting
    thread and the seconds `serve` took to return after the stop."""
    r.thread.start()
    assert r.ready.wait(10)
    make_model(r.ws / "output" / "v1")
    t = threading.Thread(target=lambda: r.submit("output/v1"), daemon=True)
    t.start()
    assert r.dispatcher.started.wait(10)
    started = time.monotonic()
    r.stop.set()
    r.thread.join(30)
    return t, time.monotonic() - started


def test_the_drain_is_one_deadline_and_its_outcome_is_the_termination_message(tmp_path: Path) -> None:
    """An evaluation that ignores everything (no cancel) still cannot hold the drain past its
    deadline + the cancel wait; what was cut is written where the pod's termination message is."""
    message = tmp_path / "termination-log"
    r = Running(tmp_path, drain_timeout_s=0.5, termination_message_path=message)
    r.dispatcher.release.clear()
    t, elapsed = stop_mid_evaluation(r)
    r.dispatcher.release.set()
    t.join(10)
    assert r.exit_code == 0 and 0.5 <= elapsed < 0.5 + CANCEL_WAIT_S + 2
    text = message.read_text()
    assert text.startswith("drain cut after ") and "submissions in flight were cut at the deadline" in text


def test_a_dispatcher_told_the_run_is_ending_lets_the_drain_end_at_once(tmp_path: Path) -> None:
    """Cluster mode: the drain tells the dispatcher first (its evaluations go on in the cluster)."""
    message = tmp_path / "termination-log"
    r = Running(tmp_path, drain_timeout_s=60, termination_message_path=message)
    r.dispatcher.release.clear()
    told: list[float] = []

    def stop_waiting() -> None:
        told.append(time.monotonic())
        r.dispatcher.release.set()

    r.dispatcher.stop_waiting = stop_waiting  # type: ignore[attr-defined]
    t, elapsed = stop_mid_evaluation(r)
    t.join(10)
    assert r.exit_code == 0 and len(told) == 1 and elapsed < 10
    assert message.read_text().startswith("drained in ")


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        (DrainOutcome(1.234, False, 0), "drained in 1.2 s: everything recorded is in the store"),
        (DrainOutcome(60.0, False, 3), "drain cut after 60.0 s: 3 object(s) never reached the store "
                                       "(left in the spool)"),
        (DrainOutcome(61.0, True, 0), "drain cut after 61.0 s: submissions in flight were cut at the "
                                      "deadline"),
    ],
)  # fmt: skip
def test_drain_outcome_messages(outcome: DrainOutcome, text: str) -> None:
    assert outcome.message() == text and outcome.complete is (text.startswith("drained"))


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_cli_serve_exits_zero_on_sigterm_with_final_revision(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    store = tmp_path / "store"
    env = {
        **os.environ,
        "A2RL_STORE_URI": store.as_uri(),
        "A2RL_RUN_PREFIX": PREFIX,
        "WORKSPACE": str(ws),
        "TASK": "arith",
        "A2RL_RUN_START": str(time.time()),
        "A2RL_RUN_TIMEOUT": "600",
        "A2RL_HELDOUT_PATH": str(heldout),
        "A2RL_CODE_DEBOUNCE": "30",  # only the final flush can record the edit below
    }
    cmd = a2rl_argv()
    proc = subprocess.Popen(
        [*cmd, "recorder", "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, proc.stderr.read() if proc.stderr else ""
        url = line.strip().rsplit(" ", 1)[-1]
        assert call(f"{url}/health")[0] == 200
        (ws / "code" / "agent.py").write_text("print('hello')\n")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    revisions = list(LocalStore(store).list(LAYOUT.revisions))
    assert len(revisions) == 1
    assert LocalStore(store).get_json(revisions[0])["reason"] == "final"


def test_cli_config_errors_are_one_line(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("A2RL_RUN") and k not in ("WORKSPACE", "TASK")
    }
    cmd = a2rl_argv()
    proc = subprocess.run(
        [*cmd, "recorder", "serve"], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    missing = "A2RL_RUN_PREFIX, WORKSPACE, TASK, A2RL_RUN_TIMEOUT"
    assert proc.stderr.strip().splitlines() == [
        f"a2rl: error: recorder configuration incomplete: set {missing}"
    ]


# --- hostile HTTP: every error is JSON, the backlog holds, the Unix socket ---------------------


def raw_exchange(port: int, request: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as is; (status, headers, body) of the answer, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"OPTIONS /health HTTP/1.1\r\nConnection: close\r\n\r\n", 405),
        (b"OPTIONS /nope HTTP/1.1\r\nConnection: close\r\n\r\n", 404),
        (b"garbage\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 tls hello\r\n\r\n", 400),
        (b"GET /health HTTP/9.9\r\n\r\n", 505),
        (b"BREW /health HTTP/1.1\r\n\r\n", 501),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET /health HTTP/1.1\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n", 431),
        (b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n", 431),
    ],
    ids=[
        "options",
        "options-unknown",
        "garbage",
        "tls",
        "version",
        "method",
        "url-70k",
        "header-70k",
        "headers",
    ],
)
def test_protocol_errors_are_json(running: Running, request_bytes: bytes, status: int) -> None:
    """The grading API promises JSON for every answer: the HTTP layer's own errors too (not
    http.server's HTML page), with a status line even when the request line is garbage."""
    got, headers, body = raw_exchange(running.port, request_bytes)
    assert got == status
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert isinstance(error, str) and error and "<" not in error
    assert len(body) < 1000  # a 70 KB request line is not echoed back


def test_head_is_get_without_a_body(running: Running) -> None:
    status, headers, body = raw_exchange(running.port, b"HEAD /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert status == 200 and headers["content-type"] == "application/json" and body == b""
    assert int(headers["content-length"]) > 0
    status, headers, body = raw_exchange(running.port, b"HEAD /submit HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert status == 405 and headers["allow"] == "POST" and body == b""
    assert headers["content-type"] == "application/json"


def test_200_simultaneous_connections_all_get_an_answer(tmp_path: Path) -> None:
    """200 clients connect before the server accepts any and all get their answer in time (the
    listen backlog holds them: with the stdlib's 5, most of them were dropped)."""
    from a2rl_recorder.server import RecorderHTTPServer
    from a2rl_recorder.service import Recorder

    store = LocalStore(tmp_path / "store")
    recorder = Recorder(make_config(make_workspace(tmp_path)), store, StoreBackedDispatcher(store))
    server = RecorderHTTPServer(recorder, "127.0.0.1", 0)
    clients = [socket.socket() for _ in range(200)]
    answers: dict[socket.socket, bytes] = {}
    try:
        for sock in clients:
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", server.port))
        select.select([], clients, [], 2.0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.send(b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
        pending, deadline = set(clients), time.monotonic() + 15
        while pending and time.monotonic() < deadline:
            readable, _, _ = select.select(list(pending), [], [], 0.5)
            for sock in readable:
                try:
                    chunk = sock.recv(65536)
                except OSError:
                    chunk = b""
                answers[sock] = answers.get(sock, b"") + chunk
                if not chunk:
                    pending.discard(sock)
    finally:
        for sock in clients:
            sock.close()
        server.shutdown()
        server.server_close()
    answered = sum(1 for data in answers.values() if data.startswith(b"HTTP/1.1 200 "))
    assert answered == 200, f"{answered} of 200 simultaneous connections answered"


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(self.socket_path))
        self.sock = sock


def test_the_api_on_a_unix_socket(tmp_path: Path) -> None:
    """A2RL_RECORDER_SOCKET: the same API on a Unix socket (mode 0600; a stale socket file is
    replaced; the file is gone after the stop), next to the TCP port."""
    sock_path = tmp_path / "api.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock_path))
    stale.close()  # a socket file nobody listens on: what a crashed recorder leaves
    r = Running(tmp_path, socket_path=sock_path)
    r.thread.start()
    assert r.ready.wait(10)
    try:
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
        conn = _UnixHTTPConnection(sock_path)
        conn.request("GET", "/health")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["status"] == "ok"
        conn.request("OPTIONS", "/health")  # keep-alive: a second request on the same connection
        resp = conn.getresponse()
        assert resp.status == 405 and "error" in json.loads(resp.read())
        conn.close()
        assert call(f"{r.url}/health")[0] == 200  # TCP still serves
    finally:
        r.stop.set()
        r.thread.join(30)
    assert r.exit_code == 0
    assert not sock_path.exists()


def test_unix_socket_path_taken_by_a_file_is_one_line(tmp_path: Path) -> None:
    sock_path = tmp_path / "api.sock"
    sock_path.write_text("not a socket")
    store = LocalStore(tmp_path / "store")
    config = make_config(make_workspace(tmp_path), socket_path=sock_path)
    with pytest.raises(
        A2rlError, match=r"cannot listen on the Unix socket .*api\.sock: exists and is not a socket"
    ):
        serve(config, store=store, dispatcher=StoreBackedDispatcher(store), stop=threading.Event())
    assert sock_path.read_text() == "not a socket"


def test_socket_path_comes_from_the_environment(tmp_path: Path) -> None:
    from a2rl_recorder.config import RecorderConfig

    env = {
        "A2RL_RUN_PREFIX": PREFIX,
        "WORKSPACE": str(tmp_path),
        "TASK": "arith",
        "A2RL_RUN_TIMEOUT": "60",
        "A2RL_HELDOUT_PATH": str(tmp_path),
    }
    assert RecorderConfig.from_env(env).socket_path is None
    config = RecorderConfig.from_env({**env, "A2RL_RECORDER_SOCKET": str(tmp_path / "api.sock")})
    assert config.socket_path == tmp_path / "api.sock"


def test_what_is_echoed_is_short_and_printable(running: Running) -> None:
    """A 60 KB path with terminal escapes: the 404 quotes 200 characters of it, escaped."""
    path = "/\x1b[31mred" + "x" * 60_000
    status, _, body = raw_exchange(
        running.port, f"GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n".encode("latin-1")
    )
    error = json.loads(body)["error"]
    assert status == 404 and "\x1b" not in error and "\\x1b[31mred" in error and len(error) < 400
