"""The sandbox of one evaluation process (`a2rl eval submission|baseline`), local mode.

The eval process parses files the agent wrote (config, tokenizer, weights) and runs the model,
so it gets a box of its own, built here for both of its launchers (the recorder's
`LocalDispatcher` and the runner's baseline):

- **limits** (`a2rl.limits`): memory ``A2RL_EVAL_MEMORY_BYTES`` (default 3/4 of the machine's RAM,
  so an evaluation can never take the recorder and the runner down with it), processes
  ``A2RL_EVAL_MAX_PROCESSES`` (default 4096), by cgroup where we may create one, else rlimits;
- **bubblewrap** (``A2RL_EVAL_SANDBOX``: ``auto`` — the default — when bubblewrap works here,
  ``bwrap`` to require it, ``none``): its own user (no capabilities), PID, IPC, UTS and network
  namespaces — a loopback interface only; an evaluation that calls endpoints (a judge, a search
  API, an S3 store) reaches exactly those through a proxy outside (`a2rl.egress_proxy`, relayed
  in by `a2rl.sandbox_relay`) and nothing else — and a read-only allow-list of the host's
  files over an empty root (`a2rl.eval_view`: the system directories, the toolchain, the caches
  and data an evaluation reads, what the caller names; `/etc` by `a2rl.host_etc`), so that a
  root launcher's eval process, host root by its uid, reads no other root-only file:
  writable are only a scratch directory (``TMPDIR``, the caches), the directories the caller
  names and, of a local store, the keys it names (the run's prefix; everything else in the store
  is bound back read-only); secrets the evaluation does not need (the machine keys) are hidden;
  ``/dev`` is a fresh one (GPU nodes passed through), ``/dev/shm`` a size-capped tmpfs;
- **a fair share of the CPU** for the agent it evaluates alongside: niceness
  ``A2RL_EVAL_NICE`` (default 10 above the launcher's) and ``A2RL_EVAL_THREADS`` CPU threads
  (``OMP_NUM_THREADS`` and kin, which torch follows; default half the cores, at least 1), so an
  evaluation of submission n does not starve the training of submission n+1 on a small machine.

Time is the caller's: it kills the process group after its timeout, and `close()` kills what
is left in the cgroup (a process that left the group) before removing it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

from a2rl.constants import (
    DEFAULT_EVAL_TIMEOUT_S,
    ENV_BWRAP,
    ENV_EVAL_MAX_PROCESSES,
    ENV_EVAL_MEMORY_BYTES,
    ENV_EVAL_NICE,
    ENV_EVAL_SANDBOX,
    ENV_EVAL_THREADS,
    ENV_EVAL_TIMEOUT,
    THREAD_ENV,
)
from a2rl.egress_proxy import EGRESS_PORT, EgressProxy, describe_addresses, egress_addresses, proxy_env
from a2rl.errors import A2rlError
from a2rl.eval_view import eval_readable, view_argv
from a2rl.host_etc import ETC_ALLOWED, ETC_EVAL_HOST, etc_entries
from a2rl.limits import EXCEEDED_MEMORY, EXCEEDED_PROCESSES, Containment, Limits, LimitUsage, contain
from a2rl.sandbox_relay import relay_command

DEFAULT_MAX_PROCESSES = 4096
DEFAULT_MEMORY_FRACTION = 0.75
#: Niceness an eval process adds to the launcher's (`A2RL_EVAL_NICE`).
DEFAULT_EVAL_NICE = 10
SANDBOX_MODES = ("auto", "bwrap", "none")
#: GPU device nodes passed through when present (NVIDIA, DRM render nodes).
GPU_DEVICE_GLOBS = ("nvidia*", "nvidia-caps", "dri")
#: Namespaces and privileges of the eval sandbox (with ``--unshare-net``). Nested
#: user namespaces stay allowed: HumanEval's code sandbox makes one (`a2rl_tasks.sandbox`).
BWRAP_FLAGS = (
    "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
    "--cap-drop", "ALL", "--die-with-parent", "--hostname", "a2rl-eval",
)  # fmt: skip
#: The eval process's uid and gid inside (mapped to the launcher's own). Not 0: a task's code
#: sandbox then isolates generated programs with an unprivileged user namespace of its own.
SANDBOX_UID = 1000
#: The kernel's settings, read-only over the fresh /proc. A root launcher's eval process (and the
#: programs a model generates for HumanEval) is host root by its uid, capabilities dropped or not:
#: `kernel.core_pattern` (a program run as root on the next crash) and every other sysctl would be
#: writable through a plain /proc.
KERNEL_SETTINGS_READ_ONLY = (
    "--ro-bind", "/proc/sys", "/proc/sys",
    "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
    "--ro-bind-try", "/proc/irq", "/proc/irq",
    "--ro-bind-try", "/proc/bus", "/proc/bus",
)  # fmt: skip


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(float(raw))
    except ValueError:
        raise A2rlError(f"{name} must be a positive number, got {raw!r}") from None
    if value < 1:
        raise A2rlError(f"{name} must be a positive number, got {raw!r}")
    return value


def eval_limits(env: Mapping[str, str] | None = None) -> Limits:
    env = os.environ if env is None else env
    default_memory = int(physical_memory_bytes() * DEFAULT_MEMORY_FRACTION)
    return Limits(
        memory_bytes=_positive(env, ENV_EVAL_MEMORY_BYTES, default_memory),
        max_processes=_positive(env, ENV_EVAL_MAX_PROCESSES, DEFAULT_MAX_PROCESSES),
    )


def eval_nice(env: Mapping[str, str] | None = None) -> int:
    """How much nicer than its launcher an eval process runs (0: as nice)."""
    env = os.environ if env is None else env
    raw = env.get(ENV_EVAL_NICE, "").strip()
    if not raw:
        return DEFAULT_EVAL_NICE
    try:
        value = int(raw)
    except ValueError:
        raise A2rlError(f"{ENV_EVAL_NICE} must be a number from 0 to 19, got {raw!r}") from None
    if not 0 <= value <= 19:
        raise A2rlError(f"{ENV_EVAL_NICE} must be a number from 0 to 19, got {raw!r}")
    return value


def eval_threads(env: Mapping[str, str] | None = None) -> int:
    """The CPU threads of an eval process: `A2RL_EVAL_THREADS`, default half the cores it may run
    on (at least 1), leaving the rest to the agent it is evaluating alongside."""
    env = os.environ if env is None else env
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return _positive(env, ENV_EVAL_THREADS, max(cores // 2, 1))


def thread_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`THREAD_ENV` set to `eval_threads` (those `env` sets itself are kept as they are)."""
    env = os.environ if env is None else env
    threads = str(eval_threads(env))
    return {name: threads for name in THREAD_ENV if not env.get(name, "").strip()}


