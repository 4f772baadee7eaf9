"""Limits for one contained process tree: memory, processes, file size, CPU time.

`contain(name, limits)` picks the best mechanism this machine lets us use:

- ``cgroup-v2``: a child of our own cgroup in the unified hierarchy, when that cgroup has the
  ``memory`` and ``pids`` controllers (a delegated subtree: systemd user slices, most containers).
  ``memory.max`` = the limit and ``memory.swap.max`` = 0 (RAM + swap stay under the limit),
  ``pids.max``.
- ``cgroup-v1``: children of our own cgroups in the v1 ``memory`` and ``pids`` hierarchies (hybrid
  hosts; needs write access there, e.g. root). ``memory.limit_in_bytes`` and, with swap
  accounting, ``memory.memsw.limit_in_bytes`` (RAM + swap), ``pids.max``.
- ``rlimits``: nothing else works (the usual unprivileged runner). Memory is ``RLIMIT_DATA`` and
  processes ``RLIMIT_NPROC``; see `RlimitContainment` for what those do and do not cover.

A cgroup counts the whole tree (every descendant, every thread, shared memory and page cache
written by it) and the kernel's OOM killer acts on the tree: `exceeded()` can then say which limit
was hit. ``RLIMIT_FSIZE`` and ``RLIMIT_CPU`` are set in every mechanism (cgroups have no
equivalent); they are per process and only ever lowered (raising a hard limit needs
CAP_SYS_RESOURCE).

Use::

    with contain("eval-00003", Limits(memory_bytes=8 << 30, max_processes=512)) as box:
        proc = subprocess.Popen(argv, preexec_fn=box.preexec)
        proc.wait()
        if box.exceeded() == "memory": ...

A tree that must run as another user: pass the ids to `preexec_fn(uid=…, gid=…)` instead of
Popen's ``user=``/``group=``. CPython switches ids *before* it calls ``preexec_fn`` (checked on
3.11), and a process that is no longer root cannot join a cgroup; `preexec_fn` joins while
still root, then drops to the ids.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import resource
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MECHANISM_CGROUP_V2: Final = "cgroup-v2"
MECHANISM_CGROUP_V1: Final = "cgroup-v1"
MECHANISM_RLIMITS: Final = "rlimits"
MECHANISMS: Final = (MECHANISM_CGROUP_V2, MECHANISM_CGROUP_V1, MECHANISM_RLIMITS)
EXCEEDED_MEMORY: Final = "memory"
EXCEEDED_PROCESSES: Final = "processes"

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: How long `close()` keeps killing what is left in a cgroup before it gives up on removing it.
CLOSE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None = None  # RAM (+swap where the mechanism can)
    max_processes: int | None = None  # tasks/threads of the contained tree
    file_size_bytes: int | None = None  # RLIMIT_FSIZE: largest file written
    cpu_seconds: int | None = None  # RLIMIT_CPU

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "max_processes", "file_size_bytes", "cpu_seconds"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")


@dataclass(frozen=True)
class LimitUsage:
    """What is known of a contained tree's use (None: this mechanism cannot tell)."""

    mechanism: str
    peak_memory_bytes: int | None = None
    peak_processes: int | None = None
    oom_kills: int | None = None
    #: forks refused because the process limit was reached
    process_refusals: int | None = None


class LimitsUnavailableError(RuntimeError):
    """The requested mechanism cannot be used here (the message says why)."""


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip(".-")[:64] or "tree"
    return f"a2rl-{cleaned}-{os.getpid()}-{secrets.token_hex(4)}"


def _rlimit_plan(limits: Limits, *, with_memory: bool, with_processes: bool) -> list[tuple[int, int]]:
    """(resource, value) pairs to set in the child, each clamped to the current hard limit (a hard
    limit can only be lowered without CAP_SYS_RESOURCE)."""
    wanted: list[tuple[int, int | None]] = [
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
    ]
    if with_memory:
        wanted.append((resource.RLIMIT_DATA, limits.memory_bytes))
    if with_processes:
        wanted.append((resource.RLIMIT_NPROC, limits.max_processes))
    plan = []
    for res, value in wanted:
        if value is None:
            continue
        _, hard = resource.getrlimit(res)
        plan.append((res, value if hard == resource.RLIM_INFINITY else min(value, hard)))
    return plan


def _apply_rlimits(plan: list[tuple[int, int]]) -> None:
    for res, value in plan:
        resource.setrlimit(res, (value, value))


def _drop_to(uid: int | None, gid: int | None) -> None:
    if gid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
    if uid is not None:
        os.setresuid(uid, uid, uid)


