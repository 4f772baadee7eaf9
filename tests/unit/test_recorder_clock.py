"""The pod's agent clock survives a recorder restart (its start is the run's record in the store)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from a2rl_recorder.clock import recorded_run_start
from a2rl_recorder.spool import SpoolingStore

from a2rl.launch import a2rl_argv
from a2rl.store.local import LocalStore
from tests.support.recorder_support import LAYOUT, PREFIX, make_workspace


def _time(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/time", timeout=10) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
    return doc


def _start_recorder(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [*a2rl_argv(), "recorder", "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on http://127.0.0.1:" in line, line
    return proc, line.strip().rsplit(" ", 1)[-1]


def test_restarted_recorder_keeps_the_agents_clock(tmp_path: Path) -> None:
    """As in a pod (no `A2RL_RUN_START`): the first recorder records its start; a recorder
    killed (SIGKILL: no drain) and started again reports the same start and deadline, not a new one."""
    ws = make_workspace(tmp_path)
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    env = {
        **os.environ,
        "A2RL_STORE_URI": (tmp_path / "store").as_uri(),
        "A2RL_RUN_PREFIX": PREFIX,
        "A2RL_SPOOL_DIR": str(tmp_path / "spool"),
        "WORKSPACE": str(ws),
        "TASK": "arith",
        "A2RL_RUN_TIMEOUT": "600",
        "A2RL_HELDOUT_PATH": str(heldout),
    }
    env.pop("A2RL_RUN_START", None)
    first, url = _start_recorder(env)
    try:
        before = _time(url)
    finally:
        first.kill()
        first.wait(30)
    time.sleep(1.5)
    second, url = _start_recorder(env)
    try:
        after = _time(url)
    finally:
        second.kill()
        second.wait(30)
    assert after["start_time"] == pytest.approx(before["start_time"], abs=1e-3)
    assert after["deadline"] == before["deadline"]
    assert after["elapsed"] >= 1.5 and after["remaining"] <= 600 - 1.5
    record = LocalStore(tmp_path / "store").get_json(LAYOUT.run_clock)
    assert record["start_time"] == pytest.approx(before["start_time"], abs=1e-3)
    assert json.loads((ws / "run_meta.json").read_text())["start_time"] == int(before["start_time"])


class _DownStore(LocalStore):
    """A store that cannot be reached (every call fails as a connection error would)."""

    def _fail(self, *_: Any, **__: Any) -> Any:
        raise ConnectionRefusedError("store down")

    get_bytes = put_bytes = put_file = put_file_verified = exists = _fail


def test_clock_record_waits_in_the_spool_while_the_store_is_down(tmp_path: Path) -> None:
    """First start with the store down: the record is spooled (the recorder's emptyDir); a restart
    on the same spool, store still down, reads it from there; the store gets it once it is back."""
    down = _DownStore(tmp_path / "store")
    spool = SpoolingStore(down, tmp_path / "spool", min_backoff_s=0.05, max_backoff_s=0.1)
    start = recorded_run_start(spool, LAYOUT, now=lambda: 1000.0, retry_s=0.1)
    assert start == 1000.0
    spool.close(0.2)
    restarted = SpoolingStore(down, tmp_path / "spool", min_backoff_s=0.05, max_backoff_s=0.1)
    assert recorded_run_start(restarted, LAYOUT, now=lambda: 2000.0, retry_s=0.1) == 1000.0
    restarted.close(0.2)
    healthy = LocalStore(tmp_path / "store")
    back = SpoolingStore(healthy, tmp_path / "spool")
    assert back.close(10)
    assert healthy.get_json(LAYOUT.run_clock)["start_time"] == 1000.0


def test_an_existing_clock_record_is_never_rewritten(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    assert recorded_run_start(store, LAYOUT, now=lambda: 5.0) == 5.0
    assert recorded_run_start(store, LAYOUT, now=lambda: 9.0) == 5.0
    assert store.get_json(LAYOUT.run_clock)["start_time"] == 5.0
