"""The local sandbox's promises, each checked by a real agent process inside real bubblewrap.

An agent here is a Python script run by the supervisor exactly as `a2rl run` runs one (relay
first, then the script); the grading API is a small HTTP server on the run's Unix socket.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from socketserver import ThreadingUnixStreamServer

import pytest
from a2rl_runner import procs
from a2rl_runner.sandbox.identity import SANDBOX_UID_BASE, Identity, sandbox_identity
from a2rl_runner.sandbox.policy import (
    Relay,
    SandboxPolicy,
    bind_sources,
    bwrap_argv,
    exposed_private,
    relay_argv,
)
from a2rl_runner.sandbox.setup import (
    Bubblewrap,
    RunSandbox,
    SandboxUnavailableError,
    check_bubblewrap,
    named_files,
)
from a2rl_runner.services import free_port
from a2rl_runner.supervisor import AgentLaunch, AgentOutcome, AgentSupervisor

from a2rl.errors import A2rlError
from a2rl.sandbox_relay import listen as relay_listen
from a2rl.sandbox_relay import parse
from a2rl.sandbox_relay import serve as relay_serve


def _bubblewrap() -> Bubblewrap | None:
    try:
        return check_bubblewrap()
    except SandboxUnavailableError:
        return None


BWRAP = _bubblewrap()
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap cannot start here (make test installs it)")


# --- pure parts ----------------------------------------------------------------------------------
def _policy(tmp_path: Path, **overrides: object) -> SandboxPolicy:
    fields: dict[str, object] = {
        "workspace": tmp_path / "ws",
        "read_only_in_workspace": (tmp_path / "ws" / "models",),
        "toolchain": (Path("/opt/venv"), Path("/opt/venv/lib"), Path("/opt/py")),
        "socket_dir": tmp_path / "sock",
        "relays": (Relay(8123, "api.sock"),),
        "scratch": tmp_path / "scratch",
        "cwd": tmp_path / "ws",
        "system_dirs": ("/usr",),
        "system_links": {"/bin": "usr/bin"},
        "etc_entries": ("/etc/ld.so.cache", "/etc/ssl/certs"),
        "etc_files": (("/etc/passwd", tmp_path / "scratch" / "etc" / "passwd"),),
    }
    fields.update(overrides)
    return SandboxPolicy(**fields)  # type: ignore[arg-type]


def test_bwrap_argv_isolates_every_namespace_and_binds_only_what_the_policy_names(tmp_path: Path) -> None:
    argv = bwrap_argv("/usr/bin/bwrap", _policy(tmp_path), ["agent", "--flag"])
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--disable-userns",
                 "--die-with-parent", "--new-session"):  # fmt: skip
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    binds = [(argv[i], argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a.endswith("bind")]
    # /opt/venv/lib is inside /opt/venv: one bind covers it.
    assert ("--ro-bind", "/opt/venv", "/opt/venv") in binds
    assert all(src != "/opt/venv/lib" for _, src, _ in binds)
    ws = str(tmp_path / "ws")
    assert ("--bind", ws, ws) in binds
    # The read-only model directory is mounted after (over) the writable workspace.
    ro_model = argv.index(str(tmp_path / "ws" / "models"))
    assert ro_model > argv.index(ws)
    # /etc by allow-list: the named entries and the sandbox's own passwd, never the directory.
    assert ("--ro-bind", "/etc/ssl/certs", "/etc/ssl/certs") in binds
    assert ("--ro-bind", str(tmp_path / "scratch" / "etc" / "passwd"), "/etc/passwd") in binds
    assert not any(dest == "/etc" for _, _, dest in binds)
    assert argv[-3:] == ["--", "agent", "--flag"]
    assert argv[argv.index("--chdir") + 1] == ws
    assert not any(src == "/" for _, src, _ in binds)


def test_staged_sources_and_a_sized_shm(tmp_path: Path) -> None:
    policy = _policy(tmp_path, shm_bytes=64 << 20)
    sources = bind_sources(policy)
    staged = [f"/tmp/a2rl-stage-x/{i}" for i in range(len(sources))]
    argv = bwrap_argv("/usr/bin/bwrap", policy, ["agent"], sources=staged)
    binds = [
        (argv[i], argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a.startswith("--") and "bind" in a
    ]
    assert [b[1] for b in binds] == staged  # every bind from its staged point, to the same place
    assert [b[2] for b in binds] == [b[2] for b in _binds_of(bwrap_argv("/usr/bin/bwrap", policy, ["agent"]))]
    assert argv[argv.index("/dev/shm") - 3 : argv.index("/dev/shm")] == ["--size", str(64 << 20), "--tmpfs"]
    with pytest.raises(ValueError, match="sources"):
        bwrap_argv("/usr/bin/bwrap", policy, ["agent"], sources=staged[1:])


def _binds_of(argv: list[str]) -> list[tuple[str, str, str]]:
    return [
        (argv[i], argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a.startswith("--") and "bind" in a
    ]


def test_a_root_runner_gives_each_run_an_unprivileged_identity() -> None:
    mine = sandbox_identity("3f2a9c81d0e4", euid=0, environ={})
    assert mine is not None and mine.uid == mine.gid and mine.uid >= SANDBOX_UID_BASE
    assert sandbox_identity("3f2a9c81d0e5", euid=0, environ={}) != mine  # runs do not share a uid
    assert sandbox_identity("3f2a9c81d0e4", euid=1000, environ={}) is None  # bwrap maps the user itself
    assert sandbox_identity("0", euid=0, environ={"A2RL_SANDBOX_UID": "4242"}) == Identity(4242, 4242)
    for bad in ("0", "root", "-1"):
        with pytest.raises(A2rlError, match="A2RL_SANDBOX_UID"):
            sandbox_identity("0", euid=0, environ={"A2RL_SANDBOX_UID": bad})


def test_exposed_private_catches_a_toolchain_that_contains_a_private_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert exposed_private([home / ".pyenv" / "versions"], [home]) == []
    assert exposed_private([tmp_path], [home / ".cache" / "a2rl"]) == [(tmp_path, home / ".cache" / "a2rl")]


def test_named_files_are_regular_files_only(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text("print(1)\n")
    argv = ["python", str(script), "/", str(tmp_path), "./agent.py", "-c", "import os\n" + "x/" * 300]
    assert named_files(argv, tmp_path) == [script, script]


def test_relay_parses_its_command_line() -> None:
    assert parse(["--listen", "80=/run/a2rl/api.sock", "--", "python", "-V"]) == (
        [(80, "/run/a2rl/api.sock")],
        ["python", "-V"],
    )
    for bad in (["python"], ["--listen", "x=/s", "--", "a"], ["--", ""][:1], ["--bogus", "--", "a"]):
        with pytest.raises(ValueError):
            parse(bad)
    assert relay_argv("/py", [Relay(1, "a.sock")], ["x"]) == [
        "/py", "-m", "a2rl.sandbox_relay", "--listen", "1=/run/a2rl/a.sock", "--", "x",
    ]  # fmt: skip


def test_the_relay_passes_a_reply_written_in_pieces_without_a_delay(tmp_path: Path) -> None:
    """A server answers in two writes (head, then body), as http.server does: the relay must pass
    the second at once, not hold it for the agent's delayed ACK (Nagle: 40 ms per request)."""
    path = str(tmp_path / "api.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def answer_in_pieces() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(64):
                conn.sendall(b"head")
                time.sleep(0.002)
                conn.sendall(b"body")

    threading.Thread(target=answer_in_pieces, daemon=True).start()
    listener = relay_listen(0)
    threading.Thread(target=relay_serve, args=(listener, path), daemon=True).start()
    times = []
    with socket.create_connection(listener.getsockname()) as agent:
        for _ in range(30):
            t0 = time.perf_counter()
            agent.sendall(b"ask")
            got = b""
            while len(got) < 8:
                got += agent.recv(64)
            times.append(time.perf_counter() - t0)
            assert got == b"headbody"
    slow = [round(t * 1000, 1) for t in times if t > 0.030]
    assert len(slow) <= 3, f"{len(slow)} of 30 requests took over 30 ms (ms): {slow}"


def test_check_bubblewrap_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailableError, match=r"apt-get install bubblewrap.*--no-sandbox"):
        check_bubblewrap({"PATH": str(tmp_path)})
    # Where the sandbox's own identity can run it (a root runner probes as that identity).
    shown = Path(tempfile.mkdtemp(prefix="a2rl-fake-bwrap-"))
    try:
        shown.chmod(0o755)
        fake = shown / "bwrap"
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
        fake.chmod(0o755)
        with pytest.raises(SandboxUnavailableError, match=r"No permissions to create new.*--no-sandbox"):
            check_bubblewrap({"PATH": "", "A2RL_BWRAP": str(fake)})
    finally:
        shutil.rmtree(shown)


