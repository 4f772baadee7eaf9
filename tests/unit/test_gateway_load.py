"""The gateway under load, in front of the shared scripted driver (`tests.support.driver_server`):
hundreds of concurrent streamed and non-streamed calls are metered exactly (summary, records and
`/metrics` all equal to the usage the driver sent), `/metrics` follows the calls, and no record is
lost when the gateway stops right after the calls — on SIGTERM, or when the budget ends the run."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from a2rl_gateway import Gateway, GatewayConfig, GatewayProcess, Limits, new_run_token

from a2rl.records.base import load_record
from a2rl.records.driver import DriverCallRecord, DriverSummary
from a2rl.records.driver_calls import iter_driver_calls
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from tests.support.driver_server import DriverServer, Usage, default_script
from tests.unit.test_gateway_driver_server import anthropic_body, chat_body, responses_body
from tests.unit.test_gateway_server import auth_headers, request

KEY = "sk-driver-MARKER-5b1e8c0d9a"
PREFIX = "local/gwl-0123456789ab"
LAYOUT = RunLayout.from_prefix(PREFIX)

#: (provider, the bodies its stacks send): every protocol of the provider, streamed and not.
MIXES = {
    "anthropic": [anthropic_body],
    "openai": [chat_body, responses_body],
}


@pytest.fixture
def driver() -> Iterator[DriverServer]:
    with DriverServer(default_script(), api_key=KEY) as server:
        yield server


def metrics(url: str | None) -> dict[str, float]:
    """`GET /metrics` as {'name{labels}': value} (without HELP/TYPE lines)."""
    reply = request(url, "GET", "/metrics")
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, float] = {}
    for line in reply.body.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def total(series: dict[str, float], name: str, **labels: str) -> float:
    """The sum of `name`'s series that carry every label given."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        v for k, v in series.items() if re.fullmatch(rf"{name}(\{{.*\}})?", k) and all(w in k for w in want)
    )


