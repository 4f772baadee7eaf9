"""Environments and command lines of a run's processes (pure functions).

The contract variables are defined once here and used by both modes: `agent_contract_env` (what
every agent gets: docs/agents.md) and `recorder_contract_env` (the recorder's run configuration). The
local runner passes a `Workspace` on local disk; the operator passes the pod's mount paths
(`Workspace.for_base_model(Path(WORKSPACE_MOUNT), …)`) and turns the dicts into Kubernetes env
lists, adding what only a pod has (secretKeyRefs, dispatch, spool). The rest (`agent_env`,
`recorder_env`, `eval_environ`, argv helpers) is the local runner's.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from a2rl.api.benchrun import BenchRunSpec
from a2rl.api.common import quantity_value
from a2rl.constants import (
    ENV_BASE_MODEL,
    ENV_BASE_MODEL_DIGEST,
    ENV_DATA_PATH,
    ENV_DRIVER_COST_USD,
    ENV_DRIVER_PRICES,
    ENV_DRIVER_TOKENS,
    ENV_EVAL_BACKEND,
    ENV_EVAL_LIMIT,
    ENV_GATEWAY_BASE_URL,
    ENV_GATEWAY_HOST,
    ENV_GATEWAY_KEY_SOURCE,
    ENV_GATEWAY_MODEL,
    ENV_GATEWAY_PORT,
    ENV_GATEWAY_PROVIDER,
    ENV_GATEWAY_SOCKET,
    ENV_GATEWAY_TOKEN,
    ENV_GATEWAY_UPSTREAM_TIMEOUT,
    ENV_GRADING_SERVER_URL,
    ENV_HELDOUT_PATH,
    ENV_MAX_SUBMISSIONS,
    ENV_MODEL_PATH,
    ENV_OUTPUT_DIR,
    ENV_RECORDER_PORT,
    ENV_RUN_NAME,
    ENV_RUN_NAMESPACE,
    ENV_RUN_PREFIX,
    ENV_RUN_START,
    ENV_RUN_TIMEOUT,
    ENV_RUN_UID,
    ENV_SEED,
    ENV_STORE_URI,
    ENV_TASK,
    ENV_WORKSPACE,
    THREAD_ENV,
    WORKSPACE_MOUNT,
)
from a2rl.errors import A2rlError
from a2rl.store.layout import RunLayout
from a2rl.workspace import Workspace

PYTHON_NAMES = ("python", "python3")
#: What an agent inherits of the runner's environment, by name; everything else (provider keys
#: such as `spec.driver.apiKeyEnv`'s, `HF_TOKEN`, `GITHUB_TOKEN`, store credentials, the runner's
#: own `A2RL_*` configuration) never reaches it. Who and where (the sandbox replaces HOME, USER
#: and LOGNAME with its own), locale and terminal, time zone, thread counts
#: and numeric-library switches (OpenBLAS needs its own on some processors), GPU selection, and
#: the model hubs' offline switches.
AGENT_INHERITED_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "COLORTERM", "NO_COLOR",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "TOKENIZERS_PARALLELISM",
)  # fmt: skip
#: … and the locale categories.
AGENT_INHERITED_ENV_PREFIXES = ("LC_",)
# Recorder variables set only when the run sets them (`recorder_contract_env`).
_OPTIONAL_RECORDER_ENV = (ENV_MAX_SUBMISSIONS, ENV_EVAL_LIMIT)


def resolve_agent_argv(command: list[str], args: list[str], *, cwd: Path | None = None) -> list[str]:
    """`command + args`, with a leading `python`/`python3` replaced by this interpreter.

    Local mode runs the agent with the Python that runs a2rl (its virtual environment, where the
    baseline agents and trl are installed). Anything else must be found on PATH or be a path.
    """
    argv = [*command, *args]
    if argv[0] in PYTHON_NAMES:
        return [sys.executable, *argv[1:]]
    exe = argv[0]
    if "/" in exe:
        path = Path(exe) if Path(exe).is_absolute() or cwd is None else cwd / exe
        if not path.exists():
            raise A2rlError(f"agent command not found: {exe}")
        return argv
    if shutil.which(exe) is None:
        raise A2rlError(f"agent command not found on PATH: {exe}")
    return argv


def agent_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What the agent inherits of the runner's environment: the allow-listed variables
    (`AGENT_INHERITED_ENV`), never anything else."""
    return {
        k: v
        for k, v in environ.items()
        if k in AGENT_INHERITED_ENV or k.startswith(AGENT_INHERITED_ENV_PREFIXES)
    }


def cpu_thread_env(cpu: str) -> dict[str, str]:
    """`THREAD_ENV` at a container's CPU limit, rounded up (at least 1). OpenMP (so torch), MKL and
    OpenBLAS start a thread per core of the node otherwise, and a container limited below that is
    throttled: a small torch training loop ran 3x slower with 2 threads than with 1 under a 0.9-CPU
    quota on 2 cores (docs/operator.md, "CPU threads")."""
    threads = str(max(1, math.ceil(quantity_value(cpu))))
    return dict.fromkeys(THREAD_ENV, threads)


def agent_contract_env(spec: BenchRunSpec, ws: Workspace, grading_url: str) -> dict[str, str]:
    """The agent contract's variables: task, base model, workspace paths, grading URL, seed."""
    return {
        ENV_TASK: spec.task,
        ENV_BASE_MODEL: spec.base_model.name,
        ENV_WORKSPACE: str(ws.root),
        ENV_MODEL_PATH: str(ws.model_dir),
        ENV_DATA_PATH: str(ws.data_dir),
        ENV_OUTPUT_DIR: str(ws.output_dir),
        ENV_GRADING_SERVER_URL: grading_url,
        ENV_SEED: str(spec.seed),
    }


