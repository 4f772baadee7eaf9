#!/usr/bin/env python3
"""What the driver gateway adds: latency to the last byte and throughput, gateway vs direct.

    .venv/bin/python bench/gateway.py [--rounds 3] [--requests 400] [--seconds 3] [--before DIR]

One upstream (the scripted driver, `tests.support.driver_server`, in a process of its own) is
called directly and through `a2rl gateway serve` (a process of its own, records written to a
local store, as a run does), side by side in one run:

- sequential: `--requests` Anthropic Messages calls each (streamed and not, alternately) on one
  keep-alive connection per target, interleaved call by call (direct, gateway, …); the p50 and p99
  the gateway adds to the last byte are its percentile minus the direct one;
- throughput: 16 concurrent keep-alive connections (`--concurrency`) for `--seconds` against one
  target at a time, targets in turn within a round; the ratio is the gateway's calls per second
  over the direct ones of the same round.

`--upstream-ms MS` makes the upstream wait MS before each answer, as a provider does (default 0:
an upstream that answers as fast as it can, where the gateway's own CPU is all that limits it).
`--before DIR` adds a second gateway run from another checkout (`git worktree add /tmp/base
c4f0a06`), measured in the same rounds; `--floor` adds two relays without any of the gateway's
work (`bench/bare_relay.py`: threads, aiohttp) to the throughput phases. After each throughput
phase the bench waits until every call's record is in the store ("settled": how far the writer
lagged) and at the end checks that each gateway's summary counted every call it was sent. The
load average is printed with every round: the machine may be shared. It prints figures; it
asserts nothing.

`--pin` gives each relay (gateways, bare relays) the last CPU and the client and upstream the
others, in every phase, direct ones included: a relay's CPU then cannot slow the endpoints down,
as when the gateway runs in a pod of its own, and the ratio says whether the relay keeps up with
them. Without it (the default) all share every CPU and the ratio measures the relay's CPU per call
against the endpoints'.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = ("", "operator", "recorder", "gateway", "grader", "tasks", "agents", "runner", "cli")
TOKEN = "a2rl-run-bench0000000000000000000000000000000000000"
KEY = "sk-bench-upstream-key-0123456789"
PREFIX = "local/bench-0123456789ab"
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def _body(stream: bool) -> bytes:
    """A Claude Code-like turn: one tool call and its result so far (the driver plays step 2)."""
    messages = [
        {"role": "user", "content": "train a model"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t0", "name": "Bash", "input": {"command": "ls"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "train.py"}]},
    ]
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "stream": stream,
        "messages": messages,
        "tools": [{"name": "Bash", "input_schema": SCHEMA}],
    }
    return json.dumps(body).encode()


def _request(stream: bool) -> bytes:
    body = _body(stream)
    head = (
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"x-api-key: {TOKEN}\r\nanthropic-version: 2023-06-01\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


REQUESTS = (_request(False), _request(True))


class Client:
    """One keep-alive HTTP/1.1 connection, as cheap as a client gets in Python (the bench's own
    CPU is on the same machine as what it measures)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buf += data

    def _until(self, sep: bytes) -> bytes:
        while (i := self.buf.find(sep)) < 0:
            self._fill()
        out, self.buf = self.buf[:i], self.buf[i + len(sep) :]
        return out

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def call(self, request: bytes) -> int:
        """Send one request, read its whole answer; the status."""
        self.sock.sendall(request)
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        if fields.get("transfer-encoding", "").lower() == "chunked":
            while size := int(self._until(b"\r\n").split(b";")[0], 16):
                self._take(size + 2)
            self._until(b"\r\n")
        else:
            self._take(int(fields.get("content-length", "0")))
        if fields.get("connection", "").lower() == "close":
            raise ConnectionError(f"the server closed the connection after {status}")
        return status


@dataclass
class Target:
    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    store: Path | None = None
    sent: int = 0
    latencies: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    settle_s: list[float] = field(default_factory=list)
    #: CPU ms per call of this process, measured over the throughput phases that called it.
    cpu_ms: list[float] = field(default_factory=list)


def cpu_s(proc: subprocess.Popen[bytes] | None) -> float:
    """User + system CPU seconds of a process so far (all its threads)."""
    if proc is None:
        return 0.0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pythonpath(src: Path) -> str:
    return os.pathsep.join(str(src / c) if c else str(src) for c in COMPONENTS)


def _start(
    argv: list[str], env: dict[str, str], ready: re.Pattern[str], stdin: bytes = b""
) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    out = proc.stdout
    for raw in out:
        if m := ready.search(raw.decode(errors="replace")):
            threading.Thread(target=out.read, daemon=True).start()  # keep draining its output
            return proc, int(m.group(1))
    raise SystemExit(f"{argv} did not start")