# --- real sandboxes ------------------------------------------------------------------------------
class _Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"status": "ok", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args

    def address_string(self) -> str:
        return "unix"


@dataclass
class Box:
    root: Path
    ws: Path
    private: Path  # stands for the store, the caches and the held-out data
    sandbox: RunSandbox
    port: int
    host_port: int  # a TCP server on the host's loopback the agent must not reach
    tmux_dir: Path  # like /tmp/tmux-0: the host's /tmp must stay out of sight


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    assert BWRAP is not None
    ws = tmp_path / "ws"
    for sub in ("code", "output", "models/base", "data"):
        (ws / sub).mkdir(parents=True)
    (ws / "models" / "base" / "config.json").write_text("{}")
    private = tmp_path / "private"
    (private / "heldout").mkdir(parents=True)
    (private / "heldout" / "heldout.jsonl").write_text('{"answer": 42}\n')
    port = free_port()
    sandbox = RunSandbox.create(
        BWRAP,
        workspace=ws,
        read_only=[ws / "models", ws / "data"],
        agent_argv=[sys.executable],
        cwd=ws,
        api_port=port,
        scratch=tmp_path / "ws.scratch",
        private=[private, Path.home()],
    )
    api = ThreadingUnixStreamServer(str(sandbox.api_socket), _Api)
    sandbox.grant_sockets()
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(8)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    tmux_dir = Path(f"/tmp/a2rl-test-tmux-{os.getpid()}")
    tmux_dir.mkdir(exist_ok=True)
    try:
        yield Box(tmp_path, ws, private, sandbox, port, host.getsockname()[1], tmux_dir)
    finally:
        tmux_dir.rmdir()
        api.shutdown()
        api.server_close()
        host.close()
        sandbox.cleanup()