def agent_env(
    spec: BenchRunSpec, ws: Workspace, grading_url: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allow-listed inherited variables < defaults < `spec.agent.env` < the contract variables
    (never overridable)."""
    env = agent_base_env(os.environ if environ is None else environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update({var.name: var.value for var in spec.agent.env})
    env.update(agent_contract_env(spec, ws, grading_url))
    return env


def agent_cwd(spec: BenchRunSpec, ws: Workspace) -> Path:
    """`spec.agent.workingDir` in the workspace at `ws`: relative to it, or a path under the
    cluster's mount point (`/workspace/...`, which validation allows) taken relative to it too."""
    wd = spec.agent.working_dir
    if not wd:
        return ws.root
    path = PurePosixPath(wd)
    if path.is_absolute():
        path = path.relative_to(WORKSPACE_MOUNT)
    return ws.root / path


def eval_environ(spec: BenchRunSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the run's evaluations (baseline and submissions): the runner's, with the
    run's own judge (`spec.evaluation.judge`) over any `A2RL_JUDGE_*` it has."""
    return {**(os.environ if environ is None else environ), **spec.evaluation.settings_env()}


def recorder_env(
    *,
    spec: BenchRunSpec,
    store_uri: str,
    layout: RunLayout,
    ws: Workspace,
    port: int,
    start_epoch: float,
    base_model_digest: str,
    heldout_dir: Path,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Configuration of the local `a2rl recorder serve`: the contract (`recorder_contract_env`) plus
    the store, the clock's start, the base model's digest and the held-out split.

    The recorder's eval processes inherit it, so the run's own judge (`spec.evaluation.judge`)
    overrides the runner's `A2RL_JUDGE_*` here; the agent never sees either (`agent_base_env`).
    """
    env = eval_environ(spec, environ)
    for optional in _OPTIONAL_RECORDER_ENV:  # unset in the run: no inherited value either
        env.pop(optional, None)
    env.update(recorder_contract_env(spec=spec, layout=layout, workspace=ws.root, port=port))
    env.update(
        {
            ENV_STORE_URI: store_uri,
            ENV_RUN_START: f"{start_epoch:.3f}",
            ENV_BASE_MODEL_DIGEST: base_model_digest,
            ENV_HELDOUT_PATH: str(heldout_dir),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def recorder_contract_env(
    *, spec: BenchRunSpec, layout: RunLayout, workspace: Path, port: int
) -> dict[str, str]:
    """The run's configuration of the recorder, the same in both modes: run identity, workspace,
    task, port, budget, evaluation backend, and the submission cap and evaluation limit when the
    run sets them (schemas: "Recorder configuration by environment")."""
    env = {
        ENV_RUN_PREFIX: layout.prefix,
        ENV_RUN_NAME: layout.name,
        ENV_RUN_NAMESPACE: layout.namespace,
        ENV_RUN_UID: layout.uid,
        ENV_WORKSPACE: str(workspace),
        ENV_TASK: spec.task,
        ENV_RECORDER_PORT: str(port),
        ENV_RUN_TIMEOUT: str(spec.budget.wall_time_seconds),
        ENV_EVAL_BACKEND: spec.evaluation.backend,
    }
    if spec.budget.max_submissions is not None:
        env[ENV_MAX_SUBMISSIONS] = str(spec.budget.max_submissions)
    if spec.evaluation.limit is not None:
        env[ENV_EVAL_LIMIT] = str(spec.evaluation.limit)
    return env


def gateway_contract_env(
    *,
    provider: str,
    token: str | None = None,
    base_url: str | None = None,
    model: str | None = None,
    host: str | None = None,
    port: int | None = None,
    socket_path: Path | None = None,
    store_uri: str | None = None,
    run_prefix: str | None = None,
    driver_tokens: int | None = None,
    driver_cost_usd: float | None = None,
    prices_file: Path | None = None,
    upstream_timeout_s: float | None = None,
    key_source: str | None = None,
) -> dict[str, str]:
    """The driver gateway's configuration as `a2rl gateway serve` reads it
    (`a2rl_gateway.GatewayConfig.from_env`), written by both modes: the local runner through
    `GatewayConfig.to_env`, the operator into the gateway pod (whose token comes from a Secret, so
    it passes none). Unset values (None, "") are left out: the gateway's defaults apply."""
    values: dict[str, object] = {
        ENV_GATEWAY_PROVIDER: provider,
        ENV_GATEWAY_TOKEN: token,
        ENV_GATEWAY_BASE_URL: base_url,
        ENV_GATEWAY_MODEL: model,
        ENV_GATEWAY_HOST: host,
        ENV_GATEWAY_PORT: port,
        ENV_GATEWAY_SOCKET: socket_path,
        ENV_STORE_URI: store_uri,
        ENV_RUN_PREFIX: run_prefix,
        ENV_DRIVER_TOKENS: driver_tokens,
        ENV_DRIVER_COST_USD: None if driver_cost_usd is None else repr(driver_cost_usd),
        ENV_DRIVER_PRICES: prices_file,
        ENV_GATEWAY_UPSTREAM_TIMEOUT: None if upstream_timeout_s is None else f"{upstream_timeout_s:g}",
        ENV_GATEWAY_KEY_SOURCE: key_source,
    }
    return {name: str(value) for name, value in values.items() if value is not None and value != ""}
