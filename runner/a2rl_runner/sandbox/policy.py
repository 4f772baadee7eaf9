"""What the local sandbox shows the agent, and the bubblewrap command line that enforces it (pure).

The agent runs in its own user, mount, PID, network, IPC and UTS namespaces with no capabilities
and no way to create another user namespace; when the runner is root, bubblewrap itself runs as
a dedicated unprivileged uid (`a2rl_runner.sandbox.identity`), so the agent is never host root.
Its file system is built from nothing: the system directories, an allow-list of `/etc` entries
(`a2rl.host_etc.ETC_ALLOWED`, plus a `passwd`, `group` and `hosts` of its own) and the toolchain
read-only, the workspace writable except the base model and the data, a private `/tmp` and home, fresh `/proc`
and `/dev`. Its network is a loopback interface only; the grading API and the driver gateway
reach it through the relay (`a2rl.sandbox_relay`), which listens on loopback ports inside
and forwards to Unix sockets the runner mounts at `SOCKET_DIR`. Everything else of the machine —
other processes, the store, the caches, held-out data, the user's home, tmux and ssh-agent
sockets, root-only files under `/etc` — is absent.

A bind names its source by its host path, or by a path the runner staged it at
(`bwrap_argv(sources=…)`): a bubblewrap that runs unprivileged cannot reach a source under a
directory only root may enter (`/root/.a2rl/workspaces/…`), so a root runner binds each source
into a staging directory it can enter (`a2rl_runner.sandbox.staging`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from a2rl.host_system import outermost
from a2rl.sandbox_relay import relay_command

#: Where the relay's Unix sockets appear inside the sandbox.
SOCKET_DIR = "/run/a2rl"
#: The agent's home inside the sandbox (backed by the run's scratch directory).
AGENT_HOME = "/home/agent"
#: `/etc` files the sandbox gets of its own instead of the host's (`etc_files`).
ETC_GENERATED = ("passwd", "group", "hosts")
#: The agent's user name inside (`passwd`).
AGENT_USER = "agent"


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
    #: Host `/etc` entries shown read-only (`a2rl.host_etc.etc_entries`).
    etc_entries: tuple[str, ...] = ()
    #: (path inside, host file) of the `/etc` files the sandbox gets of its own (ETC_GENERATED).
    etc_files: tuple[tuple[str, Path], ...] = ()
    #: Size of the `/dev/shm` tmpfs (None: the kernel's default, half the machine's memory).
    shm_bytes: int | None = None


def bind_sources(policy: SandboxPolicy) -> list[str]:
    """Every host path `bwrap_argv` binds, in order (what `sources` replaces)."""
    return [src for _flag, src, _dest in _binds(policy)]


def _binds(policy: SandboxPolicy) -> list[tuple[str, str, str]]:
    """(flag, host path, path inside) of every bind, in mount order."""
    binds = [("--ro-bind", d, d) for d in policy.system_dirs]
    binds += [("--ro-bind", e, e) for e in policy.etc_entries]
    binds += [("--ro-bind", str(host), inside) for inside, host in policy.etc_files]
    # Later mounts cover earlier ones: /tmp first, so that a toolchain file or the workspace
    # under the host's /tmp still shows through.
    binds += [
        ("--bind", str(policy.scratch / "tmp"), "/tmp"),
        ("--bind", str(policy.scratch / "home"), AGENT_HOME),
    ]
    binds += [("--ro-bind", str(tool), str(tool)) for tool in outermost(policy.toolchain)]
    binds.append(("--bind", str(policy.workspace), str(policy.workspace)))
    binds += [("--ro-bind", str(fixed), str(fixed)) for fixed in policy.read_only_in_workspace]
    binds.append(("--ro-bind", str(policy.socket_dir), SOCKET_DIR))
    return binds


def bwrap_argv(
    bwrap: str, policy: SandboxPolicy, inner: Sequence[str], sources: Sequence[str] | None = None
) -> list[str]:
    """The full command line: bubblewrap with `policy`, running `inner` inside. `sources`: one
    path per `bind_sources(policy)` entry, in order, bound instead of the host paths."""
    binds = _binds(policy)
    if sources is not None and len(sources) != len(binds):
        raise ValueError(f"{len(sources)} sources for {len(binds)} binds")
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
    for link, target in sorted(policy.system_links.items()):
        argv += ["--symlink", target, link]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if policy.shm_bytes is not None:
        argv += ["--size", str(policy.shm_bytes)]
    argv += ["--tmpfs", "/dev/shm"]
    for device in policy.devices:
        argv += ["--dev-bind-try", str(device), str(device)]
    if policy.devices:  # CUDA reads PCI topology from /sys
        argv += ["--ro-bind-try", "/sys", "/sys"]
    for i, (flag, src, dest) in enumerate(binds):
        argv += [flag, src if sources is None else sources[i], dest]
    argv += ["--chdir", str(policy.cwd), "--", *inner]
    return argv


def etc_file_texts(uid: int, gid: int) -> dict[str, str]:
    """The sandbox's own `passwd`, `group` and `hosts`: root, nobody, and the agent (`uid`, home
    AGENT_HOME); loopback names only."""
    return {
        "passwd": (
            "root:x:0:0:root:/root:/bin/sh\n"
            f"{AGENT_USER}:x:{uid}:{gid}:a2rl agent:{AGENT_HOME}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": f"root:x:0:\n{AGENT_USER}:x:{gid}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1\tlocalhost a2rl-sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    }


def relay_argv(python: str, relays: Iterable[Relay], agent_argv: Sequence[str]) -> list[str]:
    """The sandbox's first process: the relay, which then runs the agent command."""
    return relay_command(python, [(relay.port, relay.inside_path) for relay in relays], agent_argv)


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
