"""`run.json`: the run's record in the store (who, what, when, how it ended), written by the local
runner and by the operator (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from a2rl.api.benchrun import BenchRun
from a2rl.store.layout import RunLayout


def iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def run_json(
    run: BenchRun,
    layout: RunLayout,
    *,
    base_model_digest: str,
    evaluator_version: str,
    started_at: float | None = None,
    ended_at: float | None = None,
    end_reason: str | None = None,
    agent_exit_code: int | None = None,
) -> dict[str, Any]:
    """The run.json document of the shared contract (times are epoch seconds in, ISO 8601 out)."""
    spec = run.spec
    return {
        "name": layout.name,
        "namespace": layout.namespace,
        "uid": layout.uid,
        "task": spec.task,
        "base_model": {
            "name": spec.base_model.name,
            "source": spec.base_model.source,
            "digest": base_model_digest,
        },
        "agent": {"command": [*spec.agent.command, *spec.agent.args], "image": spec.agent.image},
        "driver": spec.driver.to_wire() if spec.driver else None,
        "budget": {
            "wall_time_seconds": spec.budget.wall_time_seconds,
            "max_submissions": spec.budget.max_submissions,
        },
        "spec": spec.to_wire(),
        "started_at": iso(started_at),
        "deadline": iso(None if started_at is None else started_at + spec.budget.wall_time_seconds),
        "ended_at": iso(ended_at),
        "end_reason": end_reason,
        "agent_exit_code": agent_exit_code,
        "evaluator_version": evaluator_version,
        "mode": "local",
    }