def run_agent(
    box: Box, script: str, *, budget: float = 30, grace: float = 2, marker: str = ""
) -> tuple[AgentOutcome, str]:
    env = box.sandbox.agent_env({"PATH": os.environ["PATH"], "MARK": marker, "PORT": str(box.port),
                                 "HOST_PORT": str(box.host_port), "PRIVATE": str(box.private),
                                 "WS": str(box.ws), "PYTHONUNBUFFERED": "1",
                                 "TMUX_DIR": str(box.tmux_dir)})  # fmt: skip
    launch = AgentLaunch(
        argv=box.sandbox.wrap([sys.executable, "-c", script]),
        env=env,
        cwd=box.ws,
        log_path=box.root / "agent.log",
        sandboxed=True,
        preexec=box.sandbox.preexec,
    )
    outcome = AgentSupervisor(launch).run(budget, grace)
    return outcome, (box.root / "agent.log").read_text()


PROBE = r"""
import json, os, socket, sys, urllib.request
def attempt(fn):
    try:
        return fn()
    except Exception as exc:
        return type(exc).__name__
out = {}
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["ifaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
out["api"] = json.load(urllib.request.urlopen(f"http://127.0.0.1:{os.environ['PORT']}/health", timeout=5))
def connect(host, port):
    return attempt(lambda: socket.create_connection((host, port), 2) and "connected")
out["host_port"] = connect("127.0.0.1", int(os.environ["HOST_PORT"]))
out["outside"] = connect("10.255.255.1", 80)
out["private"] = os.path.exists(os.environ["PRIVATE"])
out["home"] = sorted(os.listdir(os.path.expanduser("~")))
out["real_home"] = [p for p in ("/root/.cache", "/root/.a2rl", "/root/.ssh") if os.path.exists(p)]
out["tmux"] = os.path.exists(os.environ["TMUX_DIR"])
def write(path):
    return attempt(lambda: open(path, "w").write("x") and "written")
out["venv_write"] = write(os.path.join(sys.prefix, "pwned"))
out["model_write"] = write(os.path.join(os.environ["WS"], "models/base/x"))
out["code_write"] = write(os.path.join(os.environ["WS"], "code/train.py"))
out["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
out["remount"] = os.system("mount -o remount,rw,bind / 2>/dev/null") != 0
out["userns"] = os.system("unshare -U true 2>/dev/null") != 0
out["shadow"] = attempt(lambda: open("/etc/shadow").read()) if os.path.exists("/etc/shadow") else ""
# Host root's moves: a crash handler in kernel.core_pattern, any other sysctl, root-only keys.
def opens_for_writing(path):  # opening is the test: nothing is written
    return attempt(lambda: os.close(os.open(path, os.O_WRONLY)) or "opened")
out["core_pattern"] = opens_for_writing("/proc/sys/kernel/core_pattern")
out["sysrq"] = opens_for_writing("/proc/sysrq-trigger")
sysctls = [os.path.join(d, f) for d, _, fs in os.walk("/proc/sys") for f in fs]
out["sysctls"] = len(sysctls)
out["sysctls_writable"] = [p for p in sysctls if os.access(p, os.W_OK)]
out["snakeoil"] = attempt(lambda: open("/etc/ssl/private/ssl-cert-snakeoil.key").read() and "read")
out["etc"] = sorted(os.listdir("/etc"))
out["users"] = [line.split(":")[0] for line in open("/etc/passwd")]
out["uid"] = os.getuid()
print("PROBE " + json.dumps(out))
"""


