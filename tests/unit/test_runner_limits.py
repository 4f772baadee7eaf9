"""The agent's limits from `spec.resources` (pure), its disk use, and the watch that ends a run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from a2rl_runner.sandbox.limits import (
    AGENT_MAX_PROCESSES,
    LimitWatch,
    agent_limits,
    contain_agent,
    disk_usage,
)

from a2rl.api.benchrun import ResourcesSpec
from a2rl.api.common import quantity_value
from a2rl.limits import EXCEEDED_MEMORY, EXCEEDED_PROCESSES, MECHANISM_RLIMITS, Containment, Limits


def test_quantities() -> None:
    assert quantity_value("8Gi") == 8 * 2**30 and quantity_value("500m") == 0.5
    assert quantity_value("1.5G") == 1.5e9 and quantity_value("2") == 2
    with pytest.raises(ValueError, match="not a quantity"):
        quantity_value("8 GiB")


def test_limits_follow_the_resources_a_pod_would_get() -> None:
    wanted = agent_limits(ResourcesSpec.model_validate({"memory": "4Gi", "ephemeralStorage": "10Gi"}))
    assert wanted.limits == Limits(4 * 2**30, AGENT_MAX_PROCESSES, 10 * 2**30)
    assert wanted.disk_bytes == (20 + 10) * 2**30  # the workspace's default size + ephemeral storage
    assert wanted.shm_bytes == 2**30
    sized = agent_limits(ResourcesSpec.model_validate({"memory": "128Mi", "workspaceSize": "1Gi"}))
    assert sized.disk_bytes == 2**30 + 20 * 2**30 and sized.shm_bytes == 64 << 20


def test_disk_use_counts_blocks_once_and_follows_no_link(tmp_path: Path) -> None:
    (tmp_path / "dense.bin").write_bytes(os.urandom(1 << 20))
    with (tmp_path / "sparse.bin").open("wb") as f:
        f.truncate(1 << 30)  # 1 GiB apparent, nothing on disk
    os.link(tmp_path / "dense.bin", tmp_path / "hardlink.bin")
    (tmp_path / "outside").symlink_to("/usr")
    used = disk_usage([tmp_path])
    assert 1 << 20 <= used < 2 << 20


class _Hit(Containment):
    def __init__(self, hit: str | None) -> None:
        super().__init__("fake", Limits())
        self.hit = hit

    def exceeded(self) -> str | None:
        return self.hit


@pytest.mark.parametrize(
    ("hit", "reason"),
    [
        (EXCEEDED_MEMORY, "memory_limit_exceeded"),
        (EXCEEDED_PROCESSES, "process_limit_exceeded"),
        (None, None),
    ],
)
def test_the_watch_names_the_limit_hit(tmp_path: Path, hit: str | None, reason: str | None) -> None:
    assert LimitWatch(_Hit(hit), 1 << 30, [tmp_path])() == reason


def test_the_watch_ends_a_run_past_its_disk(tmp_path: Path) -> None:
    watch = LimitWatch(_Hit(None), 1 << 20, [tmp_path])
    assert watch() is None
    (tmp_path / "checkpoint.bin").write_bytes(os.urandom(2 << 20))
    watch._next_disk_check = 0.0  # the next measure is due
    assert watch() == "disk_limit_exceeded" and watch.disk_used >= 2 << 20


def test_without_a_uid_of_its_own_rlimits_set_no_process_limit() -> None:
    wanted = agent_limits(ResourcesSpec())
    box = contain_agent("a2rl-test-agent", wanted, own_uid=False)
    try:
        if box.mechanism == MECHANISM_RLIMITS:
            assert box.limits.max_processes is None  # RLIMIT_NPROC would count the user's processes
        else:
            assert box.limits.max_processes == AGENT_MAX_PROCESSES
    finally:
        box.close()
