"""Kueue as the operator reads it: the Workload Kueue keeps for each queued Job. Pure functions,
except `find_workload` (one list call).

A run with `spec.queueName` has its Jobs created suspended with Kueue's queue label; Kueue's Job
integration makes a Workload for each (owned by the Job, labelled with the Job's uid), reserves
quota in the LocalQueue's ClusterQueue and admits the Job by unsuspending it. While it waits, the
Workload's `QuotaReserved=False` condition says why in Kueue's own words (`insufficient unused
quota for nvidia.com/gpu in flavor …`, `resource … unavailable in ClusterQueue`, `LocalQueue …
doesn't exist`): the run's `Queued` condition carries that message. When Kueue evicts an admitted
Job (preemption by a higher-priority workload, a deactivation), it suspends it again and the
Job's pod goes. A run whose budget clock had started (its recorder or agent had started) ends
there: `AgentFinished` `Preempted`, its agent's time up to the eviction accounted, its Workload
deactivated so that Kueue never starts it again (`preempted`, `stays_stopped`). A run evicted
during its set-up (no clock yet) is `Queued` with reason `Preempted` (never `Running` while
evicted) until Kueue admits it again (docs/operator.md, "Quotas and Kueue").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from a2rl.api.benchrun import BenchRunStatus
from a2rl.constants import (
    COND_ADMITTED,
    COND_AGENT_FINISHED,
    COND_AGENT_RUNNING,
    COND_FAILED,
    COND_GRADED,
    COND_QUEUED,
    COND_WORKSPACE_READY,
)

#: Kueue's Workload API (kueue v0.17 serves and stores v1beta2).
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta2"
WORKLOAD_PLURAL = "workloads"
#: Kueue labels the Workload of a Job with the Job's uid.
LABEL_JOB_UID = "kueue.x-k8s.io/job-uid"

TRUE, FALSE = "True", "False"
R_WAITING_FOR_ADMISSION = "WaitingForAdmission"
R_ADMITTED = "Admitted"
#: Kueue evicted the admitted workspace Job (preemption, deactivation …) and requeued it.
R_PREEMPTED = "Preempted"
#: Kueue did not admit the run within the operator's queueing limit (`--queue-timeout`).
R_NOT_SCHEDULED = "NotScheduled"

Obj = dict[str, Any]


def _condition(workload: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def pending_message(workload: Mapping[str, Any] | None) -> str | None:
    """Why Kueue has not admitted the workload, in Kueue's words (`QuotaReserved=False`), or None
    (no Workload yet, or quota reserved)."""
    cond = _condition(workload, "QuotaReserved")
    if cond is None or cond.get("status") != FALSE:
        return None
    return str(cond.get("message") or cond.get("reason") or "") or None


def eviction(workload: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(reason, message) of Kueue's latest eviction of the workload (`Evicted=True`: `Preempted`,
    `Deactivated`, `PodsReadyTimeout` …), None when it is not evicted."""
    cond = _condition(workload, "Evicted")
    if cond is None or cond.get("status") != TRUE:
        return None
    return str(cond.get("reason") or R_PREEMPTED), str(cond.get("message") or "evicted by Kueue")


def eviction_count(workload: Mapping[str, Any] | None) -> int:
    """How many times Kueue evicted the workload (`status.schedulingStats.evictions`)."""
    stats = ((workload or {}).get("status") or {}).get("schedulingStats") or {}
    return sum(int(e.get("count") or 0) for e in stats.get("evictions") or [])


def _seconds_between(start: str, end: str) -> int:
    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return max(0, round((parse(end) - parse(start)).total_seconds()))


def queue_wait_seconds(workload: Mapping[str, Any] | None) -> int | None:
    """Seconds the workload waited for admission, all its waits together, as of its current
    admission (None while it waits): from its creation to Kueue's latest quota reservation, less
    the time it ran before earlier evictions (`accumulatedPastExecutionTimeSeconds`)."""
    reserved = _condition(workload, "QuotaReserved")
    created = ((workload or {}).get("metadata") or {}).get("creationTimestamp")
    if (
        reserved is None
        or reserved.get("status") != TRUE
        or not created
        or not reserved.get("lastTransitionTime")
    ):
        return None
    status = (workload or {}).get("status") or {}
    ran = int(status.get("accumulatedPastExecutionTimeSeconds") or 0)
    return max(0, _seconds_between(str(created), str(reserved["lastTransitionTime"])) - ran)


