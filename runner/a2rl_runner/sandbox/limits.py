"""What the agent may use on one machine: memory, processes, file size and disk, from the
BenchRun's `spec.resources` (the same numbers a cluster gives its pod).

- memory `spec.resources.memory`, processes `AGENT_MAX_PROCESSES`, the largest file
  `ephemeralStorage`: by cgroup where this machine lets us make one (v2, else v1), else rlimits
  (`a2rl.limits.contain`; rlimits count processes per uid, so without a uid of the run's own
  — a runner that is not root — no process limit is set);
- `/dev/shm`: a tmpfs of a quarter of the memory (the kernel's default is half the machine's);
- disk: the workspace and the agent's /tmp and home together at most `workspaceSize`
  (default `LOCAL_WORKSPACE_SIZE`, the operator's) + `ephemeralStorage`, checked while it runs.

`LimitWatch` is the supervisor's `stop_when`: a limit hit (the OOM killer acted, a fork was
refused at the process limit, the disk use passed its bound) ends the run with its own reason;
what was submitted and recorded is kept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from a2rl.api.benchrun import ResourcesSpec
from a2rl.api.common import quantity_value
from a2rl.limits import EXCEEDED_MEMORY, EXCEEDED_PROCESSES, MECHANISM_RLIMITS, Containment, Limits, contain
from a2rl_runner.supervisor import (
    DISK_LIMIT_EXCEEDED,
    MEMORY_LIMIT_EXCEEDED,
    PROCESS_LIMIT_EXCEEDED,
    EndReason,
)

#: Tasks (processes and threads) the agent's tree may have at once.
AGENT_MAX_PROCESSES = 4096
#: The workspace's share of the disk bound when the BenchRun names no `workspaceSize`.
LOCAL_WORKSPACE_SIZE = "20Gi"
#: Smallest /dev/shm (PyTorch's data loaders need some).
MIN_SHM_BYTES = 64 << 20
#: Seconds between two measures of the disk use.
DISK_CHECK_EVERY_S = 10.0


@dataclass(frozen=True)
class AgentLimits:
    limits: Limits
    disk_bytes: int
    shm_bytes: int


def agent_limits(resources: ResourcesSpec) -> AgentLimits:
    """The agent's limits from `spec.resources` (module docstring)."""
    memory = int(quantity_value(resources.memory))
    ephemeral = int(quantity_value(resources.ephemeral_storage))
    workspace = int(quantity_value(resources.workspace_size or LOCAL_WORKSPACE_SIZE))
    return AgentLimits(
        limits=Limits(memory_bytes=memory, max_processes=AGENT_MAX_PROCESSES, file_size_bytes=ephemeral),
        disk_bytes=workspace + ephemeral,
        shm_bytes=max(memory // 4, MIN_SHM_BYTES),
    )


def contain_agent(name: str, wanted: AgentLimits, *, own_uid: bool) -> Containment:
    """The agent's containment; without a uid of its own, rlimits set no process limit (it would
    count every process of the user running `a2rl run`)."""
    box = contain(name, wanted.limits)
    if box.mechanism == MECHANISM_RLIMITS and not own_uid:
        box.close()
        unshared = Limits(wanted.limits.memory_bytes, None, wanted.limits.file_size_bytes)
        box = contain(name, unshared, mechanism=MECHANISM_RLIMITS)
    return box


def describe(box: Containment, wanted: AgentLimits) -> str:
    """One line for the run's output and `run.json`: the mechanism and every limit."""
    disk, shm = wanted.disk_bytes / 2**30, wanted.shm_bytes / 2**30
    return f"{box.describe()}, disk {disk:.1f} GiB, /dev/shm {shm:.2f} GiB"


def disk_usage(paths: Iterable[Path]) -> int:
    """Bytes the files under `paths` take on disk (allocated blocks: a sparse file counts what it
    uses), each inode once, links not followed."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in paths:
        for directory, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                try:
                    st = os.lstat(os.path.join(directory, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


class LimitWatch:
    """`stop_when` of the agent's supervisor: the first limit hit, as an end reason."""

    def __init__(self, box: Containment, disk_bytes: int, paths: Sequence[Path]) -> None:
        self.box = box
        self.disk_bytes = disk_bytes
        self.paths = tuple(paths)
        self._next_disk_check = 0.0
        self.disk_used = 0

    def __call__(self) -> EndReason | None:
        hit = self.box.exceeded()
        if hit == EXCEEDED_MEMORY:
            return MEMORY_LIMIT_EXCEEDED
        if hit == EXCEEDED_PROCESSES:
            return PROCESS_LIMIT_EXCEEDED
        now = time.monotonic()
        if now >= self._next_disk_check:
            self._next_disk_check = now + DISK_CHECK_EVERY_S
            self.disk_used = disk_usage(self.paths)
        return DISK_LIMIT_EXCEEDED if self.disk_used > self.disk_bytes else None
