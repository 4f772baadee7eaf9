"""Finding bubblewrap, checking it can start here, and building one run's sandbox (I/O edges).

`check_bubblewrap()` runs the sandbox's own flags once on `/bin/true` (~10 ms, as the sandbox's
identity), so a kernel or container that forbids user namespaces is reported before the run
starts, with what is missing. `RunSandbox.create()` makes the run's private directories (relay
sockets, scratch /tmp and home, its own `/etc` files) and hands what the agent writes to the
sandbox's identity (`a2rl_runner.sandbox.identity`); `wrap()` turns the agent's command into the
sandboxed one (its bind sources staged where that identity can reach them:
`a2rl_runner.sandbox.staging`), and `preexec` stages them and drops to the identity.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from a2rl.constants import ENV_BWRAP
from a2rl.errors import A2rlError
from a2rl.eval_sandbox import gpu_devices
from a2rl.host_etc import etc_entries
from a2rl.host_system import python_toolchain, system_layout
from a2rl.limits import Containment, Limits, RlimitContainment
from a2rl_runner.sandbox.identity import Identity, hand_over, sandbox_identity
from a2rl_runner.sandbox.policy import (
    AGENT_HOME,
    AGENT_USER,
    Relay,
    SandboxPolicy,
    bind_sources,
    bwrap_argv,
    etc_file_texts,
    exposed_private,
    relay_argv,
)
from a2rl_runner.sandbox.staging import SourceStage

INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
NO_SANDBOX_HINT = "or run with --no-sandbox (the agent then runs unisolated: not for untrusted agents)"
PROBE_FLAGS = (
    "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--disable-userns",
    "--cap-drop", "ALL", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
)  # fmt: skip
API_SOCKET = "api.sock"
GATEWAY_SOCKET = "gateway.sock"


class SandboxUnavailableError(A2rlError):
    """The local sandbox cannot start on this machine (the message says what is missing)."""


@dataclass(frozen=True)
class Bubblewrap:
    path: str
    version: str  # e.g. "bubblewrap 0.8.0"


def check_bubblewrap(env: Mapping[str, str] | None = None) -> Bubblewrap:
    """bubblewrap on PATH (or `$A2RL_BWRAP`), able to create the namespaces the sandbox uses."""
    env = os.environ if env is None else env
    path = env.get(ENV_BWRAP) or shutil.which("bwrap", path=env.get("PATH"))
    if not path:
        raise SandboxUnavailableError(
            f"the local sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}, "
            + NO_SANDBOX_HINT
        )
    try:
        version = subprocess.run([path, "--version"], check=False, capture_output=True, text=True, timeout=10)
        probe = subprocess.run(
            [path, *PROBE_FLAGS, "--", "true"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=become(sandbox_identity("0")),  # as a run's sandbox will start
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailableError(f"cannot run bubblewrap at {path}: {exc}; {NO_SANDBOX_HINT}") from None
    if probe.returncode != 0:
        detail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise SandboxUnavailableError(
            f"bubblewrap cannot create the sandbox's namespaces here ({detail}): this kernel or container "
            "forbids unprivileged user namespaces (see sysctl user.max_user_namespaces, "
            f"kernel.apparmor_restrict_unprivileged_userns), {NO_SANDBOX_HINT}"
        )
    return Bubblewrap(path=path, version=version.stdout.strip() or "bubblewrap")


def named_files(argv: Sequence[str], cwd: Path) -> list[Path]:
    """Regular files the agent command names (a script, a config), shown read-only inside.
    Directories are not: a command naming `/` or a home directory must not undo the sandbox."""
    found = []
    for arg in argv:
        if "/" not in arg:
            continue
        path = Path(arg) if Path(arg).is_absolute() else cwd / arg
        try:
            if path.is_file():
                found.append(path.absolute())  # bound at the path the command uses
        except OSError:  # an inline script, not a path (too long a name, …)
            continue
    return found


def become(identity: Identity | None, box: Containment | None = None) -> Callable[[], None] | None:
    """A `preexec_fn` that puts the child in `box` (its limits) and then makes it `identity`
    (groups cleared); None: nothing to do."""
    if identity is None:
        return box.preexec if box is not None else None
    box = box or RlimitContainment("identity", Limits())
    return box.preexec_fn(uid=identity.uid, gid=identity.gid)


class RunSandbox:
    """One run's sandbox: its private directories, its policy, and the wrapped agent command."""

    def __init__(
        self,
        bwrap: Bubblewrap,
        policy: SandboxPolicy,
        private_dirs: Iterable[Path],
        identity: Identity | None = None,
        containment: Containment | None = None,
    ) -> None:
        self.bwrap = bwrap
        self.policy = policy
        self.identity = identity
        self.containment = containment
        self._private_dirs = tuple(private_dirs)
        self._stage: SourceStage | None = None

    @property
    def api_socket(self) -> Path:
        return self.policy.socket_dir / API_SOCKET

    @property
    def gateway_socket(self) -> Path:
        """Where the run's driver gateway listens (relayed when `create` got a gateway port)."""
        return self.policy.socket_dir / GATEWAY_SOCKET

    @property
    def home(self) -> Path:
        """The host directory that is the agent's HOME inside."""
        return self.policy.scratch / "home"

    @classmethod
    def create(
        cls,
        bwrap: Bubblewrap,
        *,
        workspace: Path,
        read_only: Sequence[Path],
        agent_argv: Sequence[str],
        cwd: Path,
        api_port: int,
        scratch: Path,
        private: Sequence[Path],
        extra_toolchain: Sequence[Path] = (),
        gateway_port: int | None = None,
        run_uid: str | None = None,
        shm_bytes: int | None = None,
        containment: Containment | None = None,
    ) -> RunSandbox:
        """Build the policy; raises `A2rlError` when the toolchain would expose `private` paths
        (the store, the caches, held-out data, the user's home). `gateway_port`: also relay that
        loopback port to the driver gateway's socket (`gateway_socket`). `run_uid` chooses a root
        runner's sandbox uid (`sandbox_identity`); `shm_bytes` sizes `/dev/shm`; `containment`
        holds the agent's limits (its tree joins it before it drops privileges)."""
        toolchain = (*python_toolchain(), *named_files(agent_argv, cwd), *extra_toolchain)
        if clashes := exposed_private(toolchain, private):
            tool, secret = clashes[0]
            raise A2rlError(
                f"the sandbox would show {secret} to the agent because it must show {tool} "
                "(the Python environment or a file the agent command names): move one of them"
            )
        identity = sandbox_identity(run_uid or secrets.token_hex(6))
        socket_dir = Path(tempfile.mkdtemp(prefix="a2rl-sock-"))  # short: socket paths max 108 bytes
        for sub in ("tmp", "home", "etc"):
            (scratch / sub).mkdir(parents=True, exist_ok=True)
        uid, gid = (identity.uid, identity.gid) if identity is not None else (os.getuid(), os.getgid())
        etc_files = []
        for name, text in etc_file_texts(uid, gid).items():
            (scratch / "etc" / name).write_text(text)
            etc_files.append((f"/etc/{name}", scratch / "etc" / name))
        hand_over(identity, [socket_dir, scratch / "tmp", scratch / "home", workspace])
        fixed = {p.absolute() for p in read_only}
        for entry in workspace.iterdir():  # what the agent writes: code/, output/, …
            if entry.is_dir() and not entry.is_symlink() and entry.absolute() not in fixed:
                hand_over(identity, [entry], recursive=True)
        dirs, links = system_layout()
        policy = SandboxPolicy(
            workspace=workspace,
            read_only_in_workspace=tuple(p for p in read_only if p.exists()),
            toolchain=tuple(toolchain),
            socket_dir=socket_dir,
            relays=(Relay(port=api_port, socket_name=API_SOCKET),)
            + ((Relay(port=gateway_port, socket_name=GATEWAY_SOCKET),) if gateway_port is not None else ()),
            scratch=scratch,
            cwd=cwd,
            devices=gpu_devices(),
            system_links=links,
            system_dirs=dirs,
            etc_entries=etc_entries(),
            etc_files=tuple(etc_files),
            shm_bytes=shm_bytes,
        )
        return cls(bwrap, policy, (socket_dir, scratch), identity, containment)

    def wrap(self, agent_argv: Sequence[str]) -> list[str]:
        """The sandboxed command line. With an identity of its own (a root runner) its bind
        sources are staged (`preexec` binds them), so that a bubblewrap running as that identity
        reaches what it could not enter itself."""
        # What was written into the agent's home since `create` (a stack's start-up files) is its.
        hand_over(self.identity, [self.policy.scratch / "tmp", self.home], recursive=True)
        inner = relay_argv(sys.executable, self.policy.relays, agent_argv)
        if self.identity is None:
            return bwrap_argv(self.bwrap.path, self.policy, inner)
        self._drop_stage()
        self._stage = SourceStage(bind_sources(self.policy))
        return bwrap_argv(self.bwrap.path, self.policy, inner, sources=self._stage.paths)

    @property
    def preexec(self) -> Callable[[], None] | None:
        """Popen `preexec_fn` of the wrapped command (after `wrap`): bind the staged sources, join
        the containment, then become the sandbox's identity (None: nothing to do)."""
        stage, drop = self._stage, become(self.identity, self.containment)
        if stage is None or drop is None:
            return drop

        def run() -> None:
            stage.preexec()
            drop()

        return run

    def grant_sockets(self) -> None:
        """Hand the relayed sockets (made by the recorder and the gateway, mode 0600) to the
        sandbox's identity, so that the relay inside can connect to them and nobody else can."""
        hand_over(self.identity, [p for p in self.policy.socket_dir.iterdir() if p.is_socket()])

    @staticmethod
    def agent_env(env: Mapping[str, str]) -> dict[str, str]:
        """The agent's environment inside: its own home, /tmp and user name, nothing pointing
        outside."""
        return {**env, "HOME": AGENT_HOME, "TMPDIR": "/tmp", "USER": AGENT_USER, "LOGNAME": AGENT_USER}

    def _drop_stage(self) -> None:
        if self._stage is not None:
            self._stage.cleanup()
            self._stage = None

    def cleanup(self) -> None:
        self._drop_stage()
        for path in self._private_dirs:
            shutil.rmtree(path, ignore_errors=True)
