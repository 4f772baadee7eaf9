"""What the real node changes on the host, recorded before it starts and put back when it stops.

The kubelet writes global kernel settings (`vm.overcommit_memory`, `kernel.panic`,
`kernel.panic_on_oops`, …: its `setupKernelTunables`), mounts volumes and container root
filesystems, creates cgroups, and leaves container processes and containerd shims running if it
is killed. A `HostRecord` written to a fixed place before the node starts says what to undo; the
node's `stop()` undoes it, and so does the next start when a crashed run left the record behind.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

SYSCTL_ROOT = Path("/proc/sys")
#: The trees compared and restored. Per-interface trees (net/ipv4/conf/<if>, neigh/<if>) come and go
#: with interfaces; net/netfilter and net/bridge gain files when a module loads (not a setting).
SYSCTL_TREES = ("kernel", "vm", "fs", "net/core", "net/ipv4", "net/netfilter", "net/bridge")
_SKIP_PARTS = ("net/ipv4/conf/", "net/ipv4/neigh/")
#: Writable entries that change by themselves.
VOLATILE_SYSCTLS = frozenset(
    {"kernel/ns_last_pid", "kernel/random/boot_id", "kernel/random/uuid", "net/ipv4/tcp_fastopen_key"}
)


def read_sysctls(trees: Iterable[str] = SYSCTL_TREES) -> dict[str, str]:
    """Every readable and writable setting under `trees` (`kernel/panic` -> `"0"`)."""
    values: dict[str, str] = {}
    for tree in trees:
        for dirpath, _, files in os.walk(SYSCTL_ROOT / tree):
            for fname in files:
                path = Path(dirpath) / fname
                key = str(path.relative_to(SYSCTL_ROOT))
                if key in VOLATILE_SYSCTLS or any(key.startswith(p) for p in _SKIP_PARTS):
                    continue
                with contextlib.suppress(OSError):
                    mode = path.stat().st_mode
                    if mode & 0o200 and mode & 0o400:
                        values[key] = path.read_text().strip()
    return values


def sysctl_changes(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Settings of `before` that now differ: key -> (before, now; None when gone)."""
    return {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v}


def restore_sysctls(before: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Write back every setting of `before` that changed; returns what it found changed."""
    changed = sysctl_changes(before, read_sysctls())
    for key, (value, _) in changed.items():
        with contextlib.suppress(OSError):
            (SYSCTL_ROOT / key).write_text(value + "\n")
    return changed


def mounts_under(roots: Iterable[Path]) -> list[str]:
    """Mount points at or below any of `roots`, deepest first."""
    prefixes = [str(r).rstrip("/") for r in roots]
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def unmount_under(roots: Iterable[Path]) -> list[str]:
    points = mounts_under(roots)
    for point in points:
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    return points


def cgroup_dirs(name: str) -> list[Path]:
    """`/sys/fs/cgroup/<hierarchy>/<name>` of every mounted hierarchy (v1 controllers and unified)."""
    base = Path("/sys/fs/cgroup")
    return [d / name for d in sorted(base.iterdir()) if d.is_dir() and not d.is_symlink()]


def kill_cgroup_tree(name: str) -> int:
    """SIGKILL every process in the cgroup trees `name`; how many there were."""
    pids: set[int] = set()
    for root in cgroup_dirs(name):
        for procs in root.rglob("cgroup.procs") if root.is_dir() else ():
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def remove_cgroup_tree(name: str, timeout: float = 10.0) -> None:
    """rmdir the cgroup trees `name`, deepest first (retrying while killed processes exit)."""
    deadline = time.monotonic() + timeout
    for root in cgroup_dirs(name):
        if not root.is_dir():
            continue
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for d in [*dirs, root]:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


def matching_pids(fragment: str) -> list[int]:
    """Processes (not this one) whose command line contains `fragment` (containerd's shims name its
    socket)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmdline:
            found.append(int(proc.name))
    return found


def kill_matching(fragment: str) -> list[int]:
    """SIGKILL `matching_pids(fragment)`; the pids it reached."""
    killed = []
    for pid in matching_pids(fragment):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


@dataclass
class HostRecord:
    """What a running real node has changed, written before it changes it."""

    sysctls: dict[str, str]
    #: name -> (pid, argv[0]) of the node's own processes
    pids: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: trees whose mounts are the node's (its state dirs, containerd's root)
    mount_roots: list[str] = field(default_factory=list)
    cgroup: str = ""
    #: a command-line fragment naming the node's containerd (its socket), for its shims
    shim_fragment: str = ""
    #: host folders the node created and that must go (they did not exist before)
    created_dirs: list[str] = field(default_factory=list)
    #: links the kubelet makes in /var/log/containers that point into these folders
    log_dirs: list[str] = field(default_factory=list)
    #: paths (glob patterns) the node writes in host folders that existed before it; only those
    #: changed since `started_at` are its own
    owned_globs: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> HostRecord | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        data["pids"] = {k: (int(v[0]), str(v[1])) for k, v in data.get("pids", {}).items()}
        return cls(**data)

    def live_pids(self) -> dict[str, int]:
        """The recorded processes still running as what they were started as."""
        alive = {}
        for name, (pid, argv0) in self.pids.items():
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if argv0.encode() in cmd:
                    alive[name] = pid
        return alive


def _changed_since(path: str, when: float) -> bool:
    try:
        return os.lstat(path).st_mtime >= when - 1
    except OSError:
        return False


def undo(record: HostRecord) -> dict[str, tuple[str, str | None]]:
    """Put the host back: processes, shims and containers killed, mounts and cgroups removed, log
    links and created folders deleted, kernel settings restored. Returns the settings it restored."""
    for pid in record.live_pids().values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if record.shim_fragment:
        kill_matching(record.shim_fragment)
    if record.cgroup:
        kill_cgroup_tree(record.cgroup)
    unmount_under(Path(r) for r in record.mount_roots)
    if record.cgroup:
        remove_cgroup_tree(record.cgroup)
    links = Path("/var/log/containers")
    if record.log_dirs and links.is_dir():
        for link in links.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and any(os.readlink(link).startswith(d) for d in record.log_dirs):
                    link.unlink()
    owned = [
        p
        for pattern in record.owned_globs
        for p in glob.glob(pattern)
        if _changed_since(p, record.started_at)
    ]
    for folder in sorted([*record.created_dirs, *owned], key=len, reverse=True):
        with contextlib.suppress(OSError):
            subprocess.run(["rm", "-rf", "--one-file-system", folder], check=False)
    return restore_sysctls(record.sysctls)