def mixed_calls(provider: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    """`n` calls: each protocol of the provider, streamed and not, at every step of the script."""
    builds = MIXES[provider]
    return [builds[i % len(builds)](i % 4, (i // len(builds)) % 2 == 1) for i in range(n)]


def call_all(
    url: str | None, provider: str, token: str, calls: list[tuple[str, dict[str, Any]]], workers: int
) -> list[int]:
    headers = auth_headers(provider, token)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda c: request(url, "POST", c[0], c[1], headers).status, calls))


def stored_calls(store: LocalStore) -> list[DriverCallRecord]:
    return list(iter_driver_calls(store, LAYOUT))


@pytest.mark.parametrize("provider", sorted(MIXES))
def test_hundreds_of_concurrent_calls_are_metered_exactly(
    driver: DriverServer, tmp_path: Path, provider: str
) -> None:
    store = LocalStore(tmp_path / "store")
    base = driver.url + ("/v1" if provider == "openai" else "")
    cfg = GatewayConfig(provider=provider, token=new_run_token(), base_url=base, run_prefix=PREFIX, port=0)
    gw = Gateway(cfg, upstream_key=KEY, store=store)
    gw.start()
    n = 300
    try:
        statuses = call_all(gw.url, provider, cfg.token, mixed_calls(provider, n), workers=24)
        series = metrics(gw.url)
    finally:
        assert gw.stop(30)
    assert statuses == [200] * n
    sent = driver.usage_total()
    assert len(driver.model_calls()) == n and sent.input > 0 and sent.output > 0
    summary = load_record(store, LAYOUT.driver_summary, DriverSummary)
    assert (summary.calls, summary.errors, summary.usage_missing_calls) == (n, 0, 0)
    assert (summary.input_tokens, summary.output_tokens, summary.cached_tokens) == (
        sent.input,
        sent.output,
        sent.cached,
    )
    records = stored_calls(store)
    assert [r.index for r in records] == list(range(1, n + 1))
    assert len(list(store.list(LAYOUT.driver_calls))) < n // 4  # in batches, not an object a call
    summed = Usage()
    for r in records:
        assert r.usage is not None and r.status == 200
        summed = summed + Usage(r.usage.input_tokens, r.usage.output_tokens, r.usage.cached_tokens)
    assert summed == sent
    assert sum(r.stream is True for r in records) == n // 2
    # /metrics counted the same calls and tokens
    assert total(series, "a2rl_driver_calls_total", outcome="ok") == n
    assert total(series, "a2rl_driver_tokens_total", kind="input") == sent.input
    assert total(series, "a2rl_driver_tokens_total", kind="output") == sent.output
    assert total(series, "a2rl_driver_tokens_total", kind="cached") == sent.cached
    assert total(series, "a2rl_driver_upstream_seconds_count") == n
    assert total(series, "a2rl_driver_cost_usd_total") == pytest.approx(summary.cost_usd)
    # a handful of pooled upstream connections served them all (one each before)
    assert gw.upstream.opened <= 24


def test_metrics_follow_the_calls(driver: DriverServer, tmp_path: Path) -> None:
    cfg = GatewayConfig(
        provider="anthropic",
        token=new_run_token(),
        base_url=driver.url,
        run_prefix=PREFIX,
        port=0,
        limits=Limits(tokens=10_000_000, cost_usd=50.0),
    )
    gw = Gateway(cfg, upstream_key=KEY, store=LocalStore(tmp_path / "store"))
    gw.start()
    try:
        before = metrics(gw.url)  # served without the token, like /health
        assert total(before, "a2rl_driver_calls_total") == 0
        assert (
            before["a2rl_driver_budget_tokens"] == 10_000_000 and before["a2rl_driver_budget_cost_usd"] == 50
        )
        assert before["a2rl_driver_budget_exhausted"] == 0
        headers = auth_headers("anthropic", cfg.token)
        for stream in (False, True):
            path, body = anthropic_body(1, stream)
            assert request(gw.url, "POST", path, body, headers).status == 200
        path, body = anthropic_body(0, False)
        assert request(gw.url, "POST", path, body, {"x-api-key": "wrong"}).status == 401
        # A handler leaves "in flight" just after its answer's last byte: the client may be first.
        deadline = time.monotonic() + 5
        while (after := metrics(gw.url))["a2rl_driver_calls_in_flight"] and time.monotonic() < deadline:
            time.sleep(0.01)
        summary = gw.summary()
    finally:
        assert gw.stop(10)
    sent = driver.usage_total()
    ok = 'a2rl_driver_calls_total{protocol="anthropic-messages",model="claude-sonnet-4-5",outcome="ok"}'
    assert after[ok] == 2
    assert after['a2rl_driver_refusals_total{reason="unauthorized"}'] == 1
    assert total(after, "a2rl_driver_calls_total", outcome="refused") == 1
    assert total(after, "a2rl_driver_tokens_total", kind="input") == sent.input == summary.input_tokens
    assert total(after, "a2rl_driver_tokens_total", kind="output") == sent.output == summary.output_tokens
    assert (
        total(after, "a2rl_driver_cost_usd_total") == pytest.approx(summary.cost_usd) and summary.cost_usd > 0
    )
    upstream = 'a2rl_driver_upstream_seconds_count{protocol="anthropic-messages",outcome="ok"}'
    assert after[upstream] == 2
    assert (
        after['a2rl_driver_upstream_seconds_bucket{protocol="anthropic-messages",outcome="ok",le="+Inf"}']
        == 2
    )
    assert after["a2rl_driver_calls_in_flight"] == 0


def test_model_labels_are_bounded(driver: DriverServer, tmp_path: Path) -> None:
    cfg = GatewayConfig(provider="anthropic", token=new_run_token(), base_url=driver.url, port=0)
    gw = Gateway(cfg, upstream_key=KEY)
    gw.start()
    try:
        headers = auth_headers("anthropic", cfg.token)
        for i in range(40):  # the driver answers in the requested model's name
            path, body = anthropic_body(0, False)
            body["model"] = f"made-up-{i}"
            assert request(gw.url, "POST", path, body, headers).status == 200
        series = metrics(gw.url)
    finally:
        gw.stop(10)
    models = {m.group(1) for k in series if (m := re.search(r'model="([^"]*)"', k))}
    assert len(models) == 33 and "other" in models  # MAX_MODELS names, then `other`
    assert total(series, "a2rl_driver_calls_total") == 40


class SlowStore(LocalStore):
    """A store that takes 200 ms a write (a slow remote one): the writer lags behind the calls."""

    def put_bytes(self, key: str, data: bytes) -> None:
        time.sleep(0.2)
        super().put_bytes(key, data)


def test_stop_writes_every_queued_record(driver: DriverServer, tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "store")
    cfg = GatewayConfig(
        provider="anthropic", token=new_run_token(), base_url=driver.url, run_prefix=PREFIX, port=0
    )
    gw = Gateway(cfg, upstream_key=KEY, store=store)
    gw.start()
    n = 120
    try:
        statuses = call_all(gw.url, "anthropic", cfg.token, mixed_calls("anthropic", n), workers=16)
        assert len(stored_calls(store)) < n  # still queued when the stop begins
    finally:
        assert gw.stop(30)
    assert statuses == [200] * n
    assert sorted(r.index for r in stored_calls(store)) == list(range(1, n + 1))
    assert load_record(store, LAYOUT.driver_summary, DriverSummary).calls == n


def test_no_record_is_lost_when_sigterm_follows_the_calls(driver: DriverServer, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    cfg = GatewayConfig(
        provider="anthropic",
        token=new_run_token(),
        base_url=driver.url,
        store_uri=store.uri,
        run_prefix=PREFIX,
        port=0,
    )
    proc = GatewayProcess(
        cfg, tmp_path / "gateway.log", upstream_key=KEY, base_env={**os.environ, "OTEL_SDK_DISABLED": "true"}
    )
    n = 200
    proc.start()
    try:
        statuses = call_all(proc.url, "anthropic", cfg.token, mixed_calls("anthropic", n), workers=16)
    finally:
        code = proc.stop(30)  # SIGTERM at once: records of the last calls are still queued
    assert code == 0 and statuses == [200] * n
    assert sorted(r.index for r in stored_calls(store)) == list(range(1, n + 1))
    summary = load_record(store, LAYOUT.driver_summary, DriverSummary)
    sent = driver.usage_total()
    assert (summary.calls, summary.input_tokens, summary.output_tokens) == (n, sent.input, sent.output)


def test_no_record_is_lost_when_the_budget_stops_the_run(driver: DriverServer, tmp_path: Path) -> None:
    """As the runner does: the budget ends, `on_exhausted` fires, the gateway is stopped at once
    while the agent's calls keep coming; every call that got a number has its record."""
    store = LocalStore(tmp_path / "store")
    cfg = GatewayConfig(
        provider="anthropic",
        token=new_run_token(),
        base_url=driver.url,
        run_prefix=PREFIX,
        port=0,
        limits=Limits(tokens=20_000),
    )
    stopped = threading.Event()
    gw: Gateway

    def on_exhausted(reason: str) -> None:
        threading.Thread(target=lambda: (gw.stop(30), stopped.set()), daemon=True).start()

    gw = Gateway(cfg, upstream_key=KEY, store=store, on_exhausted=on_exhausted)
    gw.start()
    headers = auth_headers("anthropic", cfg.token)

    def agent() -> list[int]:
        got: list[int] = []
        while not stopped.is_set():
            path, body = anthropic_body(1, len(got) % 2 == 1)
            try:
                got.append(request(gw.url, "POST", path, body, headers).status)
            except OSError:
                break  # the gateway stopped listening
        return got

    with ThreadPoolExecutor(8) as pool:
        answered = [s for got in pool.map(lambda _: agent(), range(8)) for s in got]
    assert stopped.wait(30)
    records = stored_calls(store)
    summary = load_record(store, LAYOUT.driver_summary, DriverSummary)
    assert summary.budget.exhausted and summary.calls == len(records) >= len(answered)
    assert sorted(r.index for r in records) == list(range(1, len(records) + 1))
    assert 200 in answered and set(answered) <= {200, 403, 503}
    ok = [r for r in records if r.status == 200]
    assert sum(r.usage.total_tokens for r in ok if r.usage) == summary.total_tokens
    assert json.dumps([r.to_json() for r in records]).count(KEY) == 0
