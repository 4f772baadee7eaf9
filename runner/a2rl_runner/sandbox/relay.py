"""The sandbox's first process: loopback ports relayed to the runner's Unix sockets, then the agent.

    python -m a2rl_runner.sandbox.relay --listen 8123=/run/a2rl/api.sock [--listen …] -- AGENT…

The sandbox has no network but `lo`, so the grading API (and the driver gateway) are reached
through the Unix sockets the runner mounts in; the agent keeps using `http://127.0.0.1:<port>`.
The ports are bound before the agent starts. SIGTERM is ignored here (the runner signals the
agent's processes itself): the relay keeps serving while the agent winds down, and exits with
the agent's status (128+N when the agent died of signal N) — which ends the sandbox's PID
namespace, so nothing the agent left behind survives it. Standard library only: it runs before
anything of the agent's and must start fast.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence

_CHUNK = 1 << 16


def parse(argv: Sequence[str]) -> tuple[list[tuple[int, str]], list[str]]:
    """([(port, socket path)], agent argv) from the command line above; ValueError when malformed."""
    if "--" not in argv:
        raise ValueError("missing '--' before the agent command")
    split = list(argv).index("--")
    head, agent = list(argv[:split]), list(argv[split + 1 :])
    if not agent:
        raise ValueError("no agent command after '--'")
    listens = []
    while head:
        flag = head.pop(0)
        if flag != "--listen" or not head:
            raise ValueError(f"unexpected argument {flag!r}")
        port, _, path = head.pop(0).partition("=")
        if not port.isdigit() or not path:
            raise ValueError("--listen takes PORT=SOCKET_PATH")
        listens.append((int(port), path))
    return listens, agent


def _pipe(src: socket.socket, dst: socket.socket) -> None:
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
        # second piece until the agent's delayed ACK, 40 ms later.
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(target)
        except OSError:
            client.close()
            upstream.close()
            continue
        pair = (client, upstream)
        threading.Thread(target=_pipe, args=pair, daemon=True).start()
        threading.Thread(target=_pipe, args=pair[::-1], daemon=True).start()


def listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(256)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    try:
        listens, agent = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"a2rl sandbox relay: {exc}", file=sys.stderr)
        return 2
    listeners = [(listen(port), path) for port, path in listens]  # bound before the agent starts
    try:
        child = subprocess.Popen(agent)
    except OSError as exc:
        print(f"a2rl: cannot start agent command {agent[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after the fork: the agent keeps the default
    for listener, path in listeners:
        threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
