"""Process discovery through /proc (Linux): who is whose child, who carries a marker, who is a zombie.

The supervisor uses these to find every process an agent started, including the ones that left
its process group or session (`setsid`, double fork, `nohup`).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str  # one letter from /proc/<pid>/stat: R, S, D, Z, T, …

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


def parse_stat(text: str) -> tuple[int, str]:
    """(ppid, state) from the content of /proc/<pid>/stat (the command may hold spaces and parens)."""
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), rest[0]


def read_proc(pid: int) -> ProcInfo | None:
    try:
        ppid, state = parse_stat((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return ProcInfo(pid=pid, ppid=ppid, state=state)


def snapshot() -> dict[int, ProcInfo]:
    """Every process visible now, by pid."""
    out: dict[int, ProcInfo] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            info = read_proc(int(entry.name))
            if info is not None:
                out[info.pid] = info
    return out


def children_of(parent: int, procs: Mapping[int, ProcInfo]) -> set[int]:
    return {p.pid for p in procs.values() if p.ppid == parent}


def descendants(roots: Iterable[int], procs: Mapping[int, ProcInfo]) -> set[int]:
    """`roots` (those still alive) and every process below them in the PPid tree."""
    kids: dict[int, list[int]] = {}
    for p in procs.values():
        kids.setdefault(p.ppid, []).append(p.pid)
    found: set[int] = set()
    stack = [r for r in roots if r in procs]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(kids.get(pid, ()))
    return found


def env_has(pid: int, key: str, value: str) -> bool:
    """Whether the process's initial environment holds `key=value` (False when unreadable)."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{key}={value}".encode() in raw.split(b"\0")


def marked(key: str, value: str, procs: Mapping[int, ProcInfo]) -> set[int]:
    return {pid for pid, p in procs.items() if not p.zombie and env_has(pid, key, value)}


def set_child_subreaper(on: bool = True) -> bool:
    """Make this process adopt (or stop adopting) its orphaned descendants (Linux ≥ 3.4).

    False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def is_child_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        if int(libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) != 0:
            return False
        return flag.value != 0
    except (OSError, AttributeError):
        return False


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            pass


def reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those `pids` that are our own exited children."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        except OSError as exc:  # pragma: no cover - EINTR and friends
            if exc.errno != errno.EINTR:
                raise