def start_upstream(python: str, answer_ms: float = 0.0) -> Target:
    env = {**os.environ, "PYTHONPATH": _pythonpath(ROOT)}
    argv = [python, "-m", "tests.support.driver_server", "--port", "0", "--answer-delay-ms", str(answer_ms)]
    proc, port = _start(argv, env, re.compile(r"driver server on http://127\.0\.0\.1:(\d+)"))
    return Target("direct", port, proc)


def start_gateway(python: str, name: str, src: Path, upstream: int, store: Path | None) -> Target:
    env = {
        **os.environ,
        "PYTHONPATH": _pythonpath(src),
        "A2RL_GATEWAY_PROVIDER": "anthropic",
        "A2RL_GATEWAY_TOKEN": TOKEN,
        "A2RL_GATEWAY_BASE_URL": f"http://127.0.0.1:{upstream}",
        "A2RL_GATEWAY_MODEL": "claude-sonnet-4-5",
        "A2RL_GATEWAY_KEY_SOURCE": "stdin",
        "A2RL_GATEWAY_PORT": "0",
    }
    if store is not None:
        env.update({"A2RL_STORE_URI": str(store), "A2RL_RUN_PREFIX": PREFIX})
    argv = [
        python,
        "-P",  # not the working directory first: the code is `src`'s, the `--before` checkout's too
        "-c",
        "import sys; from a2rl_cli import main; sys.exit(main(sys.argv[1:]))",
        "gateway",
        "serve",
    ]
    proc, port = _start(argv, env, re.compile(r"listening on http://127\.0\.0\.1:(\d+)"), f"{KEY}\n".encode())
    return Target(name, port, proc, store)


def start_bare(python: str, mode: str, upstream: int) -> Target:
    argv = [python, str(ROOT / "bench" / "bare_relay.py"), mode, f"http://127.0.0.1:{upstream}"]
    proc, port = _start(argv, dict(os.environ), re.compile(r"listening on http://127\.0\.0\.1:(\d+)"))
    return Target(f"bare-{mode}", port, proc)


