"""The sandbox of a local eval process, sized for what it evaluates (`a2rl.eval_sandbox.EvalBox`).

Shared by both launchers of `a2rl eval`: the recorder's `LocalDispatcher` (`submission_box`) and
the runner's baseline (`baseline_box`). Of a local store the eval process may write only its
run's prefix (result, details, traces) — the baseline also the store-wide baseline cache and
the machine keys that sign it; a submission's evaluation does not even see those keys. It has no
network but loopback; it reaches the endpoints the evaluation calls, and only those (through the
box's egress proxy): the judge or search URLs of the task's `Task.endpoint_env` in the
evaluation's environment, and the endpoint of an S3 store (``AWS_ENDPOINT_URL``). Of the host's
files it reads what every evaluation reads (`a2rl.eval_view`) and its held-out data (the
baseline also the base model's directory), nothing else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from a2rl_tasks import task_class

from a2rl.constants import ENV_S3_ENDPOINT
from a2rl.eval_sandbox import EvalBox, local_store_dir
from a2rl.local_keys import keys_dir

#: The store-wide baseline cache (`a2rl.store.layout.baseline_key`: `baselines/<task>/…`).
BASELINES_DIR = "baselines"


def eval_endpoints(task: str, store_uri: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The URLs an evaluation of `task` with the store at `store_uri` calls, from `env` (the eval
    process's environment; default this process's)."""
    env = os.environ if env is None else env
    names = [*task_class(task).endpoint_env]
    if local_store_dir(store_uri) is None:
        names.append(ENV_S3_ENDPOINT)
    return [env[name].strip() for name in names if env.get(name, "").strip()]


def submission_box(
    index: int,
    *,
    task: str,
    store_uri: str,
    run_prefix: str,
    heldout: Path,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> EvalBox:
    """`python`: the interpreter the launcher runs the eval process with (shown too)."""
    return EvalBox(
        f"eval-{index:05d}",
        store_root=local_store_dir(store_uri),
        store_writable=[run_prefix],
        hidden=[keys_dir()],
        readable=[heldout, Path(python)],
        endpoints=eval_endpoints(task, store_uri, env),
        env=env,
    )


def baseline_box(
    *,
    task: str,
    store_uri: str,
    run_prefix: str,
    model_dir: Path,
    heldout: Path,
    env: Mapping[str, str] | None = None,
) -> EvalBox:
    return EvalBox(
        "eval-baseline",
        writable=[keys_dir()],
        store_root=local_store_dir(store_uri),
        store_writable=[run_prefix, BASELINES_DIR],
        readable=[model_dir, heldout],
        endpoints=eval_endpoints(task, store_uri, env),
        env=env,
    )
