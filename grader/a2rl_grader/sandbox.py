"""The sandbox of a local eval process, sized for what it evaluates (`a2rl.eval_sandbox.EvalBox`).

Shared by both launchers of `a2rl eval`: the recorder's `LocalDispatcher` (`submission_box`) and
the runner's baseline (`baseline_box`). Of a local store the eval process may write only its
run's prefix (result, details, traces) — the baseline also the store-wide baseline cache and
the machine keys that sign it; a submission's evaluation does not even see those keys. It has no
network unless the evaluation needs one: a task that calls a judge or search endpoint
(`Task.endpoint_env`), or a store that is not a local directory.
"""

from __future__ import annotations

from collections.abc import Mapping

from a2rl_tasks import task_class

from a2rl.eval_sandbox import EvalBox, local_store_dir
from a2rl.local_keys import keys_dir

#: The store-wide baseline cache (`a2rl.store.layout.baseline_key`: `baselines/<task>/…`).
BASELINES_DIR = "baselines"


def _needs_network(task: str, store_uri: str) -> bool:
    return local_store_dir(store_uri) is None or bool(task_class(task).endpoint_env)


def submission_box(
    index: int, *, task: str, store_uri: str, run_prefix: str, env: Mapping[str, str] | None = None
) -> EvalBox:
    return EvalBox(
        f"eval-{index:05d}",
        store_root=local_store_dir(store_uri),
        store_writable=[run_prefix],
        hidden=[keys_dir()],
        network=_needs_network(task, store_uri),
        env=env,
    )


def baseline_box(
    *, task: str, store_uri: str, run_prefix: str, env: Mapping[str, str] | None = None
) -> EvalBox:
    return EvalBox(
        "eval-baseline",
        writable=[keys_dir()],
        store_root=local_store_dir(store_uri),
        store_writable=[run_prefix, BASELINES_DIR],
        network=_needs_network(task, store_uri),
        env=env,
    )
