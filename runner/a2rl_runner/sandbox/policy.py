"""What the local sandbox shows the agent, and the bubblewrap command line that enforces it (pure).

The agent runs in its own user, mount, PID, network, IPC and UTS namespaces with no capabilities
and no way to create another user namespace. Its file system is built from nothing: the system
directories and the toolchain read-only, the workspace writable except the base model and the
data, a private `/tmp` and home, fresh `/proc` and `/dev`. Its network is a loopback interface
only; the grading API (and later the driver gateway) reach it through the relay
(`a2rl_runner.sandbox.relay`), which listens on loopback ports inside and forwards to Unix
sockets the runner mounts at `SOCKET_DIR`. Everything else of the machine — other processes,
the store, the caches, held-out data, the user's home, tmux and ssh-agent sockets — is absent.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Where the relay's Unix sockets appear inside the sandbox.
SOCKET_DIR = "/run/a2rl"
#: The agent's home inside the sandbox (backed by the run's scratch directory).
AGENT_HOME = "/home/agent"
#: System directories shown read-only (a link on the host, e.g. merged /usr, stays a link).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Files under /etc that only matter to someone after the host's secrets.
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers")
#: GPU device nodes passed through when present (NVIDIA, DRM render nodes).
GPU_DEVICE_GLOBS = ("nvidia*", "nvidia-caps", "dri")


@dataclass(frozen=True)
class Relay:
    """A loopback TCP port inside the sandbox forwarded to a Unix socket of the runner's."""

    port: int
    socket_name: str  # a file name in the mounted socket directory

    @property
    def inside_path(self) -> str:
        return f"{SOCKET_DIR}/{self.socket_name}"


@dataclass(frozen=True)
class SandboxPolicy:
    workspace: Path
    #: Workspace subpaths the agent may read but not write (the base model, the data).
    read_only_in_workspace: tuple[Path, ...]
    #: Read-only outside the workspace: the Python environment, our packages, named files.
    toolchain: tuple[Path, ...]
    #: Host directory holding the relay sockets (mounted read-only at SOCKET_DIR).
    socket_dir: Path
    relays: tuple[Relay, ...]
    #: Host directory backing the agent's /tmp and home (writable, private to this run).
    scratch: Path
    #: The agent's working directory (inside the workspace).
    cwd: Path
    #: Device nodes to pass through (GPUs).
    devices: tuple[Path, ...] = ()
    #: Host paths that exist as symlinks (merged /usr): shown as the same links.
    system_links: dict[str, str] = field(default_factory=dict)
    system_dirs: tuple[str, ...] = ()
    #: Files inside the system directories hidden behind /dev/null (those of MASKED_FILES present).
    masked: tuple[str, ...] = ()


def bwrap_argv(bwrap: str, policy: SandboxPolicy, inner: Sequence[str]) -> list[str]:
    """The full command line: bubblewrap with `policy`, running `inner` inside."""
    argv = [
        bwrap,
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try",
        "--disable-userns",  # no nested user namespace: capabilities stay dropped for good
        "--cap-drop", "ALL",
        "--die-with-parent",  # the runner gone (even SIGKILLed): the namespace goes with it
        "--new-session",
        "--hostname", "a2rl-sandbox",
    ]  # fmt: skip
    for system_dir in policy.system_dirs:
        argv += ["--ro-bind", system_dir, system_dir]
    for link, target in sorted(policy.system_links.items()):
        argv += ["--symlink", target, link]
    for masked in policy.masked:
        argv += ["--ro-bind", "/dev/null", masked]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
    for device in policy.devices:
        argv += ["--dev-bind-try", str(device), str(device)]
    if policy.devices:  # CUDA reads PCI topology from /sys
        argv += ["--ro-bind-try", "/sys", "/sys"]
    # Later mounts cover earlier ones: /tmp first, so that a toolchain file or the workspace
    # under the host's /tmp still shows through.
    argv += [
        "--bind",
        str(policy.scratch / "tmp"),
        "/tmp",
        "--bind",
        str(policy.scratch / "home"),
        AGENT_HOME,
    ]
    for tool in _outermost(policy.toolchain):
        argv += ["--ro-bind", str(tool), str(tool)]
    argv += ["--bind", str(policy.workspace), str(policy.workspace)]
    for fixed in policy.read_only_in_workspace:
        argv += ["--ro-bind", str(fixed), str(fixed)]
    argv += ["--ro-bind", str(policy.socket_dir), SOCKET_DIR]
    argv += ["--chdir", str(policy.cwd), "--", *inner]
    return argv


def relay_argv(python: str, relays: Iterable[Relay], agent_argv: Sequence[str]) -> list[str]:
    """The sandbox's first process: the relay, which then runs the agent command."""
    argv = [python, "-m", "a2rl_runner.sandbox.relay"]
    for relay in relays:
        argv += ["--listen", f"{relay.port}={relay.inside_path}"]
    return [*argv, "--", *agent_argv]


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """`paths` without those inside another one of them (one bind mount covers both), sorted."""
    unique = sorted({Path(p) for p in paths}, key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for path in unique:
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return sorted(kept)


def python_toolchain() -> tuple[Path, ...]:
    """The Python environment that runs a2rl: the virtualenv, its base interpreter's prefix, and
    the source directories of editable installs (ours: `a2rl`, `a2rl_agents`, …)."""
    found = {Path(sys.prefix), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent}
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if isinstance(mapping, dict):
            found.update(Path(p).resolve() for p in mapping.values())
    return tuple(sorted(found))


def exposed_private(toolchain: Iterable[Path], private: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(toolchain path, private path) pairs where binding the former would show the latter: the
    toolchain must never be the user's home, the store or the caches, nor a directory above them."""
    clashes = []
    for tool in toolchain:
        tool_real = Path(tool).resolve()
        for secret in private:
            secret_real = Path(secret).resolve()
            if tool_real == secret_real or tool_real in secret_real.parents:
                clashes.append((Path(tool), Path(secret)))
    return clashes