def eval_timeout_s(env: Mapping[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    return float(_positive(env, ENV_EVAL_TIMEOUT, DEFAULT_EVAL_TIMEOUT_S))


def local_store_dir(store_uri: str) -> Path | None:
    """The directory of a local store URI (a path or file:///dir); None for a remote store."""
    parts = urlsplit(store_uri)
    if parts.scheme == "":
        return Path(store_uri).absolute()
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(unquote(parts.path))
    return None


@lru_cache(maxsize=4)
def _bwrap_works(path: str) -> bool:
    try:
        probe = subprocess.run(
            [path, *BWRAP_FLAGS, "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "--", "true"],
            check=False, capture_output=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def find_bwrap(env: Mapping[str, str] | None = None) -> str | None:
    """bubblewrap (``$A2RL_BWRAP`` or on PATH) when it can build the eval sandbox here."""
    env = os.environ if env is None else env
    path = env.get(ENV_BWRAP) or shutil.which("bwrap", path=env.get("PATH"))
    return path if path and _bwrap_works(path) else None


def gpu_devices(dev: str = "/dev") -> tuple[Path, ...]:
    return tuple(sorted(Path(p) for pattern in GPU_DEVICE_GLOBS for p in glob.glob(f"{dev}/{pattern}")))


def store_binds(root: Path, writable: Sequence[str]) -> list[str]:
    """bubblewrap arguments that make a local store writable only at `writable` (keys relative to
    `root`, e.g. the run's prefix): the root is bound writable (the store checks it can write
    there), then every entry that is not on the way to a writable key is bound back read-only."""
    argv = ["--bind", str(root), str(root)]
    wanted = [tuple(Path(key).parts) for key in writable]

    def walk(directory: Path, depth: int) -> None:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            return
        for entry in entries:
            on_path = [w for w in wanted if len(w) > depth and w[depth] == entry]
            path = directory / entry
            if any(len(w) == depth + 1 for w in on_path):
                continue  # a writable key itself
            if on_path and path.is_dir() and not path.is_symlink():
                walk(path, depth + 1)
            else:
                argv.extend(["--ro-bind", str(path), str(path)])

    walk(root, 0)
    return argv


def eval_bwrap_argv(
    bwrap: str,
    *,
    writable: Sequence[Path],
    shm_bytes: int,
    devices: Sequence[Path] = (),
    store: Sequence[str] = (),
    hidden: Sequence[Path] = (),
    etc: Sequence[str] = (),
    sockets: Sequence[Path] = (),
    view: Sequence[str],
) -> list[str]:
    """bubblewrap's part of the command line (ends with ``--``; the eval command follows).
    `store`: `store_binds` arguments; `hidden`: directories replaced by an empty tmpfs; `etc`: the
    host's `/etc` entries shown, over an empty `/etc` (`eval_etc_entries`); `sockets`: directories
    of Unix sockets the box connects to (its egress proxy's), shown read-only over anything else;
    `view`: what it shows of the host besides (`a2rl.eval_view.view_argv`) over an empty,
    read-only root."""
    argv = [bwrap, *BWRAP_FLAGS, "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    argv += ["--unshare-net", *view, "--tmpfs", "/etc"]
    for entry in etc:
        argv += ["--ro-bind", entry, entry]
    argv += ["--proc", "/proc", *KERNEL_SETTINGS_READ_ONLY]
    argv += ["--dev", "/dev", "--size", str(shm_bytes), "--tmpfs", "/dev/shm"]
    for device in devices:
        argv += ["--dev-bind-try", str(device), str(device)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    argv += store
    for path in hidden:
        argv += ["--tmpfs", str(path)]
    for path in sockets:
        argv += ["--ro-bind", str(path), str(path)]
    return [*argv, "--remount-ro", "/", "--"]


def eval_etc_entries(etc: str = "/etc") -> tuple[str, ...]:
    """The host's `/etc` entries the eval box shows: the sandbox's allow-list and the host's
    account and name files. A root launcher's eval process reads files as host root, so the rest
    (`shadow`, ssh host keys, `ssl/private`) must not be there at all."""
    return etc_entries((*ETC_ALLOWED, *ETC_EVAL_HOST), etc)


def scratch_env(scratch: Path) -> dict[str, str]:
    """Writable places for what caches under $HOME or /tmp (both are read-only inside)."""
    return {
        "TMPDIR": str(scratch),
        "XDG_CACHE_HOME": str(scratch / ".cache"),
        "TRITON_CACHE_DIR": str(scratch / ".triton"),
        # torch sets it in the launcher on import (a host path under /tmp the box does not show)
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / ".torchinductor"),
        "MPLCONFIGDIR": str(scratch / ".matplotlib"),
        "PYTHONUNBUFFERED": "1",
    }


class EvalBox:
    """One eval process's sandbox: its containment, its bubblewrap prefix and environment.

    ``with EvalBox("eval-00003", writable=[store_dir], endpoints=[judge_url]) as box:`` then start
    ``[*box.prefix, *argv]`` with ``env={**env, **box.env}`` and ``preexec_fn=box.preexec``;
    afterwards `problem()` says which limit ended it, if one did.
    """

    def __init__(
        self,
        name: str,
        *,
        writable: Sequence[Path] = (),
        store_root: Path | None = None,
        store_writable: Sequence[str] = (),
        hidden: Sequence[Path] = (),
        readable: Sequence[Path] = (),
        endpoints: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`writable`: directories writable inside (made when missing); `store_root` and
        `store_writable`: a local store, writable only under those keys; `hidden`: directories
        shown empty (secrets the evaluation does not need); `readable`: what the evaluation reads
        besides what every one does (`a2rl.eval_view.eval_readable`), e.g. its held-out data;
        `endpoints`: the URLs the evaluation calls (its judge, its search API, its S3 store), the
        only places it reaches."""
        env = os.environ if env is None else env
        mode = env.get(ENV_EVAL_SANDBOX, "auto").strip() or "auto"
        if mode not in SANDBOX_MODES:
            raise A2rlError(f"{ENV_EVAL_SANDBOX} must be one of {', '.join(SANDBOX_MODES)}, got {mode!r}")
        self.limits = eval_limits(env)
        self.nice = eval_nice(env)
        self.threads = thread_env(env)
        bwrap = None if mode == "none" else find_bwrap(env)
        if mode == "bwrap" and bwrap is None:
            raise A2rlError(
                f"{ENV_EVAL_SANDBOX}=bwrap but bubblewrap is missing or cannot create namespaces here"
            )
        self.scratch = Path(tempfile.mkdtemp(prefix="a2rl-eval-scratch-"))
        self.containment: Containment = contain(name, self.limits)
        self.env = scratch_env(self.scratch) | self.threads
        self.sandboxed = bwrap is not None
        self.egress: EgressProxy | None = None
        addresses = egress_addresses(endpoints)
        self.network = "loopback only"
        if bwrap is None:
            self.network = "the host's network"
            self.prefix: list[str] = []
        else:
            for path in writable:
                path.mkdir(parents=True, exist_ok=True, mode=0o700)
            store: list[str] = []
            if store_root is not None:
                for key in store_writable:
                    (store_root / key).mkdir(parents=True, exist_ok=True)
                store = store_binds(store_root, store_writable)
            assert self.limits.memory_bytes is not None
            # Not under TMPDIR: a Unix socket's path has at most 107 bytes.
            sockets = Path(tempfile.mkdtemp(prefix="a2rl-egress-", dir="/tmp")) if addresses else None
            self.prefix = eval_bwrap_argv(
                bwrap,
                writable=[self.scratch, *writable],
                shm_bytes=max(self.limits.memory_bytes // 4, 64 << 20),
                devices=gpu_devices(),
                store=store,
                hidden=[p for p in hidden if p.is_dir()],
                etc=eval_etc_entries(),
                sockets=[sockets] if sockets else [],
                view=view_argv(eval_readable(readable, env)),
            )
            if sockets is not None:
                self.egress = EgressProxy(addresses, sockets / "proxy.sock")
                self.prefix += relay_command(sys.executable, [(EGRESS_PORT, str(self.egress.path))], [])
                self.env.update(proxy_env(EGRESS_PORT))
                self.network = f"only {describe_addresses(addresses)} (through a proxy)"

    @property
    def preexec(self) -> Callable[[], None]:
        """For Popen's ``preexec_fn``: joins the cgroup and/or sets the rlimits, then lowers the
        process's priority by `nice`."""
        contain_child, nice = self.containment.preexec, self.nice

        def run() -> None:
            contain_child()
            if nice:
                os.nice(nice)

        return run

    def describe(self) -> str:
        """One line for the eval log: what contains this evaluation."""
        where = (
            "bubblewrap, host files by allow-list"
            if self.sandboxed
            else "no sandbox (bubblewrap unavailable or A2RL_EVAL_SANDBOX=none)"
        )
        threads = next(iter(self.threads.values()), "as set")
        return (
            f"eval sandbox: {where}, network: {self.network}; limits: {self.containment.describe()};"
            f" cpu: nice +{self.nice}, {threads} threads"
        )

    def usage(self) -> LimitUsage:
        return self.containment.usage()

    def problem(self) -> str | None:
        """One line when a limit ended the evaluation (the OOM killer, the process limit)."""
        hit = self.containment.exceeded()
        if hit == EXCEEDED_MEMORY and self.limits.memory_bytes is not None:
            return f"evaluation exceeded its memory limit ({self.limits.memory_bytes / 2**30:.1f} GiB)"
        if hit == EXCEEDED_PROCESSES:
            return f"evaluation reached its process limit ({self.limits.max_processes} tasks)"
        return None

    def close(self) -> None:
        if self.egress is not None:
            self.egress.close()
            shutil.rmtree(self.egress.path.parent, ignore_errors=True)
        self.containment.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> EvalBox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
