"""An LLM agent stack as the run's agent (local mode): its driver key, its gateway, its command.

`driver_key` reads the upstream key from the runner's environment (`spec.driver.apiKeyEnv`);
it goes to the gateway's stdin only. `start_gateway` starts the run's driver gateway
(`a2rl_gateway`) on the sandbox's gateway socket (or on a loopback port without the sandbox).
`stack_command` builds the stack's argv and environment for the run's prompt: the provider key
variables removed, the per-run token added, the stack's start-up files written into the agent's
own HOME, and the Python environment that runs a2rl first on PATH — also for login shells,
through the agent's `.bash_profile`/`.profile` (the stack's shell commands run `python`).
`trajectory_bytes` keeps the stack's event stream (its JSON lines) for the store.

`StackRun` ties them together for the runner: what a stack adds to a run, from its command to
the trajectory kept at the end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from a2rl_gateway.budget import Limits
from a2rl_gateway.config import GatewayConfig, new_run_token
from a2rl_gateway.process import GatewayProcess

from a2rl.agent_prompt import workspace_prompt
from a2rl.api.benchrun import BenchRunSpec, DriverSpec
from a2rl.errors import A2rlError
from a2rl.stacks import UPSTREAM_KEY_ENV, default_api_key_env, home_files, invocation
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.trajectory.streams import event_lines
from a2rl_runner.services import free_port
from a2rl_runner.stacks.install import InstalledStack, ensure_stack
from a2rl_runner.supervisor import DRIVER_BUDGET_EXHAUSTED, EndReason

#: Providers whose servers may run without a key (a self-hosted vLLM, for instance).
KEYLESS_PROVIDERS = ("openai-compatible",)


def driver_of(spec: BenchRunSpec) -> DriverSpec:
    if spec.driver is None:  # validation requires it with a stack; a model built in code may not
        raise A2rlError("spec.agent.stack needs spec.driver (the LLM that drives the stack)")
    return spec.driver


def driver_key(spec: BenchRunSpec, environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(the variable holding the upstream key, the key) from this process's environment; one
    line naming the variable when a provider that needs a key has none."""
    driver = driver_of(spec)
    env = os.environ if environ is None else environ
    name = driver.api_key_env or default_api_key_env(driver.provider)
    key = (env.get(name) or "").strip() or None
    if key is None and driver.provider not in KEYLESS_PROVIDERS:
        raise A2rlError(
            f"spec.driver: the {driver.provider} key is read from ${name}, which is not set "
            "(set it, or name another variable in spec.driver.apiKeyEnv); the agent never sees it"
        )
    return name, key


def start_gateway(
    spec: BenchRunSpec,
    *,
    token: str,
    key_env: str,
    key: str | None,
    store_uri: str,
    run_prefix: str,
    socket_path: Path | None,
    port: int | None,
    log_path: Path,
    on_exhausted: Callable[[str], None] | None = None,
) -> GatewayProcess:
    """The run's driver gateway, started (raises `A2rlError` when it does not come up)."""
    driver = driver_of(spec)
    config = GatewayConfig(
        provider=driver.provider,
        token=token,
        base_url=driver.base_url or "",
        model=driver.model,
        store_uri=store_uri,
        run_prefix=run_prefix,
        port=port,
        socket_path=socket_path,
        limits=Limits(tokens=spec.budget.driver_tokens, cost_usd=spec.budget.driver_cost_usd),
    )
    gateway = GatewayProcess(
        config, log_path, upstream_key=key, strip_env=[key_env], on_exhausted=on_exhausted
    )
    gateway.start()
    return gateway


