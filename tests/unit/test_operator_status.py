"""Condition math and the mapping from the workspace Job/pod to BenchRun conditions (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from a2rl_operator import status as st
from a2rl_operator.finalizer import Decision, decide

from a2rl.constants import ANNOTATION_FORCE_FINALIZE

T0, T1 = "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z"


def job(suspend: bool = False, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "demo-workspace"},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions or []},
    }


def pod(running: bool = True, scheduled: bool = True) -> dict[str, Any]:
    state = {"running": {"startedAt": "2025-01-01T00:01:00Z"}} if running else {"waiting": {}}
    return {
        "metadata": {"creationTimestamp": T0},
        "spec": {"nodeName": "kwok-gpu-0"},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True" if scheduled else "False"}],
            "containerStatuses": [{"name": "agent", "state": state}],
        },
    }


def apply(conds: list[dict[str, Any]], obs: st.Observation, now: str = T0) -> list[dict[str, Any]]:
    return st.apply_changes(conds, st.observe(obs, conds), 3, now)[0]


def status_of(conds: list[dict[str, Any]], type_: str) -> tuple[str, str] | None:
    c = st.get_condition(conds, type_)
    return None if c is None else (c["status"], c["reason"])


def test_set_condition_keeps_transition_time_when_status_unchanged() -> None:
    conds = st.set_condition([], st.Change("Queued", "True", "ExceededQuota", "a"), 1, T0)
    same = st.set_condition(conds, st.Change("Queued", "True", "WaitingForAdmission", "b"), 2, T1)
    assert same[0]["lastTransitionTime"] == T0 and same[0]["reason"] == "WaitingForAdmission"
    assert same[0]["observedGeneration"] == 2
    flipped = st.set_condition(same, st.Change("Queued", "False", "Admitted", "c"), 2, T1)
    assert flipped[0]["lastTransitionTime"] == T1
    assert (
        st.set_condition([], st.Change("X", "True", "Y", "line1\nline2"), None, T0)[0]["message"]
        == "line1 line2"
    )


def test_apply_changes_reports_only_transitions() -> None:
    conds, tr = st.apply_changes([], [st.accepted()], 1, T0)
    assert [c.type for c in tr] == ["Accepted"]
    _, again = st.apply_changes(conds, [st.accepted()], 1, T1)
    assert again == []


def test_happy_path_to_succeeded() -> None:
    conds = st.apply_changes([], [st.accepted()], 1, T0)[0]
    conds = apply(conds, st.Observation(job(), None, None))
    assert status_of(conds, "Admitted") == ("True", st.R_NOT_QUEUED)
    assert st.derive_phase(conds) == "Pending"
    conds = apply(conds, st.Observation(job(), pod(), None))
    assert status_of(conds, "WorkspaceReady") == ("True", st.R_POD_SCHEDULED)
    assert status_of(conds, "AgentRunning") == ("True", st.R_RUNNING)
    assert st.derive_phase(conds) == "Running"
    done = job(conditions=[{"type": "Complete", "status": "True"}])
    conds = apply(conds, st.Observation(done, pod(running=False), None))
    assert status_of(conds, "AgentFinished") == ("True", "Completed")
    assert status_of(conds, "AgentRunning") == ("False", "Completed")
    assert status_of(conds, "Succeeded") == ("True", st.R_AGENT_COMPLETED)
    assert st.derive_phase(conds) == "Succeeded" and st.is_terminal(conds)
    # Terminal runs are not changed by later observations.
    assert st.observe(st.Observation(job(), pod(), None), conds) == []


def test_deadline_and_failure() -> None:
    deadline = job(conditions=[{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}])
    conds = apply([], st.Observation(deadline, None, None))
    assert status_of(conds, "AgentFinished") == ("True", "DeadlineExceeded")
    assert status_of(conds, "Succeeded") == ("True", st.R_BUDGET_EXHAUSTED)
    failed = job(conditions=[{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                              "message": "Job has reached the specified backoff limit"}])  # fmt: skip
    conds = apply([], st.Observation(failed, None, None))
    assert status_of(conds, "AgentFinished") == ("True", "Failed")
    assert status_of(conds, "Failed") == ("True", st.R_AGENT_FAILED)
    assert "backoff limit" in (st.get_condition(conds, "Failed") or {})["message"]
    assert st.derive_phase(conds) == "Failed"


def test_a_failed_setup_container_fails_the_run_with_its_own_message() -> None:
    failed = job(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                              "message": "Job has reached the specified backoff limit"}])  # fmt: skip
    broken = pod(running=False)
    log_tail = (
        "[a2rl-setup] resolving base model builtin:tiny\n"
        "a2rl: error: the train data of task arith (seed 7) is not staged in s3://runs/x: "
        "run `a2rl data stage arith --seed 7 --store s3://runs/x` once\n"
    )
    broken["status"]["initContainerStatuses"] = [
        {"name": "setup", "state": {"terminated": {"exitCode": 2, "reason": "Error", "message": log_tail}}},
        {"name": "recorder", "state": {"waiting": {"reason": "PodInitializing"}}},
    ]
    conds = apply([], st.Observation(failed, broken, None))
    assert status_of(conds, "AgentFinished") == ("True", st.R_SETUP_FAILED)
    assert status_of(conds, "Failed") == ("True", st.R_SETUP_FAILED)
    message = (st.get_condition(conds, "Failed") or {})["message"]
    assert message.startswith("workspace set-up failed (exit code 2): a2rl: error: the train data")
    assert "a2rl data stage arith --seed 7" in message and "[a2rl-setup]" not in message
    assert st.derive_phase(conds) == "Failed" and st.R_SETUP_FAILED in st.WARNING_REASONS
    # A set-up container that succeeded says nothing; the agent's failure is the agent's.
    fine = pod(running=False)
    fine["status"]["initContainerStatuses"] = [{"name": "setup", "state": {"terminated": {"exitCode": 0}}}]
    assert st.setup_failure(fine) is None and st.setup_failure(None) is None
    conds = apply([], st.Observation(failed, fine, None))
    assert status_of(conds, "Failed") == ("True", st.R_AGENT_FAILED)


def test_kueue_suspended_then_admitted() -> None:
    conds = apply([], st.Observation(job(suspend=True), None, "q"))
    assert status_of(conds, "Queued") == ("True", st.R_WAITING_FOR_ADMISSION)
    assert status_of(conds, "Admitted") == ("False", st.R_WAITING_FOR_ADMISSION)
    assert st.derive_phase(conds) == "Queued"
    conds = apply(conds, st.Observation(job(suspend=False), None, "q"))
    assert status_of(conds, "Queued") == ("False", st.R_ADMITTED)
    assert status_of(conds, "Admitted") == ("True", st.R_ADMITTED)


def test_quota_exceeded_then_freed() -> None:
    msg = (
        'pods "x" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=1, '
        "used: nvidia.com/gpu=1, limited: nvidia.com/gpu=1"
    )
    assert st.is_quota_message(msg)
    conds = apply([], st.Observation(job(), None, None, quota_message=msg))
    assert status_of(conds, "QuotaExceeded") == ("True", st.R_EXCEEDED_QUOTA)
    assert (st.get_condition(conds, "QuotaExceeded") or {})["message"] == msg
    assert status_of(conds, "Queued") == ("True", st.R_EXCEEDED_QUOTA)
    assert st.derive_phase(conds) == "Queued" and not st.is_terminal(conds)
    # An observation without quota news keeps the condition until the pod exists.
    assert status_of(apply(conds, st.Observation(job(), None, None)), "QuotaExceeded") == (
        "True",
        st.R_EXCEEDED_QUOTA,
    )
    conds = apply(conds, st.Observation(job(), pod(), None))
    assert status_of(conds, "QuotaExceeded") == ("False", st.R_QUOTA_AVAILABLE)
    assert status_of(conds, "Queued") == ("False", st.R_QUOTA_AVAILABLE)
    assert st.derive_phase(conds) == "Running"


def test_rejection_is_terminal_failure() -> None:
    conds = st.apply_changes([], st.rejection(st.R_UNKNOWN_TASK, "spec.task: unknown task 'nope'"), 1, T0)[0]
    assert status_of(conds, "Accepted") == ("False", st.R_UNKNOWN_TASK)
    assert st.derive_phase(conds) == "Failed"
    events = {c.type: st.event_type(c) for c in st.rejection(st.R_UNKNOWN_TASK, "x")}
    assert events == {"Accepted": "Warning", "Failed": "Warning"}
    assert st.event_type(st.accepted()) == "Normal"


def test_agent_start_time_from_container_state() -> None:
    assert st.agent_start_time(pod()) == "2025-01-01T00:01:00Z"
    assert st.agent_start_time(pod(running=False)) is None
    assert st.agent_start_time(None) is None


def test_finalizer_is_bounded_and_has_an_escape_annotation() -> None:
    now = datetime(2025, 1, 1, 0, 10, tzinfo=UTC)
    recent = (now - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = (now - timedelta(seconds=400)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert decide({}, recent, now, 300) is Decision.RETAIN
    assert decide({}, old, now, 300) is Decision.RELEASE
    assert decide({ANNOTATION_FORCE_FINALIZE: "true"}, recent, now, 300) is Decision.RELEASE
    assert decide({ANNOTATION_FORCE_FINALIZE: "false"}, recent, now, 300) is Decision.RETAIN
