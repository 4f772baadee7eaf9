"""An LLM agent stack as the run's agent (local mode): its driver key, its gateway, its command.

`driver_key` reads the upstream key from the runner's environment (`spec.driver.apiKeyEnv`);
it goes to the gateway's stdin only. `start_gateway` starts the run's driver gateway
(`a2rl_gateway`) on the sandbox's gateway socket (or on a loopback port without the sandbox).
`stack_command` builds the stack's argv and environment for the run's prompt: the provider key
variables removed, the per-run token added, the stack's start-up files written into the agent's
own HOME, and the Python environment that runs a2rl first on PATH — also for login shells,
through the agent's `.bash_profile`/`.profile` (the stack's shell commands run `python`).
`trajectory_bytes` keeps the stack's event stream (its JSON lines) for the store.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from a2rl_gateway.budget import Limits
from a2rl_gateway.config import GatewayConfig
from a2rl_gateway.process import GatewayProcess

from a2rl.agent_prompt import workspace_prompt
from a2rl.api.benchrun import BenchRunSpec, DriverSpec
from a2rl.errors import A2rlError
from a2rl.stacks import UPSTREAM_KEY_ENV, default_api_key_env, home_files, invocation
from a2rl.trajectory.streams import event_lines
from a2rl_runner.stacks.install import InstalledStack

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
