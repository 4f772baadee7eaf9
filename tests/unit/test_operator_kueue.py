"""Kueue, pure parts: every Job of a queued run (workspace, eval, report) carries the queue and
priority labels and is created suspended; the run's conditions carry Kueue's reason for waiting
and never say Running while Kueue has evicted the workspace Job."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from a2rl_operator import queueing
from a2rl_operator import status as st
from a2rl_operator.benchrun import grading_open
from a2rl_operator.config import OperatorConfig, queue_timeout_from_env
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests import parse_spec
from a2rl_operator.manifests.eval_job import EvalTarget, eval_job
from a2rl_operator.manifests.job import workspace_job
from a2rl_operator.manifests.report_job import report_job
from a2rl_operator.rbac import RULES
from a2rl_operator.registry import build_registry
from pydantic import ValidationError

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import ENV_QUEUE_TIMEOUT, LABEL_KUEUE_PRIORITY, LABEL_KUEUE_QUEUE
from a2rl.errors import A2rlError

UID = "0b7c1f7e-1111-2222-3333-444455556666"
GRADING = GradingConfig(grader_image="ghcr.io/a2rl/grader:0.1.0")
T0, T1 = "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z"
PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
    "flavor kwok-gpu, 1 more needed"
)


def benchrun(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["python", "-m", "agent"]},
        "budget": {"wallTimeSeconds": 3600},
        "resources": {"gpus": 1},
        "evaluation": {"gpus": 1},
    }
    base.update(spec)
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "demo", "namespace": "team-a", "uid": UID, "generation": 1,
                     "labels": {LABEL_KUEUE_QUEUE: "smuggled", LABEL_KUEUE_PRIORITY: "vip"}},
        "spec": base,
    }  # fmt: skip


def submission() -> dict[str, Any]:
    return {"metadata": {"name": "demo-00001", "namespace": "team-a", "uid": "sub-uid"}}


def jobs(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = parse_spec(run)
    target = EvalTarget(index=1, store_uri="s3://runs/a2rl", heldout_key="data/arith/1-seed0/heldout")
    return {
        "workspace": workspace_job(run, spec, OperatorConfig()),
        "eval": eval_job(run, submission(), spec, target, GRADING),
        "report": report_job(run, spec, "s3://runs/a2rl", GRADING),
    }


def kueue_labels(job: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in job["metadata"]["labels"].items() if k.startswith("kueue.x-k8s.io/")}


# --- every Job queued ---------------------------------------------------------------------------


def test_every_job_of_a_queued_run_is_suspended_with_the_queue_and_priority_labels() -> None:
    for kind, job in jobs(benchrun(queueName="gpus", priorityClassName="high")).items():
        assert kueue_labels(job) == {LABEL_KUEUE_QUEUE: "gpus", LABEL_KUEUE_PRIORITY: "high"}, kind
        assert job["spec"]["suspend"] is True, kind
        # Kueue reads the Job's labels; the pod template carries none of Kueue's.
        assert not any(k.startswith("kueue.x-k8s.io/") for k in job["spec"]["template"]["metadata"]["labels"])


def test_eval_jobs_may_queue_apart_and_priority_needs_a_queue() -> None:
    apart = jobs(benchrun(queueName="agents", evaluation={"gpus": 1, "queueName": "eval-gpus"}))
    assert kueue_labels(apart["workspace"]) == {LABEL_KUEUE_QUEUE: "agents"}
    assert kueue_labels(apart["eval"]) == {LABEL_KUEUE_QUEUE: "eval-gpus"}
    assert kueue_labels(apart["report"]) == {LABEL_KUEUE_QUEUE: "agents"}
    only_evals = jobs(benchrun(evaluation={"gpus": 1, "queueName": "eval-gpus"}))
    assert only_evals["eval"]["spec"]["suspend"] is True
    assert (
        only_evals["workspace"]["spec"]["suspend"] is False
        and only_evals["report"]["spec"]["suspend"] is False
    )
    # Without a queue nothing is suspended and no Kueue label is set (the run's own are never copied).
    for kind, job in jobs(benchrun(priorityClassName="high")).items():
        assert kueue_labels(job) == {} and job["spec"]["suspend"] is False, kind


def test_priority_class_name_is_a_label_value() -> None:
    spec = benchrun()["spec"]
    assert (
        BenchRunSpec.model_validate({**spec, "priorityClassName": "batch-low"}).priority_class_name
        == "batch-low"
    )
    for bad in ("Batch", "a" * 64, "x.y"):
        with pytest.raises(ValidationError):
            BenchRunSpec.model_validate({**spec, "priorityClassName": bad})


def test_the_operator_may_read_and_deactivate_kueue_workloads_and_nothing_more() -> None:
    rules = [r for r in RULES if "kueue.x-k8s.io" in r["apiGroups"]]
    assert rules == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["workloads"],
            "verbs": ["get", "list", "watch", "patch"],
        }
    ]


# --- the run's conditions -----------------------------------------------------------------------


def job(suspend: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": "demo-workspace", "uid": "job-uid"},
        "spec": {"suspend": suspend},
        "status": {},
    }


def pod() -> dict[str, Any]:
    return {
        "metadata": {"creationTimestamp": T0},
        "spec": {"nodeName": "kwok-gpu-0"},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "agent", "state": {"running": {"startedAt": T0}}}],
        },
    }


def workload(*conditions: tuple[str, str, str, str], evictions: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    }
    if evictions:
        status["schedulingStats"] = {
            "evictions": [{"reason": "Preempted", "underlyingCause": "", "count": evictions}]
        }
    return {
        "metadata": {"name": "job-demo-workspace-1a2b3", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "demo-workspace", "uid": "job-uid"}]},
        "status": status,
    }  # fmt: skip


def apply(conds: list[dict[str, Any]], obs: st.Observation, now: str = T0) -> list[dict[str, Any]]:
    return st.apply_changes(conds, st.observe(obs, conds), 1, now)[0]


def cond(conds: list[dict[str, Any]], type_: str) -> tuple[str, str, str]:
    c = st.get_condition(conds, type_) or {}
    return c.get("status", ""), c.get("reason", ""), c.get("message", "")


def test_queued_carries_kueues_reason_for_waiting() -> None:
    waiting = workload(("QuotaReserved", "False", "Pending", PENDING))
    conds = apply([], st.Observation(job(True), None, "gpus", workload=waiting))
    status, reason, message = cond(conds, "Queued")
    assert (status, reason) == ("True", st.R_WAITING_FOR_ADMISSION)
    assert message == f"waiting for Kueue to admit the workspace Job (queue gpus): {PENDING}"
    assert cond(conds, "Admitted")[:2] == ("False", st.R_WAITING_FOR_ADMISSION)
    assert st.derive_phase(conds) == "Queued"
    # No Workload yet (Kueue not installed, or not there yet): queued without a reason.
    bare = apply([], st.Observation(job(True), None, "gpus"))
    assert cond(bare, "Queued")[2] == "waiting for Kueue to admit the workspace Job (queue gpus)"


def suspended(at: str = T1) -> dict[str, Any]:
    """The workspace Job as Kueue leaves it after an eviction: suspended again (at `at`)."""
    evicted = job(True)
    evicted["status"] = {"conditions": [{"type": "Suspended", "status": "True", "lastTransitionTime": at}]}
    return evicted


def setup_pod() -> dict[str, Any]:
    """The workspace pod scheduled, its set-up init container still running (no recorder yet)."""
    return {
        "metadata": {"creationTimestamp": T0},
        "spec": {"nodeName": "kwok-gpu-0"},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "initContainerStatuses": [
                {"name": "setup", "state": {"running": {"startedAt": T0}}},
                {"name": "recorder", "state": {"waiting": {"reason": "PodInitializing"}}},
            ],
            "containerStatuses": [{"name": "agent", "state": {"waiting": {"reason": "PodInitializing"}}}],
        },
    }


WHY = "Preempted to accommodate a workload (UID: 42) due to prioritization in the ClusterQueue"
EVICTED = workload(
    ("QuotaReserved", "False", "Pending", PENDING), ("Evicted", "True", "Preempted", WHY), evictions=1
)


def test_a_run_evicted_after_its_agent_started_ends_preempted_with_the_time_its_agent_ran() -> None:
    conds = apply([], st.Observation(job(False), pod(), "gpus"))
    assert st.derive_phase(conds) == "Running" and cond(conds, "Admitted")[:2] == ("True", st.R_ADMITTED)
    # Kueue preempts 5 minutes after the agent's start: the Job is suspended again, the run ends.
    obs = st.Observation(suspended(T1), pod(), "gpus", workload=EVICTED, started_at=T0, budget_started=True)
    changes = st.observe(obs, conds)
    ended = st.apply_changes(conds, changes, 1, T1)[0]
    status, reason, message = cond(ended, "AgentFinished")
    assert (status, reason) == ("True", queueing.R_PREEMPTED)
    assert message.startswith("evicted by Kueue after the agent ran 300 s (queue gpus): Preempted: " + WHY)
    assert cond(ended, "Failed")[:2] == ("True", queueing.R_PREEMPTED) and st.is_terminal(ended)
    assert st.derive_phase(ended) == "Failed"
    for type_ in ("Queued", "Admitted", "AgentRunning", "WorkspaceReady"):
        assert cond(ended, type_)[:2] == ("False", queueing.R_PREEMPTED), type_
    assert any(st.event_type(c) == "Warning" for c in changes if c.type == "AgentFinished")
    # Nothing more is read from the stopped Job (Kueue's later `Deactivated` changes nothing).
    assert st.observe(st.Observation(suspended(T1), None, "gpus"), ended) == []


def test_with_grading_a_preempted_run_is_graded_first_and_never_running_while_evicted() -> None:
    graded = [st.Change("Graded", "False", "AwaitingAgent", "")]
    conds = st.apply_changes(apply([], st.Observation(job(False), pod(), "gpus")), graded, 1, T0)[0]
    # The pod already gone when the eviction is observed: the clock is the run's startTime.
    obs = st.Observation(suspended(T1), None, "gpus", workload=EVICTED, started_at=T0, budget_started=True)
    ended = apply(conds, obs, T1)
    assert cond(ended, "AgentFinished")[:2] == ("True", queueing.R_PREEMPTED)
    assert cond(ended, "Failed") == ("", "", "") and st.derive_phase(ended) == "Grading"
    # The terminal condition after the report (grading.decisions.step_changes → terminal_for).
    assert st.terminal_for(st.Change("AgentFinished", "True", queueing.R_PREEMPTED, "m")) == st.Change(
        "Failed", "True", queueing.R_PREEMPTED, "m"
    )
    # The Job does not say when it was suspended yet: the time it was observed so.
    seen = st.Observation(job(True), None, "gpus", started_at=T0, observed_at=T1, budget_started=True)
    assert st.observe(seen, conds)[-1].message.startswith("evicted by Kueue after the agent ran 300 s")
    unknown = st.Observation(job(True), None, "gpus", budget_started=True)
    assert st.observe(unknown, conds)[-1].message.startswith("evicted by Kueue after the agent started ")


def test_a_run_evicted_during_its_setup_waits_for_readmission_and_runs_again() -> None:
    conds = apply([], st.Observation(job(False), setup_pod(), "gpus"))
    assert cond(conds, "WorkspaceReady")[:2] == ("True", st.R_POD_SCHEDULED) and not st.budget_started(
        conds, setup_pod()
    )
    conds = apply(conds, st.Observation(suspended(T1), setup_pod(), "gpus", workload=EVICTED), T1)
    status, reason, message = cond(conds, "Queued")
    assert (status, reason) == ("True", queueing.R_PREEMPTED) and WHY in message and PENDING in message
    assert cond(conds, "Admitted")[:2] == ("False", queueing.R_PREEMPTED)
    assert cond(conds, "WorkspaceReady")[:2] == ("False", queueing.R_PREEMPTED)
    assert cond(conds, "AgentFinished") == ("", "", "")
    assert st.derive_phase(conds) == "Queued" and not st.is_terminal(conds)
    # Still waiting, Kueue's Evicted cleared: still the same eviction.
    waiting = workload(("QuotaReserved", "False", "Pending", PENDING))
    later = apply(conds, st.Observation(job(True), None, "gpus", workload=waiting))
    assert cond(later, "Queued")[:2] == ("True", queueing.R_PREEMPTED)
    # Readmitted: a new pod, running (its budget starts now).
    again = apply(later, st.Observation(job(False), pod(), "gpus"))
    assert cond(again, "Queued")[:2] == ("False", st.R_ADMITTED)
    assert cond(again, "AgentRunning")[:2] == ("True", st.R_RUNNING) and st.derive_phase(again) == "Running"
    assert queueing.eviction_count(EVICTED) == 1 and queueing.eviction_count(None) == 0


def test_a_job_read_before_its_admission_is_not_an_eviction() -> None:
    """The Job read suspended, then (later) its pod already running: Kueue admitted it in between.
    Only what was read before the Job says the clock started (`benchrun.refresh`)."""
    stale = st.observe(st.Observation(job(True), pod(), "gpus", budget_started=False), [])
    assert not any(c.type == "AgentFinished" for c in stale)
    assert ("Queued", "True", st.R_WAITING_FOR_ADMISSION) in {(c.type, c.status, c.reason) for c in stale}


def test_the_budget_clock_starts_with_the_recorder() -> None:
    recorder_up = setup_pod()
    recorder_up["status"]["initContainerStatuses"][1]["state"] = {"running": {"startedAt": T1}}
    assert st.budget_started([], recorder_up) and st.budget_started([], pod())
    assert st.budget_started([], None, started_at=T0) and not st.budget_started([], None)
    # Evicted between the recorder's start and the agent's: ends Preempted, no agent time.
    clock = st.budget_started([], recorder_up)
    ended = st.observe(
        st.Observation(suspended(), recorder_up, "gpus", workload=EVICTED, budget_started=clock), []
    )
    assert ended[-1] == st.Change("Failed", "True", queueing.R_PREEMPTED, ended[-2].message)
    assert "before the agent started" in ended[-2].message
    assert queueing.is_active(EVICTED) and not queueing.is_active({"spec": {"active": False}})


def test_workload_helpers() -> None:
    w = workload(("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue a2rl"))
    assert queueing.pending_message(w) is None and queueing.eviction(w) is None
    assert queueing.job_of(w) == "demo-workspace"
    assert (
        queueing.job_of({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]}})
        is None
    )
    changed = workload(("QuotaReserved", "False", "Pending", "other reason"))
    assert queueing.workload_fingerprint(w) != queueing.workload_fingerprint(changed)


def test_queue_wait_and_evictions_from_the_workload() -> None:
    admitted = workload(("QuotaReserved", "True", "QuotaReserved", "reserved"), evictions=2)
    admitted["metadata"]["creationTimestamp"] = T0
    admitted["status"]["conditions"][0]["lastTransitionTime"] = "2025-01-01T00:10:00Z"
    admitted["status"]["accumulatedPastExecutionTimeSeconds"] = 240  # ran 4 min before evictions
    assert queueing.queue_wait_seconds(admitted) == 600 - 240
    status = queueing.with_queue_stats(st.run_status({}), admitted)
    assert (status.queue_wait_seconds, status.evictions) == (360, 2)
    assert {"queueWaitSeconds": 360, "evictions": 2}.items() <= st.status_wire(status).items()
    # Waiting (again): the last wait written stays; no Workload: nothing changes.
    waiting = workload(("QuotaReserved", "False", "Pending", PENDING), evictions=3)
    again = queueing.with_queue_stats(status, waiting)
    assert (again.queue_wait_seconds, again.evictions) == (360, 3)
    assert queueing.with_queue_stats(status, None) is status


# --- the queueing limit -------------------------------------------------------------------------


def test_a_run_not_admitted_within_the_queueing_limit_fails_not_scheduled() -> None:
    waiting = workload(("QuotaReserved", "False", "Pending", PENDING))
    conds = apply([], st.Observation(job(True), None, "gpus", workload=waiting))  # queued at T0
    conds = st.apply_changes(conds, [st.Change("Graded", "False", "AwaitingAgent", "")], 1, T0)[0]
    at = datetime(2025, 1, 1, 0, 4, 59, tzinfo=UTC)
    assert queueing.not_scheduled(conds, at, 300) == [] and queueing.not_scheduled(conds, at, None) == []
    changes = queueing.not_scheduled(conds, datetime(2025, 1, 1, 0, 5, tzinfo=UTC), 300)
    ended = st.apply_changes(conds, [st.Change(*c) for c in changes], 1, T1)[0]
    status, reason, message = cond(ended, "Failed")
    assert (status, reason) == ("True", queueing.R_NOT_SCHEDULED) and st.is_terminal(ended)
    assert message == f"not admitted by Kueue within the queueing limit (300 s): (queue gpus): {PENDING}"
    assert cond(ended, "Queued")[:2] == ("False", queueing.R_NOT_SCHEDULED)
    assert cond(ended, "Admitted")[:2] == ("False", queueing.R_NOT_SCHEDULED)
    assert st.derive_phase(ended) == "Failed" and not grading_open(ended)  # nothing to grade
    assert queueing.not_scheduled(ended, datetime(2025, 1, 2, tzinfo=UTC), 300) == []  # once
    # A run that ran and was evicted is never NotScheduled: it waits as Preempted.
    evicted = apply(
        apply([], st.Observation(job(False), pod(), "gpus")), st.Observation(job(True), None, "gpus")
    )
    assert queueing.not_scheduled(evicted, datetime(2025, 1, 2, tzinfo=UTC), 1) == []


def test_queue_timeout_from_env_and_the_limit_timer() -> None:
    assert queue_timeout_from_env({}) is None and queue_timeout_from_env({ENV_QUEUE_TIMEOUT: ""}) is None
    assert queue_timeout_from_env({ENV_QUEUE_TIMEOUT: "900"}) == 900
    for bad in ("0", "-5", "soon"):
        with pytest.raises(A2rlError, match=ENV_QUEUE_TIMEOUT):
            queue_timeout_from_env({ENV_QUEUE_TIMEOUT: bad})

    def timers(config: OperatorConfig) -> set[str]:
        return {str(h.id) for h in build_registry(config)._spawning.get_all_handlers()}

    assert "queue-limit" not in timers(OperatorConfig())
    assert "queue-limit" in timers(OperatorConfig(queue_timeout_s=600))


# --- run.json -----------------------------------------------------------------------------------


def test_run_json_of_a_preempted_run_says_so_with_its_queue_wait_and_evictions() -> None:
    from a2rl_operator.grading import decisions as gr

    from a2rl.records.run import END_REASONS, PREEMPTED

    run = benchrun(queueName="gpus")
    finished = {"type": "AgentFinished", "status": "True", "reason": queueing.R_PREEMPTED,
                "message": "evicted", "lastTransitionTime": T1}  # fmt: skip
    run["status"] = {"startTime": T0, "conditions": [finished], "queueWaitSeconds": 42, "evictions": 1}
    doc = gr.cluster_run_json(run, parse_spec(run), base_model_digest=None, evaluator_version="v",
                              agent_exit_code=None).to_json()  # fmt: skip
    assert doc["end_reason"] == PREEMPTED == "preempted" and PREEMPTED in END_REASONS
    # How long the agent ran: from its start to the eviction (AgentFinished).
    assert (doc["started_at"], doc["ended_at"]) == (T0, T1)
    assert (doc["queue_wait_seconds"], doc["evictions"]) == (42, 1)
    # A run that was not queued carries neither.
    run["status"] = {"startTime": T0, "conditions": [{**finished, "reason": "Completed"}]}
    plain = gr.cluster_run_json(run, parse_spec(run), base_model_digest=None, evaluator_version="v",
                                agent_exit_code=None).to_json()  # fmt: skip
    assert (
        "queue_wait_seconds" not in plain and "evictions" not in plain and plain["end_reason"] == "completed"
    )
