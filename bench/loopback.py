#!/usr/bin/env python3
"""What one loopback TCP round trip costs on this machine: the floor under every relay figure.

    python bench/loopback.py [--trips 20000]

A client sends 1 KB and reads a 2 KB answer from a forked echo process on a kept-alive,
`TCP_NODELAY` connection, `--trips` times; prints the wall time per round trip and the client's CPU
per round trip (one send, one receive), user and system. A relay makes two of each per call where
the direct path makes one, so on a machine whose system time per round trip is high a relay's ratio
to direct falls however little Python it runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trips", type=int, default=20000)
    args = ap.parse_args()
    srv = socket.create_server(("127.0.0.1", 0))
    pid = os.fork()
    if pid == 0:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while conn.recv(65536):
            conn.sendall(b"y" * 2000)
        os._exit(0)
    sock = socket.create_connection(srv.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(args.trips):
        sock.sendall(b"x" * 1000)
        sock.recv(65536)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    sock.close()
    os.waitpid(pid, 0)
    user = (after.ru_utime - before.ru_utime) / args.trips * 1e6
    system = (after.ru_stime - before.ru_stime) / args.trips * 1e6
    print(
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}: "
        f"round trip {wall / args.trips * 1e6:.1f} us wall, "
        f"client CPU {user + system:.1f} us ({user:.1f} user, {system:.1f} system)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