def with_queue_stats(status: BenchRunStatus, workload: Mapping[str, Any] | None) -> BenchRunStatus:
    """`status` with the workspace Job's queue wait and evictions (unchanged without a Workload;
    a wait is only written once admitted, so it stays while the Job waits again)."""
    if workload is None:
        return status
    update: dict[str, Any] = {"evictions": eviction_count(workload)}
    wait = queue_wait_seconds(workload)
    if wait is not None:
        update["queue_wait_seconds"] = wait
    return status.model_copy(update=update)


def _is_true(conds: Sequence[Mapping[str, Any]], type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == TRUE for c in conds)


def queue_changes(
    queue_name: str,
    suspended: bool,
    workload: Mapping[str, Any] | None,
    conds: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, str, str]]:
    """The (type, status, reason, message) condition changes of a queued run's workspace Job.

    Suspended: waiting for Kueue (`Queued=True`, `Admitted=False`), with Kueue's reason where its
    Workload gives one; a Job suspended again after it ran (its pod was scheduled) was evicted:
    `Preempted`, and `WorkspaceReady`/`AgentRunning` go False, since its pod is gone. Unsuspended:
    admitted."""
    if not suspended:
        msg = f"admitted by Kueue (queue {queue_name})"
        return [(COND_QUEUED, FALSE, R_ADMITTED, msg), (COND_ADMITTED, TRUE, R_ADMITTED, msg)]
    evicted = eviction(workload)
    was_running = _is_true(conds, COND_WORKSPACE_READY) or _is_true(conds, COND_AGENT_RUNNING)
    # Still the same eviction (Kueue's `Evicted` may be cleared while the Job waits again).
    was_running = was_running or any(
        c.get("type") == COND_QUEUED and c.get("reason") == R_PREEMPTED for c in conds
    )
    waiting = pending_message(workload)
    if evicted is not None or was_running:
        why = evicted[1] if evicted is not None else "Kueue suspended the admitted Job"
        msg = f"evicted by Kueue and requeued (queue {queue_name}): {why}"
        if waiting:
            msg += f"; waiting: {waiting}"
        changes = [(COND_QUEUED, TRUE, R_PREEMPTED, msg), (COND_ADMITTED, FALSE, R_PREEMPTED, msg)]
        for type_ in (COND_WORKSPACE_READY, COND_AGENT_RUNNING):
            if any(c.get("type") == type_ for c in conds):
                changes.append((type_, FALSE, R_PREEMPTED, "the workspace pod was evicted by Kueue"))
        return changes
    msg = f"waiting for Kueue to admit the workspace Job (queue {queue_name})"
    if waiting:
        msg += f": {waiting}"
    return [
        (COND_QUEUED, TRUE, R_WAITING_FOR_ADMISSION, msg),
        (COND_ADMITTED, FALSE, R_WAITING_FOR_ADMISSION, msg),
    ]


def waiting_for_admission(conds: Sequence[Mapping[str, Any]]) -> bool:
    """Queued and never admitted yet (`Queued=True`, `WaitingForAdmission`; an evicted run waits
    as `Preempted`)."""
    return any(
        c.get("type") == COND_QUEUED
        and c.get("status") == TRUE
        and c.get("reason") == R_WAITING_FOR_ADMISSION
        for c in conds
    )


def not_scheduled(
    conds: Sequence[Mapping[str, Any]], now: datetime, limit_s: int | None
) -> list[tuple[str, str, str, str]]:
    """The changes that end a run Kueue has not admitted within the queueing limit (`limit_s`
    seconds since it was first queued): `Failed=True`, `Queued`/`Admitted=False`, with reason
    `NotScheduled` and Kueue's last reason in the message; `Graded` closed where grading had
    opened it (nothing ran, nothing to grade). Empty while within the limit, or without one."""
    if limit_s is None or not waiting_for_admission(conds):
        return []
    queued = next(c for c in conds if c.get("type") == COND_QUEUED)
    since = str(queued.get("lastTransitionTime") or "")
    if not since or _seconds_between(since, now.strftime("%Y-%m-%dT%H:%M:%SZ")) < limit_s:
        return []
    waited = str(queued.get("message") or "").removeprefix("waiting for Kueue to admit the workspace Job ")
    msg = f"not admitted by Kueue within the queueing limit ({limit_s} s): {waited}"
    changes = [
        (COND_QUEUED, FALSE, R_NOT_SCHEDULED, msg),
        (COND_ADMITTED, FALSE, R_NOT_SCHEDULED, msg),
    ]
    if any(c.get("type") == COND_GRADED for c in conds):
        changes.append((COND_GRADED, FALSE, R_NOT_SCHEDULED, "nothing to grade: the agent never ran"))
    return [*changes, (COND_FAILED, TRUE, R_NOT_SCHEDULED, msg)]