def stack_command(
    spec: BenchRunSpec,
    installed: InstalledStack,
    *,
    workspace: Path,
    agent_env: Mapping[str, str],
    gateway_url: str,
    token: str,
    home_dir: Path,
    home_inside: str,
) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the stack for this run; writes its start-up files into `home_dir`
    (the host directory that is HOME, `home_inside`, for the agent)."""
    driver = driver_of(spec)
    assert spec.agent.stack is not None
    prompt = workspace_prompt(
        workspace,
        mode=spec.agent.mode,
        budget_s=spec.budget.wall_time_seconds,
        max_submissions=spec.budget.max_submissions,
    )
    try:
        argv, extra = invocation(
            spec.agent.stack,
            prompt=prompt,
            model=driver.model,
            gateway_base_url=gateway_url,
            token=token,
            workspace=workspace,
            provider=driver.provider,
            install_dir=installed.path,
        )
        files = home_files(
            spec.agent.stack,
            model=driver.model,
            gateway_base_url=gateway_url,
            token=token,
            workspace=workspace,
            provider=driver.provider,
        )
    except ValueError as exc:  # the prompt too long for an argv, a provider the stack cannot use
        raise A2rlError(f"spec.agent.stack {spec.agent.stack}: {exc}") from None
    # The Python environment first: a stack's node may live in /usr/bin, next to another python3.
    front = [str(Path(sys.executable).parent)] + [str(p) for p in installed.path_dirs]
    # Stacks that run commands in a login shell (`bash -lc`) get PATH reset by /etc/profile:
    # the agent's own profile puts the toolchain first again.
    profile = f'export PATH="{os.pathsep.join(front)}:$PATH"\n'
    files = {".bash_profile": profile, ".profile": profile, **files}
    for rel, content in files.items():
        path = home_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    env = {k: v for k, v in agent_env.items() if k not in UPSTREAM_KEY_ENV}
    env["PATH"] = os.pathsep.join([*front, env.get("PATH", os.defpath)])
    env["HOME"] = home_inside
    env.update(extra)
    return argv, env


def trajectory_bytes(agent_log: Path) -> bytes:
    """The stack's event stream: the JSON objects among the agent's output lines, one per line."""
    try:
        return event_lines(agent_log.read_bytes())
    except OSError:
        return b""


@dataclass
class StackRun:
    """What an agent stack adds to a local run: the installed stack, the driver's upstream key
    (for the gateway's stdin only), the gateway's port and the per-run token, and — once
    started — the gateway."""

    spec: BenchRunSpec
    installed: InstalledStack
    key_env: str
    key: str | None = field(repr=False)
    #: The gateway's loopback port (the sandbox relays it to the gateway's Unix socket).
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=new_run_token, repr=False)
    gateway: GatewayProcess | None = None

    @classmethod
    def prepare(cls, spec: BenchRunSpec, say: Callable[[str], None]) -> StackRun:
        """The driver's key checked, then the stack installed (on first use, with progress)."""
        assert spec.agent.stack is not None
        key_env, key = driver_key(spec)
        installed = ensure_stack(
            spec.agent.stack, spec.agent.stack_version, progress=lambda line: say(f"[a2rl] {line}")
        )
        return cls(spec, installed, key_env, key)

    @property
    def label(self) -> str:
        driver = driver_of(self.spec)
        return (
            f"{self.installed.stack} {self.installed.version} driven by {driver.provider} {driver.model} "
            "through the run's gateway"
        )

    @property
    def gateway_pid(self) -> int | None:
        return self.gateway.pid if self.gateway is not None else None

    def command(
        self, workspace: Path, agent_env: Mapping[str, str], home_dir: Path, home_inside: str
    ) -> tuple[list[str], dict[str, str]]:
        """The stack's argv and environment, pointed at the gateway's port (relayed inside the
        sandbox); its start-up files written into `home_dir`."""
        home_dir.mkdir(parents=True, exist_ok=True)
        return stack_command(
            self.spec,
            self.installed,
            workspace=workspace,
            agent_env=agent_env,
            gateway_url=f"http://127.0.0.1:{self.port}",
            token=self.token,
            home_dir=home_dir,
            home_inside=home_inside,
        )

    def start_gateway(
        self,
        *,
        store_uri: str,
        run_prefix: str,
        socket_path: Path | None,
        log_path: Path,
        say: Callable[[str], None],
    ) -> None:
        """On the sandbox's relayed `socket_path`, or on 127.0.0.1:`port` without the sandbox."""
        self.gateway = start_gateway(
            self.spec,
            token=self.token,
            key_env=self.key_env,
            key=self.key,
            store_uri=store_uri,
            run_prefix=run_prefix,
            socket_path=socket_path,
            port=None if socket_path is not None else self.port,
            log_path=log_path,
            on_exhausted=lambda reason: say(
                f"[a2rl] driver budget exhausted ({reason}): further calls are refused, "
                "and the agent is stopped at the first"
            ),
        )
        driver = driver_of(self.spec)
        say(f"[a2rl] driver gateway up: {driver.provider} {driver.model} (the agent holds a per-run token)")

    def budget_spent(self) -> EndReason | None:
        """The run's end once a call was refused (the agent has seen the budget error) — not at
        the mere exhaustion: an agent may go on training without its LLM."""
        refused = self.gateway is not None and self.gateway.refused.is_set()
        return DRIVER_BUDGET_EXHAUSTED if refused else None

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()

    def kill(self) -> None:
        if self.gateway is not None:
            self.gateway.kill()

    def keep_trajectory(self, store: ObjectStore, layout: RunLayout, agent_log: Path) -> None:
        """The stack's event stream is the run's trajectory."""
        store.put_bytes(layout.agent_trajectory, trajectory_bytes(agent_log))