class Containment:
    """One contained process tree. Subclasses: one per mechanism."""

    mechanism: str = ""

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.limits = limits

    def preexec(self) -> None:
        """In the child, before exec (``subprocess.Popen(preexec_fn=box.preexec)``): join the
        cgroup and/or set the rlimits. Only raw system calls (no locks, no logging)."""
        raise NotImplementedError

    def preexec_fn(self, *, uid: int | None = None, gid: int | None = None) -> Callable[[], None]:
        """A ``preexec_fn`` that contains the child and then runs it as `uid`/`gid` (supplementary
        groups cleared). Use it instead of Popen's ``user=``/``group=``: those switch ids before
        ``preexec_fn`` runs, and an unprivileged process cannot join a cgroup."""

        def run() -> None:
            self.preexec()
            _drop_to(uid, gid)

        return run

    def usage(self) -> LimitUsage:
        return LimitUsage(mechanism=self.mechanism)

    def exceeded(self) -> str | None:
        """``"memory"`` (the OOM killer acted in the tree), ``"processes"`` (a fork was refused at
        the process limit) or None (no limit hit, or this mechanism cannot tell)."""
        return None

    def close(self) -> None:
        """Kill what is left of the tree (where the mechanism knows it) and remove the cgroup.
        Idempotent."""

    def describe(self) -> str:
        """One line for logs: the mechanism and the limits."""
        parts = [f"mechanism {self.mechanism}"]
        if self.limits.memory_bytes is not None:
            parts.append(f"memory {self.limits.memory_bytes / 2**30:.1f} GiB")
        if self.limits.max_processes is not None:
            parts.append(f"processes {self.limits.max_processes}")
        if self.limits.file_size_bytes is not None:
            parts.append(f"file size {self.limits.file_size_bytes / 2**30:.1f} GiB")
        if self.limits.cpu_seconds is not None:
            parts.append(f"cpu {self.limits.cpu_seconds} s")
        return ", ".join(parts)

    def __enter__(self) -> Containment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RlimitContainment(Containment):
    """Per-process resource limits, inherited by every descendant (no privilege needed).

    Memory is ``RLIMIT_DATA``, not ``RLIMIT_AS``: since Linux 4.7 it caps a process's private
    writable memory (heap, anonymous mappings, thread stacks), which is what a model's weights
    and activations take. ``RLIMIT_AS`` caps address space instead, and PyTorch reserves far more
    of that than it uses (shared libraries mapped read-only, allocator and CUDA reservations made
    ``PROT_NONE``): a limit tight enough to matter breaks ``import torch`` on a GPU machine.
    What ``RLIMIT_DATA`` misses: it is per process (N processes may use N times the limit), and
    shared memory (``/dev/shm``, ``MAP_SHARED``) and page cache are not counted.

    Processes are ``RLIMIT_NPROC``, which counts *every* process of the child's real uid on the
    machine, not the tree's, and does not apply to root at all (the kernel exempts uid 0): it
    holds only for a tree run under a dedicated unprivileged uid (`preexec_fn(uid=…)`).

    The kernel keeps no account for us: `usage()` and `exceeded()` know nothing, and `close()` has
    nothing to kill (the caller kills the process group it started).
    """

    mechanism = MECHANISM_RLIMITS

    def __init__(self, name: str, limits: Limits) -> None:
        super().__init__(name, limits)
        self._plan = _rlimit_plan(limits, with_memory=True, with_processes=True)

    def preexec(self) -> None:
        _apply_rlimits(self._plan)


class _CgroupContainment(Containment):
    """Shared part of the two cgroup mechanisms: joining, telling a limit hit, killing and removing
    directories."""

    def __init__(self, name: str, limits: Limits, dirs: list[Path]) -> None:
        super().__init__(name, limits)
        self.dirs = dirs
        # Prepared in the parent: the child only opens, writes and closes.
        self._procs_files = [str(d / "cgroup.procs").encode() for d in dirs]
        self._plan = _rlimit_plan(limits, with_memory=False, with_processes=False)
        self._closed = False

    def exceeded(self) -> str | None:
        used = self.usage()
        if used.oom_kills:
            return EXCEEDED_MEMORY
        if used.process_refusals:
            return EXCEEDED_PROCESSES
        return None

    def preexec(self) -> None:
        pid = str(os.getpid()).encode()
        for path in self._procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        _apply_rlimits(self._plan)

    def _pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return found

    def _kill_all(self) -> None:
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        if self._closed:
            return
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for d in reversed(self.dirs):
            while d.exists():
                self._kill_all()
                try:
                    d.rmdir()
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)  # killed processes still exiting
        self._closed = True


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text == "max" else int(text)


def _read_keyed(path: Path, key: str) -> int | None:
    """The value of `key` in a flat-keyed cgroup file (``oom_kill 2``)."""
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
    except OSError:
        return None
    return None


def _own_cgroup(controller: str, proc_cgroup: str) -> str | None:
    """Our cgroup path in the hierarchy of `controller` ("" for the v2 unified one)."""
    for line in proc_cgroup.splitlines():
        hier_id, controllers, path = line.split(":", 2)
        if controller == "" and hier_id == "0" and controllers == "":
            return path
        if controller and controller in controllers.split(","):
            return path
    return None