def preempted(
    queue_name: str,
    workload: Mapping[str, Any] | None,
    conds: Sequence[Mapping[str, Any]],
    ran_s: int | None,
    agent_started: bool = True,
) -> list[tuple[str, str, str, str]]:
    """The changes that end a run Kueue evicted after its budget clock had started: `Queued` and
    `Admitted` False, `WorkspaceReady`/`AgentRunning` False, `AgentFinished=True`, all with reason
    `Preempted` and Kueue's eviction message; `ran_s`: how long the agent ran until the eviction
    (None: unknown), `agent_started`: False when only the recorder had started (and with it the
    clock). The terminal condition is the caller's (it waits for grading)."""
    evicted = eviction(workload)
    why = f"{evicted[0]}: {evicted[1]}" if evicted is not None else "Kueue suspended the admitted Job"
    ran = "after the agent started" if ran_s is None else f"after the agent ran {ran_s} s"
    if not agent_started:
        ran = "before the agent started (the recorder had started its clock)"
    msg = (
        f"evicted by Kueue {ran} (queue {queue_name}): {why}; the run ends here, since its budget "
        "clock had started (a restarted agent would not get the evicted time back)"
    )
    changes = [(COND_QUEUED, FALSE, R_PREEMPTED, msg), (COND_ADMITTED, FALSE, R_PREEMPTED, msg)]
    for type_ in (COND_WORKSPACE_READY, COND_AGENT_RUNNING):
        if any(c.get("type") == type_ for c in conds):
            changes.append((type_, FALSE, R_PREEMPTED, "the workspace pod was evicted by Kueue"))
    return [*changes, (COND_AGENT_FINISHED, TRUE, R_PREEMPTED, msg)]


def is_active(workload: Mapping[str, Any]) -> bool:
    """Kueue may (re)admit the Workload: `spec.active` is not false."""
    return (workload.get("spec") or {}).get("active") is not False


def deactivate(custom: Any, workload: Mapping[str, Any]) -> None:
    """Deactivate the Workload (`spec.active: false`): Kueue never admits its Job (a run that
    ended `NotScheduled` or `Preempted` must not start later; Kueue evicts an admitted one)."""
    meta = workload["metadata"]
    custom.patch_namespaced_custom_object(
        WORKLOAD_GROUP,
        WORKLOAD_VERSION,
        meta["namespace"],
        WORKLOAD_PLURAL,
        meta["name"],
        {"spec": {"active": False}},
    )


def job_of(workload: Mapping[str, Any]) -> str | None:
    """The name of the Job that owns the Workload (None: not a Job's)."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return str(ref.get("name"))
    return None


def workload_fingerprint(workload: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the run's conditions read of a Workload: its conditions with their messages."""
    conds = (workload.get("status") or {}).get("conditions") or []
    return tuple(
        sorted(
            (str(c.get("type")), str(c.get("status")), str(c.get("reason")), str(c.get("message")))
            for c in conds
        )
    )


def find_workload(custom: Any, namespace: str, job_uid: str) -> Obj | None:
    """The Workload of the Job `job_uid` (`custom`: a `CustomObjectsApi`); None when there is none
    or Kueue is not installed (its API is missing: 404)."""
    from kubernetes.client.exceptions import ApiException

    try:
        found = custom.list_namespaced_custom_object(
            WORKLOAD_GROUP,
            WORKLOAD_VERSION,
            namespace,
            WORKLOAD_PLURAL,
            label_selector=f"{LABEL_JOB_UID}={job_uid}",
        )
    except ApiException as exc:
        if exc.status in (403, 404):  # not installed, or not granted: queued without Kueue's reason
            return None
        raise
    items: list[Obj] = found.get("items") or []
    if not items:
        return None
    newest: Obj = max(items, key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
    return newest
