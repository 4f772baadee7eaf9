#!/usr/bin/env python3
"""What the local sandbox costs the agent: start-up, grading-API round trips, compute.

    .venv/bin/python bench/sandbox.py [--repeat 10] [--requests 300] [--compute-s 3]

Each figure is measured with the agent in the sandbox (bubblewrap, relay, exactly as `a2rl run`
starts it) and without (`--no-sandbox`: the same command started directly). It prints figures;
it asserts nothing.

- `start`: from starting the command to its first output line (`python -c print`), median.
- `API round trip`: sequential `GET /health` on a keep-alive connection to the real grading
  server classes, median and p95; with the sandbox they go through the relay and the Unix
  socket, without it straight to TCP.
- `compute`: float32 matrix products (torch, 1 thread) per second for `--compute-s` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from a2rl_recorder.server import RecorderHTTPServer, RecorderUnixServer
from a2rl_recorder.service import Recorder
from a2rl_runner.sandbox.setup import RunSandbox, check_bubblewrap
from a2rl_runner.services import free_port


class _HealthOnly:
    """What the real grading server calls for `GET /health` (the rest of `Recorder` is not needed
    to time the HTTP path)."""

    def health(self) -> tuple[int, dict[str, str]]:
        return 200, {"status": "ok"}


ROUND_TRIPS = """
import http.client, json, os, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(os.environ["PORT"]), timeout=10)
times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    conn.request("GET", "/health")
    conn.getresponse().read()
    times.append(time.perf_counter() - t)
print(json.dumps(times))
"""

COMPUTE = """
import json, sys, time, torch
torch.set_num_threads(1)
a = torch.randn(256, 256)
n, end = 0, time.perf_counter() + float(sys.argv[1])
while time.perf_counter() < end:
    a = (a @ a).tanh()
    n += 1
print(json.dumps(n / float(sys.argv[1])))
"""


def run(argv: list[str], env: dict[str, str], preexec: Callable[[], None] | None = None) -> tuple[float, str]:
    """(seconds to the first output line, the whole output)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=preexec)  # noqa: PLW1509
    assert proc.stdout is not None
    first = proc.stdout.readline()
    elapsed = time.perf_counter() - t0
    rest = proc.stdout.read()
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"{argv[-3:]} exited with {proc.returncode}: {first}{rest}")
    return elapsed, first + rest


def timed(sandbox: RunSandbox | None, argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """`run` of `argv`, in `sandbox` (as `a2rl run` starts it: its preexec after its wrap) or not."""
    if sandbox is None:
        return run(argv, env)
    wrapped = sandbox.wrap(argv)
    return run(wrapped, env, sandbox.preexec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--compute-s", type=float, default=3.0)
    args = parser.parse_args()

    bwrap = check_bubblewrap()
    with tempfile.TemporaryDirectory(prefix="a2rl-bench-sandbox-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        port = free_port()
        sandbox = RunSandbox.create(
            bwrap,
            workspace=ws,
            read_only=[],
            agent_argv=[sys.executable],
            cwd=ws,
            api_port=port,
            scratch=Path(tmp) / "scratch",
            private=[],
        )
        stand_in = cast(Recorder, _HealthOnly())
        unix = RecorderUnixServer(stand_in, sandbox.api_socket)
        tcp = RecorderHTTPServer(stand_in, "127.0.0.1", port)
        for server in (unix, tcp):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        sandbox.grant_sockets()
        base_env = {"PATH": os.environ["PATH"], "PORT": str(port), "PYTHONUNBUFFERED": "1"}
        rows = []
        try:
            for name, box in (("sandbox", sandbox), ("no sandbox", None)):
                env = box.agent_env(base_env) if box is not None else base_env
                starts = [
                    timed(box, [sys.executable, "-c", "print('up')"], env)[0] for _ in range(args.repeat)
                ]
                _, out = timed(box, [sys.executable, "-c", ROUND_TRIPS, str(args.requests)], env)
                trips = sorted(json.loads(out))
                _, out = timed(box, [sys.executable, "-c", COMPUTE, str(args.compute_s)], env)
                rows.append(
                    (
                        name,
                        statistics.median(starts) * 1000,
                        statistics.median(trips) * 1000,
                        trips[int(len(trips) * 0.95) - 1] * 1000,
                        float(json.loads(out)),
                    )
                )
        finally:
            unix.shutdown()
            tcp.shutdown()
            sandbox.cleanup()
    print(f"{bwrap.version}; {args.repeat} starts, {args.requests} requests, {args.compute_s:g} s of compute")
    print(f"{'':12} {'start ms':>9} {'API p50 ms':>11} {'API p95 ms':>11} {'matmul/s':>9}")
    for name, start, p50, p95, ops in rows:
        print(f"{name:12} {start:9.1f} {p50:11.3f} {p95:11.3f} {ops:9.1f}")


if __name__ == "__main__":
    main()