class CgroupV1Containment(_CgroupContainment):
    mechanism = MECHANISM_CGROUP_V1

    def __init__(self, name: str, limits: Limits, memory_dir: Path, pids_dir: Path) -> None:
        super().__init__(name, limits, [memory_dir, pids_dir])
        self.memory_dir = memory_dir
        self.pids_dir = pids_dir

    @classmethod
    def create(cls, name: str, limits: Limits, root: Path = CGROUP_ROOT) -> CgroupV1Containment:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
        made: list[Path] = []
        dirname = _safe_name(name)
        try:
            for controller in ("memory", "pids"):
                own = _own_cgroup(controller, proc_cgroup)
                base = root / controller
                if own is None or not (base / own.lstrip("/") / "cgroup.procs").exists():
                    raise LimitsUnavailableError(f"no cgroup v1 {controller} hierarchy at {base}")
                path = base / own.lstrip("/") / dirname
                path.mkdir()
                made.append(path)
            memory_dir, pids_dir = made
            if limits.memory_bytes is not None:
                (memory_dir / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                memsw = memory_dir / "memory.memsw.limit_in_bytes"
                if memsw.exists():  # swap accounting on: RAM + swap under the same limit
                    memsw.write_text(str(limits.memory_bytes))
            if limits.max_processes is not None:
                (pids_dir / "pids.max").write_text(str(limits.max_processes))
        except (OSError, LimitsUnavailableError) as exc:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    path.rmdir()
            if isinstance(exc, LimitsUnavailableError):
                raise
            raise LimitsUnavailableError(f"cannot create a cgroup v1 child: {exc}") from exc
        return cls(name, limits, memory_dir, pids_dir)

    def usage(self) -> LimitUsage:
        return LimitUsage(
            mechanism=self.mechanism,
            peak_memory_bytes=_read_int(self.memory_dir / "memory.max_usage_in_bytes"),
            peak_processes=_read_int(self.pids_dir / "pids.peak"),
            oom_kills=_read_keyed(self.memory_dir / "memory.oom_control", "oom_kill"),
            process_refusals=_read_keyed(self.pids_dir / "pids.events", "max"),
        )


class CgroupV2Containment(_CgroupContainment):
    mechanism = MECHANISM_CGROUP_V2

    def __init__(self, name: str, limits: Limits, path: Path) -> None:
        super().__init__(name, limits, [path])
        self.path = path

    @staticmethod
    def mount_point(root: Path = CGROUP_ROOT) -> Path | None:
        """Where the unified hierarchy is mounted: `root` itself (v2 only) or ``root/unified``
        (hybrid)."""
        for candidate in (root, root / "unified"):
            if (candidate / "cgroup.controllers").exists():
                return candidate
        return None

    @classmethod
    def create(cls, name: str, limits: Limits, root: Path = CGROUP_ROOT) -> CgroupV2Containment:
        mount = cls.mount_point(root)
        own = _own_cgroup("", Path("/proc/self/cgroup").read_text())
        if mount is None or own is None:
            raise LimitsUnavailableError("no cgroup v2 hierarchy")
        parent = mount / own.lstrip("/")
        try:
            available = (parent / "cgroup.controllers").read_text().split()
            if not {"memory", "pids"} <= set(available):
                raise LimitsUnavailableError(
                    f"cgroup v2 {parent} has no memory and pids controllers (only: {' '.join(available)})"
                )
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            missing = [c for c in ("memory", "pids") if c not in enabled]
            if missing:  # fails (EBUSY) where our cgroup holds processes: then it is not delegated
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
            path = parent / _safe_name(name)
            path.mkdir()
        except OSError as exc:
            raise LimitsUnavailableError(f"cannot create a cgroup v2 child of {parent}: {exc}") from exc
        try:
            if limits.memory_bytes is not None:
                (path / "memory.max").write_text(str(limits.memory_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
            if limits.max_processes is not None:
                (path / "pids.max").write_text(str(limits.max_processes))
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise LimitsUnavailableError(f"cannot set limits on {path}: {exc}") from exc
        return cls(name, limits, path)

    def usage(self) -> LimitUsage:
        return LimitUsage(
            mechanism=self.mechanism,
            peak_memory_bytes=_read_int(self.path / "memory.peak"),
            peak_processes=_read_int(self.path / "pids.peak"),
            oom_kills=_read_keyed(self.path / "memory.events", "oom_kill"),
            process_refusals=_read_keyed(self.path / "pids.events", "max"),
        )

    def _kill_all(self) -> None:
        kill_file = self.path / "cgroup.kill"  # Linux 5.14+: the whole tree at once, race-free
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        super()._kill_all()


def contain(name: str, limits: Limits, *, mechanism: str | None = None) -> Containment:
    """A containment for one process tree named `name`, by the best mechanism available here
    (cgroup v2, then cgroup v1, then rlimits), or exactly `mechanism` (LimitsUnavailableError
    when it cannot be used)."""
    if mechanism is not None and mechanism not in MECHANISMS:
        raise ValueError(f"unknown limits mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    order = (mechanism,) if mechanism else MECHANISMS
    problems = []
    for chosen in order:
        try:
            if chosen == MECHANISM_CGROUP_V2:
                return CgroupV2Containment.create(name, limits)
            if chosen == MECHANISM_CGROUP_V1:
                return CgroupV1Containment.create(name, limits)
        except (LimitsUnavailableError, OSError) as exc:
            problems.append(str(exc))
            continue
        return RlimitContainment(name, limits)
    raise LimitsUnavailableError("; ".join(problems))
