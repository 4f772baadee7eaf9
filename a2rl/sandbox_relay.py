"""A sandbox's first process: loopback ports relayed to Unix sockets outside, then the command.

    python -m a2rl.sandbox_relay --listen 8123=/run/a2rl/api.sock [--listen …] -- COMMAND…

A sandbox with no network but `lo` reaches a service outside through a Unix socket mounted in:
the agent's sandbox the grading API and the driver gateway (`a2rl_runner.sandbox`), the eval box
its egress proxy (`a2rl.eval_sandbox`); the command inside keeps using `http://127.0.0.1:<port>`.
The ports are bound before the command starts. SIGTERM is ignored here (the launcher signals the
command's processes itself, the whole process group): the relay keeps serving while the command
winds down, and exits with its status (128+N when it died of signal N, as bubblewrap reports
it) — which ends the sandbox's PID namespace, so nothing the command left behind survives it.
Standard library only: it runs before anything else in the sandbox and must start fast.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence

_CHUNK = 1 << 16


def relay_command(python: str, listens: Iterable[tuple[int, str]], argv: Sequence[str]) -> list[str]:
    """The command line that relays each (port, socket path) inside, then runs `argv`."""
    command = [python, "-m", "a2rl.sandbox_relay"]
    for port, path in listens:
        command += ["--listen", f"{port}={path}"]
    return [*command, "--", *argv]


def parse(argv: Sequence[str]) -> tuple[list[tuple[int, str]], list[str]]:
    """([(port, socket path)], command) from the command line above; ValueError when malformed."""
    if "--" not in argv:
        raise ValueError("missing '--' before the command")
    split = list(argv).index("--")
    head, command = list(argv[:split]), list(argv[split + 1 :])
    if not command:
        raise ValueError("no command after '--'")
    listens = []
    while head:
        flag = head.pop(0)
        if flag != "--listen" or not head:
            raise ValueError(f"unexpected argument {flag!r}")
        port, _, path = head.pop(0).partition("=")
        if not port.isdigit() or not path:
            raise ValueError("--listen takes PORT=SOCKET_PATH")
        listens.append((int(port), path))
    return listens, command


def pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy `src` to `dst` until `src` ends, then pass the end on."""
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def serve(listener: socket.socket, target: str) -> None:
    while True:
        client, _ = listener.accept()
        # A reply reaches the relay in pieces (head, then body); without this, Nagle holds the
        # second piece until the client's delayed ACK, 40 ms later.
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(target)
        except OSError:
            client.close()
            upstream.close()
            continue
        pair = (client, upstream)
        threading.Thread(target=pipe, args=pair, daemon=True).start()
        threading.Thread(target=pipe, args=pair[::-1], daemon=True).start()


def listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(256)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    try:
        listens, command = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"a2rl sandbox relay: {exc}", file=sys.stderr)
        return 2
    listeners = [(listen(port), path) for port, path in listens]  # bound before the command starts
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        # The runner's CLI recognises this line (`a2rl_cli.run_cmd`); an eval command is Python.
        print(f"a2rl: cannot start agent command {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after the fork: the command keeps the default
    for listener, path in listeners:
        threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