def pin(pid: int, cpus: set[int]) -> None:
    """Bind every thread of process `pid` (and what they start later) to `cpus`."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def _records(t: Target) -> int | None:
    if t.store is None:
        return None
    calls = t.store / PREFIX / "driver" / "calls"
    if not calls.is_dir():
        return 0
    batched = sum(_lines(f) for f in calls.glob("*.jsonl"))  # a record a line
    return batched + sum(1 for _ in calls.glob("*.json"))  # a checkout from before the batches


#: (batch object, its size) → its records: `settle` polls every 5 ms, and a batch, once there, is
#: never rewritten; reading every batch again each time took CPU from the writer being timed.
_LINE_COUNTS: dict[tuple[Path, int], int] = {}


def _lines(path: Path) -> int:
    key = (path, path.stat().st_size)
    if key not in _LINE_COUNTS:
        _LINE_COUNTS[key] = path.read_bytes().count(b"\n")
    return _LINE_COUNTS[key]


def settle(t: Target, timeout_s: float = 120.0) -> float:
    """Seconds until every call sent to a gateway has its record in the store."""
    t0 = time.perf_counter()
    while (_records(t) or 0) < t.sent and t.store is not None and time.perf_counter() - t0 < timeout_s:
        time.sleep(0.005)
    return time.perf_counter() - t0


def sequential(targets: list[Target], n: int, warmup: int = 20) -> None:
    clients = [Client(t.port) for t in targets]
    for i in range(warmup + n):
        for t, c in zip(targets, clients, strict=True):
            t0 = time.perf_counter()
            status = c.call(REQUESTS[i % 2])
            dt = time.perf_counter() - t0
            assert status == 200, (t.name, status)
            t.sent += 1
            if i >= warmup:
                t.latencies.append(dt)
    for c in clients:
        c.close()


def throughput(t: Target, concurrency: int, seconds: float) -> float:
    counts = [0] * concurrency
    stop = threading.Event()
    start = threading.Barrier(concurrency + 1)

    def worker(k: int) -> None:
        c = Client(t.port)
        start.wait()
        i = k
        while not stop.is_set():
            status = c.call(REQUESTS[i % 2])
            assert status == 200, (t.name, status)
            counts[k] += 1
            i += 1
        c.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    t.sent += sum(counts)
    return sum(counts) / elapsed


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=400, help="sequential calls per target and round")
    ap.add_argument("--seconds", type=float, default=3.0, help="throughput phase per target and round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--before", type=Path, help="a checkout of the code to compare (e.g. c4f0a06)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--no-store", action="store_true", help="gateways without a store: no records, no spans")
    ap.add_argument(
        "--floor", action="store_true", help="also relays without the gateway's work (throughput)"
    )
    ap.add_argument(
        "--upstream-ms",
        type=float,
        default=0.0,
        help="the upstream waits this long before each answer (a provider's latency; default 0: the "
        "scripted driver's CPU alone, the gateway's worst case)",
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="relays on the last CPU, client and upstream on the others (a gateway in a pod of its own)",
    )
    args = ap.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) < 2:
        raise SystemExit("--pin needs two CPUs or more")
    relay_cpus, endpoint_cpus = set(cpus[-1:]), set(cpus[:-1])
    if args.pin:
        pin(os.getpid(), endpoint_cpus)  # the client's threads, started later, inherit it
    pinning = f"; relays on CPU {cpus[-1]}, client and upstream on {sorted(endpoint_cpus)}"
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} {len(cpus)} CPUs, {load()}{pinning if args.pin else ''}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="a2rl-bench-gw-") as tmp:
        upstream = start_upstream(args.python, args.upstream_ms)

        def store(name: str) -> Path | None:
            return None if args.no_store else Path(tmp) / name

        gateways = [start_gateway(args.python, "after", ROOT, upstream.port, store("after"))]
        if args.before:
            gateways.insert(
                0, start_gateway(args.python, "before", args.before.resolve(), upstream.port, store("before"))
            )
        bare = (
            [start_bare(args.python, m, upstream.port) for m in ("threads", "aiohttp")] if args.floor else []
        )
        targets = [upstream, *gateways, *bare]
        if args.pin:
            for t in targets:
                assert t.proc is not None
                pin(t.proc.pid, endpoint_cpus if t is upstream else relay_cpus)
        try:
            for r in range(args.rounds):
                order = targets[r % len(targets) :] + targets[: r % len(targets)]
                lat0 = {t.name: len(t.latencies) for t in targets}
                sequential([t for t in order if t not in bare], args.requests)
                line = [f"round {r + 1}: {load()}"]
                d = upstream.latencies[lat0["direct"] :]
                line.append(f"direct p50 {pct(d, 0.5) * 1e3:.2f} p99 {pct(d, 0.99) * 1e3:.2f} ms")
                for g in gateways:
                    x = g.latencies[lat0[g.name] :]
                    line.append(
                        f"{g.name} +p50 {(pct(x, 0.5) - pct(d, 0.5)) * 1e3:.2f} "
                        f"+p99 {(pct(x, 0.99) - pct(d, 0.99)) * 1e3:.2f} ms"
                    )
                for g in gateways:
                    g.settle_s.append(settle(g))
                for t in order:
                    before_cpu = {x.name: cpu_s(x.proc) for x in (upstream, t)}
                    sent = t.sent
                    t.rates.append(throughput(t, args.concurrency, args.seconds))
                    t.settle_s.append(settle(t))
                    for x in {upstream.name: upstream, t.name: t}.values():
                        x.cpu_ms.append((cpu_s(x.proc) - before_cpu[x.name]) * 1e3 / (t.sent - sent))
                rates = [f"direct {upstream.rates[-1]:.0f}/s"]
                rates += [
                    f"{g.name} {g.rates[-1]:.0f}/s ({g.rates[-1] / upstream.rates[-1]:.2f}x, "
                    f"records settled {g.settle_s[-1]:.2f} s, {g.cpu_ms[-1]:.2f} ms CPU/call)"
                    for g in gateways + bare
                ]
                print("; ".join(line) + f"\n  {args.concurrency}-way: " + ", ".join(rates), flush=True)
        finally:
            for t in targets:
                if t.proc is not None:
                    t.proc.terminate()
                    t.proc.wait(60)
        d = upstream.latencies
        print(
            f"\nall rounds ({load()}): direct p50 {pct(d, 0.5) * 1e3:.2f} ms, "
            f"p99 {pct(d, 0.99) * 1e3:.2f} ms; upstream CPU {statistics.median(upstream.cpu_ms):.2f} ms/call"
        )
        for b in bare:
            ratios = [a / d for a, d in zip(b.rates, upstream.rates, strict=True)]
            print(
                f"{b.name}: {args.concurrency}-way {statistics.median(b.rates):.0f} req/s, ratio median "
                f"{statistics.median(ratios):.2f}x, CPU {statistics.median(b.cpu_ms):.2f} ms/call"
            )
        for g in gateways:
            x = g.latencies
            ratios = [a / b for a, b in zip(g.rates, upstream.rates, strict=True)]
            summary = (
                json.loads((g.store / PREFIX / "driver" / "summary.json").read_text()) if g.store else {}
            )
            recorded = (
                ""
                if g.store is None
                else f"; summary calls {summary.get('calls')} of {g.sent} sent, records {_records(g)}"
            )
            print(
                f"{g.name:>6}: adds p50 {(pct(x, 0.5) - pct(d, 0.5)) * 1e3:.2f} ms, "
                f"p99 {(pct(x, 0.99) - pct(d, 0.99)) * 1e3:.2f} ms; {args.concurrency}-way "
                f"{statistics.median(g.rates):.0f} vs {statistics.median(upstream.rates):.0f} req/s, "
                f"ratio median {statistics.median(ratios):.2f}x "
                f"(rounds {', '.join(f'{q:.2f}' for q in ratios)}); "
                f"gateway CPU {statistics.median(g.cpu_ms):.2f} ms/call{recorded}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
