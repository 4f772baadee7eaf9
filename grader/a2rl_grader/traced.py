"""Spans of the eval process around a task's evaluation (generation vs. scoring).

A task's `evaluate(backend, …)` generates and then scores in one call. `traced_evaluate`
hands the task a `TracedBackend`, which puts a `generate` span around every generation call,
and then records a `score` span from the end of the last generation to the end of `evaluate`
(scoring and any post-processing: the task's own code after the model has answered).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl_tasks.base import EvalResult, Task

from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl.tracing import span


class TracedBackend(InferenceBackend):
    """Delegates to `inner`; one span per `generate` call (prompt count as an attribute)."""

    def __init__(self, inner: InferenceBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.generate_calls = 0
        self.last_generate_end_ns: int | None = None

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        with span("generate", {"a2rl.eval.prompts": len(prompts), "a2rl.eval.backend": self.name}):
            try:
                return self.inner.generate(prompts, request)
            finally:
                self.generate_calls += 1
                self.last_generate_end_ns = time.time_ns()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, attr: str) -> Any:  # anything else a task may read from its backend
        return getattr(self.inner, attr)


def traced_evaluate(
    task: Task, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None
) -> EvalResult:
    """`task.evaluate` inside an `evaluate` span, with `generate` and `score` spans under it."""
    traced = TracedBackend(backend)
    with span("evaluate", {"a2rl.task": task.name}):
        result = task.evaluate(traced, heldout_dir, limit=limit)
        if traced.last_generate_end_ns is not None:
            with span("score", {"a2rl.eval.n": result.n}, start_time_ns=traced.last_generate_end_ns):
                pass
    return result
