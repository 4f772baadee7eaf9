"""Condition math and the mapping from observed children to BenchRun conditions. Pure functions.

Statuses are the API models (`BenchRunStatus`, `BenchSubmissionStatus`): `run_status` /
`submission_status` read them from an object body, `status_wire` writes them back in the API
server's form (camelCase, only the fields that were set and are not None). Conditions are
metav1.Condition dicts (wire format) for the condition math (`conditions_of` / `condition_models`
convert). `set_condition` keeps `lastTransitionTime` when the status does not change, so
re-observing the same state never looks like a transition.

Every kind's status also carries the GitOps-readable conditions (`lifecycle`): kstatus's
`Reconciling`/`Stalled`, `Ready`, `Finished` and the terminal pair `Succeeded`/`Failed`, so that
kstatus, `kubectl wait`, Argo CD and Flux read a BenchRun, a BenchSubmission or a BenchCampaign
the same way (docs/gitops.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from a2rl.api.benchrun import BenchRunStatus, Phase
from a2rl.api.benchsubmission import BenchSubmissionStatus
from a2rl.api.common import ApiModel, Condition
from a2rl.constants import (
    COND_ACCEPTED,
    COND_ADMITTED,
    COND_AGENT_FINISHED,
    COND_AGENT_RUNNING,
    COND_FAILED,
    COND_FINISHED,
    COND_GRADED,
    COND_QUEUED,
    COND_QUOTA_EXCEEDED,
    COND_READY,
    COND_RECONCILING,
    COND_STALLED,
    COND_SUCCEEDED,
    COND_WORKSPACE_READY,
    REASON_AGENT_FAILED,
    REASON_COMPLETED,
    REASON_DEADLINE_EXCEEDED,
    REASON_DRIVER_BUDGET_EXHAUSTED,
)
from a2rl_operator import queueing

#: A metav1.Condition in wire form (what `Condition.to_wire` gives).
Cond = dict[str, Any]

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"

# Reasons (CamelCase). Condition types and the AgentFinished reasons live in a2rl.constants.
R_VALID = "Valid"
R_UNKNOWN_TASK = "UnknownTask"
R_INVALID_SPEC = "InvalidSpec"
R_NO_STORE = "NoStoreConfigured"
R_NAME_CONFLICT = "NameConflict"
R_WAITING_FOR_ADMISSION = "WaitingForAdmission"
R_ADMITTED = "Admitted"
R_NOT_QUEUED = "NotQueued"
R_EXCEEDED_QUOTA = "ExceededQuota"
R_QUOTA_AVAILABLE = "QuotaAvailable"
R_CHILDREN_CREATED = "ChildrenCreated"
R_POD_SCHEDULED = "PodScheduled"
R_POD_PENDING = "PodPending"
R_RUNNING = "Running"
R_NOT_STARTED = "NotStarted"
R_AGENT_COMPLETED = "AgentCompleted"
R_BUDGET_EXHAUSTED = "BudgetExhausted"
R_AGENT_FAILED = "AgentFailed"
#: The workspace set-up container failed (data not staged, base model missing …): no agent ran.
R_SETUP_FAILED = "SetupFailed"


@dataclass(frozen=True)
class Change:
    """One desired condition value."""

    type: str
    status: str
    reason: str
    message: str = ""


def now_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- statuses as models ----------------------------------------------------------------------


def status_wire(status: ApiModel) -> dict[str, Any]:
    """A status as the API server holds it: camelCase, the fields that were set (read from the
    server or assigned by the operator), a field set to None left out (that is how one is removed),
    so a status read and written back is the same document."""
    return status.to_wire(only_set=True)


def run_status(run: Mapping[str, Any]) -> BenchRunStatus:
    """`status` of a BenchRun body (empty when it has none)."""
    return BenchRunStatus.model_validate(dict(run.get("status") or {}))


def submission_status(sub: Mapping[str, Any]) -> BenchSubmissionStatus:
    """`status` of a BenchSubmission body (empty when it has none)."""
    return BenchSubmissionStatus.model_validate(dict(sub.get("status") or {}))


def run_conditions(run: Mapping[str, Any]) -> list[Cond]:
    """The conditions of a BenchRun body (a kopf body too), read through `BenchRunStatus`."""
    return conditions_of(run_status(run))


def conditions_of(status: BenchRunStatus | BenchSubmissionStatus) -> list[Cond]:
    """The status's conditions in wire form, for the condition math below."""
    return [status_wire(c) for c in status.conditions]


