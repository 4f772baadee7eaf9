"""a2rl.metrics: the Prometheus text exposition format of /metrics."""

from __future__ import annotations

import threading

import pytest

from a2rl.metrics import CONTENT_TYPE, MetricError, Registry


def test_counters_gauges_and_histograms_render_in_the_exposition_format() -> None:
    registry = Registry()
    calls = registry.counter("a2rl_driver_calls_total", "Driver calls.", ["outcome"])
    phase = registry.gauge("a2rl_benchruns", "BenchRuns by phase.", ["phase"])
    wait = registry.histogram("a2rl_queue_wait_seconds", "Queue wait.", buckets=(1, 10))
    calls.inc(outcome="ok")
    calls.inc(2, outcome="ok")
    calls.inc(outcome='refused "budget"\n')
    phase.set(3, phase="Running")
    wait.observe(0.5)
    wait.observe(10)
    wait.observe(11.25)
    assert registry.render() == (
        "# HELP a2rl_benchruns BenchRuns by phase.\n"
        "# TYPE a2rl_benchruns gauge\n"
        'a2rl_benchruns{phase="Running"} 3\n'
        "# HELP a2rl_driver_calls_total Driver calls.\n"
        "# TYPE a2rl_driver_calls_total counter\n"
        'a2rl_driver_calls_total{outcome="ok"} 3\n'
        'a2rl_driver_calls_total{outcome="refused \\"budget\\"\\n"} 1\n'
        "# HELP a2rl_queue_wait_seconds Queue wait.\n"
        "# TYPE a2rl_queue_wait_seconds histogram\n"
        'a2rl_queue_wait_seconds_bucket{le="1"} 1\n'
        'a2rl_queue_wait_seconds_bucket{le="10"} 2\n'
        'a2rl_queue_wait_seconds_bucket{le="+Inf"} 3\n'
        "a2rl_queue_wait_seconds_sum 21.75\n"
        "a2rl_queue_wait_seconds_count 3\n"
    )
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_set_all_replaces_every_series() -> None:
    registry = Registry()
    runs = registry.gauge("a2rl_benchruns", "BenchRuns by phase.", ["namespace", "phase"])
    runs.set_all({("a", "Running"): 2, ("b", "Pending"): 1})
    runs.set_all({("a", "Succeeded"): 2})
    assert runs.value(namespace="a", phase="Succeeded") == 2
    assert runs.value(namespace="a", phase="Running") == 0
    assert 'phase="Pending"' not in registry.render()


def test_collectors_run_before_each_render() -> None:
    registry = Registry()
    seen = registry.gauge("a2rl_seen", "Seen.")
    count = iter(range(1, 10))
    registry.on_collect(lambda: seen.set(next(count)))
    assert "a2rl_seen 1\n" in registry.render()
    assert "a2rl_seen 2\n" in registry.render()


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda r: r.counter("9bad", "x"), "not a Prometheus metric"),
        (lambda r: r.counter("ok_total", "x", ["le"]), "reserved label"),
        (lambda r: r.counter("ok_total", "x", ["outcome"]).inc(phase="x"), "takes the labels"),
        (lambda r: r.counter("ok_total", "x").inc(-1), "cannot go down"),
        (lambda r: (r.gauge("twice", "x"), r.gauge("twice", "y")), "registered twice"),
        (lambda r: r.histogram("h", "x", buckets=()), "buckets"),
    ],
)
def test_misuse_is_refused(action: object, message: str) -> None:
    with pytest.raises(MetricError, match=message):
        action(Registry())  # type: ignore[operator]


def test_concurrent_increments_are_all_counted() -> None:
    registry = Registry()
    tokens = registry.counter("a2rl_driver_tokens_total", "Tokens.", ["kind"])
    latency = registry.histogram("a2rl_latency_seconds", "Latency.")

    def work() -> None:
        for _ in range(5000):
            tokens.inc(3, kind="input")
            latency.observe(0.002)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tokens.value(kind="input") == 8 * 5000 * 3
    assert latency.count() == 8 * 5000