@needs_bwrap
def test_the_agent_sees_only_its_workspace_toolchain_and_the_grading_api(box: Box) -> None:
    outcome, log = run_agent(box, PROBE)
    assert outcome.exit_code == 0, log
    seen = json.loads(log.split("PROBE ", 1)[1])
    assert len(seen["pids"]) <= 4, seen["pids"]  # init, relay, the agent (and its shell-less probe)
    assert os.getpid() not in seen["pids"] or len(seen["pids"]) <= 4
    assert seen["ifaces"] == ["lo"]
    assert seen["api"] == {"status": "ok", "path": "/health"}
    assert seen["host_port"] in ("ConnectionRefusedError", "OSError", "TimeoutError")
    assert seen["outside"] != "connected"
    assert seen["private"] is False
    assert seen["home"] == []
    assert seen["real_home"] == []
    assert seen["tmux"] is False  # not the host's /tmp (tmux, ssh-agent sockets live there)
    assert seen["venv_write"] == "OSError"
    assert seen["model_write"] == "OSError"
    assert seen["code_write"] == "written"
    assert int(seen["caps"], 16) == 0
    assert seen["remount"] is True and seen["userns"] is True
    assert seen["shadow"] == ""  # not there at all: /etc is an allow-list
    # Never host root, whoever runs `a2rl run`: no kernel setting, no root-only host file.
    assert seen["uid"] != 0 and seen["uid"] == (box.sandbox.identity or Identity(os.getuid(), 0)).uid
    assert seen["core_pattern"] in ("PermissionError", "OSError"), seen["core_pattern"]
    assert seen["sysrq"] in ("PermissionError", "OSError", "FileNotFoundError"), seen["sysrq"]
    # Writable: only the settings of the sandbox's own IPC and PID namespaces (message queues,
    # semaphores, shared memory; its pid numbering), which it owns and which reach nothing outside.
    assert seen["sysctls"] > 100
    assert {p for p in seen["sysctls_writable"] if not OWN_NAMESPACE_SYSCTL.match(p)} == set()
    assert seen["snakeoil"] in ("FileNotFoundError", "PermissionError")
    for secret in ("shadow", "gshadow", "sudoers", "ssh", "pip.conf", "npmrc", "machine-id", "hostname"):
        assert secret not in seen["etc"]
    assert {"ld.so.cache", "passwd", "hosts", "ssl"} <= set(seen["etc"])
    assert seen["users"] == ["root", "agent", "nobody"]  # the sandbox's own, not the host's users