def condition_models(conds: Sequence[Cond]) -> list[Condition]:
    return [Condition.model_validate(c) for c in conds]


def get_condition(conds: Sequence[Cond], type_: str) -> Cond | None:
    return next((c for c in conds if c.get("type") == type_), None)


def is_true(conds: Sequence[Cond], type_: str) -> bool:
    cond = get_condition(conds, type_)
    return cond is not None and cond.get("status") == TRUE


def one_line(message: str, limit: int = 1024) -> str:
    """Event and condition messages: one line (kopf/Kubernetes events reject newlines), bounded."""
    text = re.sub(r"\s+", " ", message).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def set_condition(conds: Sequence[Cond], change: Change, generation: int | None, now: str) -> list[Cond]:
    """A new list with `change` applied. Order is kept (new types go last); the transition time
    changes only when the status does."""
    out: list[Cond] = []
    found = False
    for cond in conds:
        if cond.get("type") != change.type:
            out.append(dict(cond))
            continue
        found = True
        same = cond.get("status") == change.status
        out.append(_cond(change, generation, cond["lastTransitionTime"] if same else now))
    if not found:
        out.append(_cond(change, generation, now))
    return out


def _cond(change: Change, generation: int | None, when: str) -> Cond:
    cond: Cond = {
        "type": change.type,
        "status": change.status,
        "reason": change.reason,
        "message": one_line(change.message),
        "lastTransitionTime": when,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def apply_changes(
    conds: Sequence[Cond], changes: Sequence[Change], generation: int | None, now: str
) -> tuple[list[Cond], list[Change]]:
    """Apply `changes`; also return those that are transitions (new status or reason): the ones
    that deserve an Event."""
    out = list(conds)
    transitions: list[Change] = []
    for change in changes:
        old = get_condition(out, change.type)
        if old is None or old.get("status") != change.status or old.get("reason") != change.reason:
            transitions.append(change)
        out = set_condition(out, change, generation, now)
    return out, transitions


def is_terminal(conds: Sequence[Cond]) -> bool:
    return is_true(conds, COND_SUCCEEDED) or is_true(conds, COND_FAILED)


def derive_phase(conds: Sequence[Cond]) -> str:
    """One word for `kubectl get` (the conditions are the truth)."""
    if is_true(conds, COND_FAILED):
        return Phase.FAILED.value
    if is_true(conds, COND_SUCCEEDED):
        return Phase.SUCCEEDED.value
    if is_true(conds, COND_AGENT_FINISHED) and not is_true(conds, COND_GRADED):
        return Phase.GRADING.value
    if is_true(conds, COND_AGENT_RUNNING) or is_true(conds, COND_WORKSPACE_READY):
        return Phase.RUNNING.value
    if is_true(conds, COND_QUEUED) or is_true(conds, COND_QUOTA_EXCEEDED):
        return Phase.QUEUED.value
    return Phase.PENDING.value


# --- the GitOps-readable conditions (one mapping for every kind) ---------------------------------


class Outcome(StrEnum):
    """Where an object's work stands, as GitOps tools need to know it."""

    IN_FLIGHT = "InFlight"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: The conditions `lifecycle` owns, in the order it sets them.
LIFECYCLE_TYPES = (COND_RECONCILING, COND_STALLED, COND_READY, COND_FINISHED, COND_SUCCEEDED, COND_FAILED)


def lifecycle(outcome: Outcome, reason: str, message: str = "") -> list[Change]:
    """The GitOps-readable condition changes of an object whose work is `outcome`, pure.

    `reason` (CamelCase) and `message` say why: while in flight, what the object is doing (e.g.
    `Running`, `Evaluating`); once over, the terminal reason (e.g. `AgentCompleted`,
    `EvalJobFailed`). Every change carries them, so each condition reads on its own.

    | outcome   | Reconciling | Stalled | Ready | Finished | Succeeded | Failed |
    |-----------|-------------|---------|-------|----------|-----------|--------|
    | IN_FLIGHT | True        | False   | False | False    | (unset)   | (unset)|
    | SUCCEEDED | False       | False   | True  | True     | True      | False  |
    | FAILED    | False       | True    | False | True     | False     | True   |

    kstatus reads `Reconciling=True` as InProgress and `Stalled=True` as Failed (with
    `status.observedGeneration` equal to `metadata.generation`, which the writer keeps), anything
    else as Current; `kubectl wait --for=condition=Finished` ends on either outcome; Argo CD's
    health scripts and Flux's `healthCheckExprs` read the same conditions (docs/gitops.md).

    Apply the result with `apply_changes` after the kind's own changes (the writers of BenchRun,
    BenchSubmission and BenchCampaign status all do), and post no Events for it: these
    conditions restate the kind's own, which have their Events already.
    """
    over = outcome is not Outcome.IN_FLIGHT
    ok = outcome is Outcome.SUCCEEDED
    bad = outcome is Outcome.FAILED

    def flag(value: bool) -> str:
        return TRUE if value else FALSE

    changes = [
        Change(COND_RECONCILING, flag(not over), reason, message),
        Change(COND_STALLED, flag(bad), reason, message),
        Change(COND_READY, flag(ok), reason, message),
        Change(COND_FINISHED, flag(over), reason, message),
    ]
    if over:
        changes += [
            Change(COND_SUCCEEDED, flag(ok), reason, message),
            Change(COND_FAILED, flag(bad), reason, message),
        ]
    return changes


def apply_lifecycle(
    conds: Sequence[Cond], outcome: Outcome, reason: str, message: str, *, generation: int | None, now: str
) -> list[Cond]:
    """`conds` with `lifecycle(outcome, reason, message)` applied (no transitions reported)."""
    return apply_changes(conds, lifecycle(outcome, reason, message), generation, now)[0]


#: Of an in-flight run, the condition whose message says what it is doing, by phase.
_PHASE_CONDITION = {
    Phase.PENDING.value: COND_ACCEPTED,
    Phase.QUEUED.value: COND_QUEUED,
    Phase.RUNNING.value: COND_AGENT_RUNNING,
    Phase.GRADING.value: COND_GRADED,
}


def run_outcome(conds: Sequence[Cond]) -> tuple[Outcome, str, str]:
    """A BenchRun's `(outcome, reason, message)` for `lifecycle`, from its own conditions: the
    terminal condition's reason and message once over (`Failed` wins), else its phase (`Pending`,
    `Queued`, `Running`, `Grading`) with the message of the condition behind that phase."""
    for type_, outcome in ((COND_FAILED, Outcome.FAILED), (COND_SUCCEEDED, Outcome.SUCCEEDED)):
        cond = get_condition(conds, type_)
        if cond is not None and cond.get("status") == TRUE:
            return outcome, str(cond.get("reason") or type_), str(cond.get("message") or "")
    phase = derive_phase(conds)
    cond = get_condition(conds, _PHASE_CONDITION.get(phase, COND_ACCEPTED))
    if phase == Phase.RUNNING.value and (cond is None or cond.get("status") != TRUE):
        cond = get_condition(conds, COND_WORKSPACE_READY)  # scheduled, the agent not started yet
    message = str((cond or {}).get("message") or "") or f"the run is {phase.lower()}"
    return Outcome.IN_FLIGHT, phase, message


# --- rejection -------------------------------------------------------------------------------


def rejection(reason: str, message: str) -> list[Change]:
    """The run is not accepted: nothing is created, and it is over."""
    return [
        Change(COND_ACCEPTED, FALSE, reason, message),
        Change(COND_FAILED, TRUE, reason, message),
    ]


def accepted() -> Change:
    return Change(COND_ACCEPTED, TRUE, R_VALID, "spec validated; creating the workspace")


# --- observation of the workspace Job and its pod ---------------------------------------------


def _job_condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == TRUE:
            return dict(cond)
    return None


def _container_status(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return dict(status)
    return None


def _pod_scheduled(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == TRUE:
            return True
    return False


def setup_failure(pod: dict[str, Any] | None, setup_container: str = "setup") -> str | None:
    """Why the workspace set-up init container failed (its termination message: the last log
    lines, `FallbackToLogsOnError`), or None when it did not fail."""
    for status in ((pod or {}).get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") != setup_container:
            continue
        ended = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get(
            "terminated"
        )
        if not ended or ended.get("exitCode") in (0, None):
            return None
        lines = [line for line in str(ended.get("message") or "").splitlines() if line.strip()]
        detail = lines[-1].strip() if lines else str(ended.get("reason") or "no message")
        return f"workspace set-up failed (exit code {ended['exitCode']}): {detail}"
    return None


def _seconds(start: str, end: str) -> float:
    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


def stopped_at_budget(pod: dict[str, Any] | None, agent_container: str = "agent") -> int | None:
    """The budget (s) when the agent container was stopped by its deadline probe: it ended with a
    non-zero code after running at least the probe's `initialDelaySeconds` (the budget; the probe
    cannot pass, so the kubelet kills a container that reaches it). None otherwise."""
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    spec = next((c for c in containers if c.get("name") == agent_container), None)
    budget = ((spec or {}).get("livenessProbe") or {}).get("initialDelaySeconds")
    ended = ((_container_status(pod or {}, agent_container) or {}).get("state") or {}).get("terminated")
    if not isinstance(budget, int) or not ended or ended.get("exitCode") in (0, None):
        return None
    started, finished = ended.get("startedAt"), ended.get("finishedAt")
    if not started or not finished or _seconds(str(started), str(finished)) < budget:
        return None
    return budget


def agent_finish(job: dict[str, Any], pod: dict[str, Any] | None = None) -> Change | None:
    """AgentFinished from the Job's terminal (or failure-target) condition; a failed Job whose
    set-up container failed says so (the agent never ran)."""
    if _job_condition(job, "Complete") or _job_condition(job, "SuccessCriteriaMet"):
        return Change(COND_AGENT_FINISHED, TRUE, REASON_COMPLETED, "the agent exited successfully")
    failed = _job_condition(job, "Failed") or _job_condition(job, "FailureTarget")
    if failed is None:
        return None
    if failed.get("reason") == "DeadlineExceeded":
        msg = "the budget ran out: the Job reached activeDeadlineSeconds and the agent was stopped"
        return Change(COND_AGENT_FINISHED, TRUE, REASON_DEADLINE_EXCEEDED, msg)
    budget = stopped_at_budget(pod)
    if budget is not None:
        msg = f"the budget ran out: the agent was stopped after its {budget} s (the kubelet's deadline probe)"
        return Change(COND_AGENT_FINISHED, TRUE, REASON_DEADLINE_EXCEEDED, msg)
    setup = setup_failure(pod)
    if setup is not None:
        return Change(COND_AGENT_FINISHED, TRUE, R_SETUP_FAILED, setup)
    detail = failed.get("message") or failed.get("reason") or "the agent failed"
    return Change(COND_AGENT_FINISHED, TRUE, REASON_AGENT_FAILED, f"the agent failed: {detail}")


def terminal_for(finish: Change) -> Change:
    """Until grading lands, the run ends when the agent does. Running out of budget is how a
    budgeted run normally ends (its result is the best submission), so it is a success."""
    if finish.reason == REASON_COMPLETED:
        return Change(COND_SUCCEEDED, TRUE, R_AGENT_COMPLETED, finish.message)
    if finish.reason == REASON_DEADLINE_EXCEEDED:
        return Change(COND_SUCCEEDED, TRUE, R_BUDGET_EXHAUSTED, finish.message)
    if finish.reason == REASON_DRIVER_BUDGET_EXHAUSTED:  # the driver budget is a budget too
        return Change(COND_SUCCEEDED, TRUE, REASON_DRIVER_BUDGET_EXHAUSTED, finish.message)
    if finish.reason == R_SETUP_FAILED:
        return Change(COND_FAILED, TRUE, R_SETUP_FAILED, finish.message)
    if finish.reason == queueing.R_PREEMPTED:  # evicted by Kueue after its budget clock started
        return Change(COND_FAILED, TRUE, queueing.R_PREEMPTED, finish.message)
    return Change(COND_FAILED, TRUE, R_AGENT_FAILED, finish.message)


@dataclass(frozen=True)
class Observation:
    """What the operator saw of the run's children at one moment."""

    job: dict[str, Any] | None
    pod: dict[str, Any] | None  # the newest pod of the workspace Job
    queue_name: str | None
    #: Message of the latest "exceeded quota" FailedCreate of the Job (None: none seen).
    quota_message: str | None = None
    #: A stack run whose gateway refused a call for the driver budget (the agent saw the error):
    #: the gateway's reason (`driver/summary.json` `budget.reason`); None: not refused.
    driver_refused: str | None = None
    #: Kueue's Workload of the workspace Job (a queued run; `queueing.find_workload`), None: none.
    workload: dict[str, Any] | None = None
    #: The run's `status.startTime` (the agent's start as already recorded), None: not yet.
    started_at: str | None = None
    #: When this was observed (the eviction's time where the Job does not say it yet).
    observed_at: str | None = None
    #: The run's budget clock had started (`budget_started`) by what was read BEFORE the Job (the
    #: run, then its pod, then the Job: `benchrun.refresh`), so a suspended Job was suspended
    #: after that: Kueue evicted it. Never from conditions read later (a stale Job would look
    #: evicted).
    budget_started: bool = False


def budget_started(
    conds: Sequence[Cond],
    pod: dict[str, Any] | None,
    started_at: str | None = None,
    agent_container: str = "agent",
    recorder_container: str = "recorder",
) -> bool:
    """Whether the run's budget clock has started: the agent was seen running (`AgentRunning` set,
    `startTime`) or the pod shows it or the recorder sidecar started (the recorder starts the
    clock, `clock.json`, just before the agent)."""
    if started_at or get_condition(conds, COND_AGENT_RUNNING) is not None:
        return True
    if agent_start_time(pod, agent_container) is not None:
        return True
    for status in ((pod or {}).get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == recorder_container:
            state = status.get("state") or {}
            return any((state.get(k) or {}).get("startedAt") for k in ("running", "terminated"))
    return False


def suspended_at(job: dict[str, Any]) -> str | None:
    """When the Job was last suspended (its `Suspended=True` condition), None: not suspended."""
    cond = _job_condition(job, "Suspended")
    return str(cond["lastTransitionTime"]) if cond and cond.get("lastTransitionTime") else None


def preemption(obs: Observation, conds: Sequence[Cond], agent_container: str = "agent") -> list[Change]:
    """A queued run's workspace Job suspended by Kueue after the budget clock started: the run
    ends `Preempted` (docs/operator.md, "Quotas and Kueue"), the agent's time up to the eviction
    in the message; empty when that is not the case."""
    job = obs.job or {}
    if not obs.queue_name or not (job.get("spec") or {}).get("suspend"):
        return []
    if not obs.budget_started:
        return []  # evicted during its set-up: it waits for Kueue again (`queueing.queue_changes`)
    started = obs.started_at or agent_start_time(obs.pod, agent_container)
    evicted = suspended_at(job) or obs.observed_at
    ran = max(0, round(_seconds(started, evicted))) if started and evicted else None
    agent = bool(started) or get_condition(conds, COND_AGENT_RUNNING) is not None
    return [Change(*c) for c in queueing.preempted(obs.queue_name, obs.workload, conds, ran, agent)]


def driver_budget_finish(finish: Change, refused: str | None) -> Change:
    """The agent's end, told as the driver budget's when its gateway had refused it a call: the
    stacks stop at that error (docs/gateway.md), so the refusal is why the agent ended."""
    if refused is None or finish.reason not in (REASON_COMPLETED, REASON_AGENT_FAILED):
        return finish
    return Change(COND_AGENT_FINISHED, TRUE, REASON_DRIVER_BUDGET_EXHAUSTED, f"the agent stopped: {refused}")


def observe(obs: Observation, conds: Sequence[Cond], agent_container: str = "agent") -> list[Change]:
    """The condition changes the observation implies (empty when it implies none)."""
    if obs.job is None or is_terminal(conds):
        return []
    job = obs.job
    changes: list[Change] = []
    suspended = bool((job.get("spec") or {}).get("suspend"))
    if suspended and get_condition(conds, COND_AGENT_FINISHED) is not None:
        return []  # ended while suspended (Preempted): nothing more to observe of this Job
    ended = preemption(obs, conds, agent_container)
    if ended:  # a run being graded ends after its report (`a2rl_operator.benchrun`)
        return ended if get_condition(conds, COND_GRADED) is not None else [*ended, terminal_for(ended[-1])]
    if obs.queue_name:  # Kueue's reason while waiting; evicted (`Preempted`): not running
        queued = queueing.queue_changes(obs.queue_name, suspended, obs.workload, conds)
        changes += [Change(*c) for c in queued]
    elif get_condition(conds, COND_ADMITTED) is None:
        msg = "no Kueue queue named; the Job runs directly"
        changes.append(Change(COND_ADMITTED, TRUE, R_NOT_QUEUED, msg))

    pod = obs.pod
    if pod is None and obs.quota_message and not suspended:
        changes += [
            Change(COND_QUOTA_EXCEEDED, TRUE, R_EXCEEDED_QUOTA, obs.quota_message),
            Change(COND_QUEUED, TRUE, R_EXCEEDED_QUOTA, "waiting for GPU quota: " + obs.quota_message),
        ]
    elif pod is not None and is_true(conds, COND_QUOTA_EXCEEDED):
        msg = "quota freed; the workspace pod was created"
        changes += [
            Change(COND_QUOTA_EXCEEDED, FALSE, R_QUOTA_AVAILABLE, msg),
            Change(COND_QUEUED, FALSE, R_QUOTA_AVAILABLE, msg),
        ]

    if pod is not None and not suspended:  # a suspended Job's pods are going (Kueue evicted it)
        if _pod_scheduled(pod):
            node = (pod.get("spec") or {}).get("nodeName") or "a node"
            changes.append(Change(COND_WORKSPACE_READY, TRUE, R_POD_SCHEDULED, f"workspace pod on {node}"))
        elif get_condition(conds, COND_WORKSPACE_READY) is None:
            msg = "workspace pod not scheduled yet"
            changes.append(Change(COND_WORKSPACE_READY, FALSE, R_POD_PENDING, msg))
        agent = _container_status(pod, agent_container)
        state = (agent or {}).get("state") or {}
        if "running" in state:
            changes.append(Change(COND_AGENT_RUNNING, TRUE, R_RUNNING, "the agent is running"))

    finish = agent_finish(job, pod)
    if finish is not None:
        finish = driver_budget_finish(finish, obs.driver_refused)
        changes += [Change(COND_AGENT_RUNNING, FALSE, finish.reason, finish.message), finish]
        # A run being graded (`Graded` set, a2rl_operator.benchrun) ends after its report instead.
        if get_condition(conds, COND_GRADED) is None:
            changes.append(terminal_for(finish))
    return changes


def agent_start_time(pod: dict[str, Any] | None, agent_container: str = "agent") -> str | None:
    """When the agent container started (the run's clock), from the pod status."""
    if pod is None:
        return None
    status = _container_status(pod, agent_container) or {}
    state = status.get("state") or {}
    for key in ("running", "terminated"):
        started = (state.get(key) or {}).get("startedAt")
        if started:
            return str(started)
    return None


def is_quota_message(message: str) -> bool:
    """The Job controller's FailedCreate when a ResourceQuota refused the pod."""
    return "exceeded quota" in message


WARNING_REASONS = frozenset(
    {
        R_EXCEEDED_QUOTA,
        REASON_DEADLINE_EXCEEDED,
        R_AGENT_FAILED,
        REASON_AGENT_FAILED,
        R_SETUP_FAILED,
        queueing.R_PREEMPTED,
    }
)


def event_type(change: Change) -> str:
    """Warning for a refusal or a bad outcome, Normal otherwise."""
    if change.type in (COND_ACCEPTED, COND_FAILED) and change.status == (
        FALSE if change.type == COND_ACCEPTED else TRUE
    ):
        return "Warning"
    return "Warning" if change.status == TRUE and change.reason in WARNING_REASONS else "Normal"


def worth_an_event(change: Change) -> bool:
    """Events are for what a user acts on or waits for: a Warning (a refusal, a bad outcome) and
    the run's end (`Succeeded`/`Failed` turning True). Progress is in the conditions only: at
    hundreds of runs an Event per step was a third of the operator's API calls."""
    ended = change.type in (COND_SUCCEEDED, COND_FAILED) and change.status == TRUE
    return ended or event_type(change) == "Warning"
