#!/usr/bin/env python3
"""What the eval box's egress proxy costs (`a2rl.egress_proxy`): a judge call from inside the box
(urllib → the relay → the proxy → a loopback judge on the host) against the same call unboxed.

    .venv/bin/python bench/eval_egress.py [--calls 50] [--repeat 3]

The judge is a loopback HTTP server (a process of its own) answering an OpenAI-style chat
completion at once, so the figures are the path's own latency. `box`: an `EvalBox` whose endpoint
is the judge; `bare`: the same client started directly. Each client times `--calls` sequential
POSTs in-process (one new connection each, as urllib makes them); printed are the p50 and p95
over `--repeat` clients.
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from a2rl.eval_sandbox import EvalBox

CLIENT = """
import json, sys, time, urllib.request
url, calls = sys.argv[1], int(sys.argv[2])
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}).encode()
times = []
for _ in range(calls):
    started = time.perf_counter()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        json.load(reply)
    times.append(time.perf_counter() - started)
print(json.dumps(times))
"""


JUDGE = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Judge(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        raw = json.dumps({"choices": [{"message": {"role": "assistant", "content": "m"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _client(prefix: list[str], env: dict[str, str], url: str, calls: int, preexec: Any = None) -> list[float]:
    done = subprocess.run(
        [*prefix, sys.executable, "-c", CLIENT, url, str(calls)],
        env=env,
        preexec_fn=preexec,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"bench/eval_egress.py: exit {done.returncode}: {done.stderr[-2000:]}")
    return [float(t) for t in json.loads(done.stdout)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    # The judge in a process of its own, as a real one is: the proxy's threads do not share its GIL.
    judge = subprocess.Popen([sys.executable, "-c", JUDGE], stdout=subprocess.PIPE, text=True)
    assert judge.stdout is not None
    url = f"http://127.0.0.1:{judge.stdout.readline().strip()}/v1/chat/completions"
    times: dict[str, list[float]] = {"box": [], "bare": []}
    for _ in range(args.repeat):
        with EvalBox("bench-egress", endpoints=[url]) as box:
            if box.egress is None:
                sys.exit("bench/eval_egress.py: no bubblewrap here, so no proxy to measure")
            env = {**os.environ, **box.env}
            times["box"] += _client(box.prefix, env, url, args.calls, box.preexec)
        times["bare"] += _client([], dict(os.environ), url, args.calls)
    judge.terminate()
    judge.wait()
    print(f"{'':<6} {'p50 (ms)':>10} {'p95 (ms)':>10}   ({args.repeat} x {args.calls} judge calls)")
    for mode, values in times.items():
        cuts = statistics.quantiles(values, n=20)
        print(f"{mode:<6} {statistics.median(values) * 1000:>10.2f} {cuts[18] * 1000:>10.2f}")


if __name__ == "__main__":
    main()