OWN_NAMESPACE_SYSCTL = re.compile(
    r"/proc/sys/(fs/mqueue/\w+|kernel/(msgmax|msgmnb|msgmni|msg_next_id|auto_msgmni|sem|sem_next_id|shmall"
    r"|shmmax|shmmni|shm_next_id|shm_rmid_forced|ns_last_pid|pid_max))$"
)

FORKER = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    while True:  # a new process (and process group) every ms, each parent exiting at once
        pid = os.fork()
        if pid:
            os._exit(0)
        os.setpgid(0, 0)
        time.sleep(0.001)
print("forker started", flush=True)
time.sleep(3600)
"""


def _alive_with_marker(marker: str) -> list[int]:
    return sorted(procs.marked("MARK", marker, procs.snapshot()))


@needs_bwrap
@pytest.mark.parametrize("attempt", range(3))
def test_nothing_the_agent_started_outlives_the_deadline(box: Box, attempt: int) -> None:
    marker = f"forker-{os.getpid()}-{attempt}-{time.monotonic_ns()}"
    started = time.monotonic()
    outcome, log = run_agent(box, FORKER, budget=2, grace=1, marker=marker)
    assert "forker started" in log
    assert outcome.end_reason == "deadline_exceeded"
    assert time.monotonic() - started < 10
    time.sleep(0.3)
    assert _alive_with_marker(marker) == []


@needs_bwrap
def test_daemons_die_when_the_agent_exits_early(box: Box) -> None:
    marker = f"daemon-{os.getpid()}-{time.monotonic_ns()}"
    script = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\nprint('bye')\n"
    outcome, log = run_agent(box, script, marker=marker)
    assert outcome.exit_code == 0 and outcome.end_reason == "completed", log
    time.sleep(0.3)
    assert _alive_with_marker(marker) == []


@needs_bwrap
def test_sigterm_reaches_the_agent_inside_and_the_grace_is_honoured(box: Box) -> None:
    script = (
        "import signal, sys, time\n"
        "def bye(*_):\n    print('got SIGTERM', flush=True)\n    time.sleep(0.5)\n    sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('ready', flush=True)\ntime.sleep(600)\n"
    )
    outcome, log = run_agent(box, script, budget=2, grace=5)
    assert "got SIGTERM" in log
    assert outcome.exit_code == 3
    assert outcome.end_reason == "deadline_exceeded"


def test_a_toolchain_that_would_show_a_private_directory_is_refused(tmp_path: Path) -> None:
    if BWRAP is None:
        pytest.skip("bubblewrap cannot start here")
    with pytest.raises(A2rlError, match="would show"):
        RunSandbox.create(
            BWRAP,
            workspace=tmp_path,
            read_only=[],
            agent_argv=[],
            cwd=tmp_path,
            api_port=1,
            scratch=tmp_path / "s",
            private=[Path(sys.prefix) / "lib"],
        )
