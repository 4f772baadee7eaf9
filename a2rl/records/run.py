"""`run.json`: the run's record in the store (who, what, when, how it ended), written by the local
runner and by the operator (`mode: cluster`); `run_record` builds it (pure functions).

Every field is optional when reading: an older or partial run.json (a run that never started, a
document from another writer) still loads; unknown fields are kept.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from a2rl.api.benchrun import BenchRun
from a2rl.records.base import Record
from a2rl.records.times import iso_utc
from a2rl.store.layout import RunLayout

#: run.json's `end_reason`: how the run ended. The one vocabulary of the local runner and the
#: operator (`a2rl_operator.grading.decisions.END_REASONS`); docs/local-mode.md explains each.
EndReason = Literal[
    "completed",
    "deadline_exceeded",
    "failed",
    "driver_budget_exhausted",
    "memory_limit_exceeded",
    "process_limit_exceeded",
    "disk_limit_exceeded",
    "interrupted",
    "no_submission",
    "preempted",
]
END_REASONS: tuple[str, ...] = get_args(EndReason)
#: The agent exited 0 (after at least one submission).
COMPLETED: EndReason = "completed"
#: The agent used its whole wall-time budget (after at least one submission).
DEADLINE_EXCEEDED: EndReason = "deadline_exceeded"
#: The agent exited non-zero, or could not be started, or the runner failed.
FAILED: EndReason = "failed"
#: Local spelling of the cluster's `DriverBudgetExhausted`: the driver gateway refused further calls.
DRIVER_BUDGET_EXHAUSTED: EndReason = "driver_budget_exhausted"
#: The agent hit one of its limits (`a2rl_runner.sandbox.limits`).
MEMORY_LIMIT_EXCEEDED: EndReason = "memory_limit_exceeded"
PROCESS_LIMIT_EXCEEDED: EndReason = "process_limit_exceeded"
DISK_LIMIT_EXCEEDED: EndReason = "disk_limit_exceeded"
#: The runner was stopped (Ctrl-C, SIGTERM) in any phase: staging, baseline, agent or wrap-up.
INTERRUPTED: EndReason = "interrupted"
#: The agent completed or ran out of time without a single submission (`agent_last_words` says
#: what it printed last).
NO_SUBMISSION: EndReason = "no_submission"
#: Cluster runs only: Kueue evicted the workspace Job after the agent's budget clock had started
#: (a higher-priority run preempted it); the run ends there, its agent's time up to the eviction
#: accounted (docs/operator.md, "Quotas and Kueue").
PREEMPTED: EndReason = "preempted"


class BaseModelRef(Record):
    """`base_model`: the base model as the BenchRun names it, and its tree digest."""

    name: str | None = None
    source: str | None = None
    digest: str | None = None


class AgentRef(Record):
    """`agent`: the agent's full command line and image; for an LLM agent stack, the stack, its
    version and mode (`command` is then empty: a2rl builds the stack's command line)."""

    command: list[str] = []
    image: str | None = None
    stack: str | None = None
    stack_version: str | None = None
    mode: str | None = None


class BudgetRef(Record):
    """`budget`: the run's wall time (seconds) and submission cap."""

    wall_time_seconds: int | float | None = None
    max_submissions: int | None = None


class RunRecord(Record):
    """`<namespace>/<name>-<uid>/run.json` (times are ISO 8601 strings, UTC)."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    #: The BenchRun's labels (e.g. `a2rl.dev/campaign` on a campaign's runs); None when it had none.
    labels: dict[str, str] | None = None
    task: str | None = None
    base_model: BaseModelRef | None = None
    agent: AgentRef | None = None
    #: The BenchRun's `spec.driver` in wire form (camelCase), None without a driver.
    driver: dict[str, Any] | None = None
    #: What the driver gateway metered (the BenchRun status' `driverTokens`, `driverCostUSD`).
    driver_tokens: int | None = None
    driver_cost_usd: float | None = None
    #: Cluster runs queued through Kueue: seconds the workspace Job waited for admission (every
    #: wait together; not charged to the budget) and how many times Kueue evicted it (the BenchRun
    #: status' `queueWaitSeconds`, `evictions`); None for a run that was not queued.
    queue_wait_seconds: int | None = None
    evictions: int | None = None
    budget: BudgetRef | None = None
    #: The BenchRun's whole spec in wire form (camelCase), as submitted.
    spec: dict[str, Any] | None = None
    started_at: str | None = None
    deadline: str | None = None
    ended_at: str | None = None
    end_reason: str | None = None
    agent_exit_code: int | None = None
    evaluator_version: str | None = None
    #: `spec.evaluation.protocol` (`reference` | `a2rl`); None in records written before it existed.
    protocol: str | None = None
    mode: str | None = None
    #: What isolated the agent: e.g. "bubblewrap 0.8.0" (local sandbox), "pod" (cluster), or
    #: "none" (`a2rl run --no-sandbox`: the report warns).
    sandbox: str | None = None
    #: The agent's limits in local mode and how they are enforced (`a2rl_runner.sandbox.limits`),
    #: e.g. "mechanism cgroup-v1, memory 8.0 GiB, processes 4096, …"; None where nothing says.
    agent_limits: str | None = None
    #: The last non-empty lines of the agent's log (bounded), when the agent made no submission:
    #: why it gave up, in its own words.
    agent_last_words: list[str] | None = None


def run_record(
    run: BenchRun,
    layout: RunLayout,
    *,
    base_model_digest: str | None,
    evaluator_version: str,
    started_at: float | None = None,
    ended_at: float | None = None,
    end_reason: str | None = None,
    agent_exit_code: int | None = None,
    mode: str = "local",
    sandbox: str | None = None,
    driver_tokens: int | None = None,
    driver_cost_usd: float | None = None,
    agent_limits: str | None = None,
    agent_last_words: list[str] | None = None,
    queue_wait_seconds: int | None = None,
    evictions: int | None = None,
) -> RunRecord:
    """The run.json document of the shared contract (times are epoch seconds in, ISO 8601 out).
    `driver_tokens`/`driver_cost_usd` (what the driver gateway metered), `agent_limits` and
    `queue_wait_seconds`/`evictions` (Kueue's) are written when given."""
    spec = run.spec
    metered: dict[str, Any] = {}
    if driver_tokens is not None:
        metered["driver_tokens"] = driver_tokens
    if driver_cost_usd is not None:
        metered["driver_cost_usd"] = driver_cost_usd
    if agent_limits is not None:
        metered["agent_limits"] = agent_limits
    if agent_last_words is not None:
        metered["agent_last_words"] = agent_last_words
    if run.metadata.labels:
        metered["labels"] = dict(run.metadata.labels)
    if queue_wait_seconds is not None:
        metered["queue_wait_seconds"] = queue_wait_seconds
    if evictions is not None:
        metered["evictions"] = evictions
    return RunRecord(
        name=layout.name,
        namespace=layout.namespace,
        uid=layout.uid,
        task=spec.task,
        base_model=BaseModelRef(
            name=spec.base_model.name, source=spec.base_model.source, digest=base_model_digest
        ),
        agent=_agent_ref(run),
        driver=spec.driver.to_wire() if spec.driver else None,
        budget=BudgetRef(
            wall_time_seconds=spec.budget.wall_time_seconds, max_submissions=spec.budget.max_submissions
        ),
        spec=spec.to_wire(),
        started_at=iso_utc(started_at),
        deadline=iso_utc(None if started_at is None else started_at + spec.budget.wall_time_seconds),
        ended_at=iso_utc(ended_at),
        end_reason=end_reason,
        agent_exit_code=agent_exit_code,
        evaluator_version=evaluator_version,
        protocol=spec.evaluation.protocol,
        mode=mode,
        sandbox=sandbox,
        **metered,
    )


def _agent_ref(run: BenchRun) -> AgentRef:
    agent = run.spec.agent
    if agent.stack is None:
        return AgentRef(command=[*agent.command, *agent.args], image=agent.image_ref)
    return AgentRef(
        image=agent.image_ref,
        stack=agent.stack,
        stack_version=agent.stack_version_or_default,
        mode=agent.mode,
    )
