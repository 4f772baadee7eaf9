"""Benchmark tasks. Each sub-package is one task following `a2rl_tasks.base.Task`."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from a2rl.errors import A2rlError
from a2rl.protocols import EvalProtocol, protocol_from_env
from a2rl_tasks.base import EvalResult, StagedData, Task

# task id -> "module:ClassName"; modules are imported lazily (some need heavy packages).
TASKS: dict[str, str] = {
    "arith": "a2rl_tasks.arith:ArithTask",
    "gsm8k": "a2rl_tasks.gsm8k:GSM8KTask",
    "humaneval": "a2rl_tasks.humaneval:HumanEvalTask",
    "alfworld": "a2rl_tasks.alfworld:ALFWorldTask",
    "alpacaeval": "a2rl_tasks.alpacaeval:AlpacaEvalTask",
    "deepsearchqa": "a2rl_tasks.deepsearchqa:DeepSearchQATask",
    "webshop": "a2rl_tasks.webshop:WebShopTask",
}


def task_class(name: str) -> type[Task]:
    """The class of the task called `name` (its module imported, nothing built)."""
    target = TASKS.get(name)
    if target is None:
        raise A2rlError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    module_name, cls_name = target.split(":")
    cls: type[Task] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def get_task(
    name: str, environ: Mapping[str, str] | None = None, *, protocol: EvalProtocol | None = None
) -> Task:
    """The task called `name`; a clear error listing the known ones otherwise.

    `environ`: the evaluation's settings (the judge, the search tool) when they are not this
    process's environment, e.g. a run's own judge (`spec.evaluation.judge`).
    `protocol`: the evaluation protocol (`a2rl.protocols`); None: the one `environ` names
    (`A2RL_EVAL_PROTOCOL`, set from `spec.evaluation.protocol`), else `reference`.
    """
    cls = task_class(name)
    if protocol is None:
        protocol = protocol_from_env(environ)
    if environ is not None and cls.endpoint_env:
        return cls(environ=environ, protocol=protocol)
    return cls(protocol=protocol)


__all__ = ["TASKS", "EvalResult", "StagedData", "Task", "get_task", "task_class"]
