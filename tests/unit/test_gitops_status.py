"""The GitOps-readable status (docs/gitops.md): the one mapping of an outcome to conditions
(`status.lifecycle`), how BenchRun and BenchSubmission statuses carry it, the CRD schemas that hold
it, and Argo CD's health scripts run by a real Lua 5.1 on hand-made objects (the cluster test feeds
them the real ones: tests/cluster/test_gitops_status.py)."""

from __future__ import annotations

from typing import Any

import pytest
from a2rl_operator import status as st
from a2rl_operator.grading import decisions as gr

from a2rl.api import BenchRun, BenchSubmission
from a2rl.api.benchsubmission import BenchSubmissionStatus
from a2rl.api.crdgen import openapi_schema
from tests.support import argocd_health as argo

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def view(conds: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in conds}


# --- the mapping -----------------------------------------------------------------------------------


def test_lifecycle_maps_each_outcome_to_the_gitops_conditions() -> None:
    def table(outcome: st.Outcome) -> dict[str, str]:
        changes = st.lifecycle(outcome, "Why", "because")
        assert {(c.reason, c.message) for c in changes} == {("Why", "because")}
        return {c.type: c.status for c in changes}

    assert table(st.Outcome.IN_FLIGHT) == {
        "Reconciling": "True", "Stalled": "False", "Ready": "False", "Finished": "False",
    }  # fmt: skip
    assert table(st.Outcome.SUCCEEDED) == {
        "Reconciling": "False", "Stalled": "False", "Ready": "True", "Finished": "True",
        "Succeeded": "True", "Failed": "False",
    }  # fmt: skip
    assert table(st.Outcome.FAILED) == {
        "Reconciling": "False", "Stalled": "True", "Ready": "False", "Finished": "True",
        "Succeeded": "False", "Failed": "True",
    }  # fmt: skip
    assert [c.type for c in st.lifecycle(st.Outcome.FAILED, "X")] == list(st.LIFECYCLE_TYPES)


def test_applying_it_again_is_no_change_and_a_transition_moves_only_what_changed() -> None:
    running = (st.Outcome.IN_FLIGHT, "Running", "the agent is running")
    conds = st.apply_lifecycle([], *running, generation=1, now=T0)
    assert st.apply_lifecycle(conds, *running, generation=1, now=T1) == conds
    done = st.apply_lifecycle(conds, st.Outcome.SUCCEEDED, "AgentCompleted", "ok", generation=1, now=T1)
    times = {c["type"]: c["lastTransitionTime"] for c in done}
    assert times == {
        "Reconciling": T1,
        "Stalled": T0,
        "Ready": T1,
        "Finished": T1,
        "Succeeded": T1,
        "Failed": T1,
    }
    assert all(c["observedGeneration"] == 1 for c in done)


def _run_conds(*changes: st.Change) -> list[dict[str, Any]]:
    return st.apply_changes([], list(changes), 1, T0)[0]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ([st.accepted()], (st.Outcome.IN_FLIGHT, "Pending", "spec validated; creating the workspace")),
        (
            [st.accepted(), st.Change("Queued", "True", st.R_WAITING_FOR_ADMISSION, "waiting for Kueue")],
            (st.Outcome.IN_FLIGHT, "Queued", "waiting for Kueue"),
        ),
        (
            [st.accepted(), st.Change("WorkspaceReady", "True", st.R_POD_SCHEDULED, "workspace pod on n")],
            (st.Outcome.IN_FLIGHT, "Running", "workspace pod on n"),
        ),
        (
            [st.accepted(), st.Change("AgentRunning", "True", st.R_RUNNING, "the agent is running")],
            (st.Outcome.IN_FLIGHT, "Running", "the agent is running"),
        ),
        (
            [
                st.accepted(),
                st.Change("AgentFinished", "True", "Completed", "done"),
                st.Change("Graded", "False", gr.R_REPORTING, "report Job r writes the report"),
            ],
            (st.Outcome.IN_FLIGHT, "Grading", "report Job r writes the report"),
        ),
        (
            [st.accepted(), st.Change("Succeeded", "True", st.R_AGENT_COMPLETED, "the agent exited")],
            (st.Outcome.SUCCEEDED, st.R_AGENT_COMPLETED, "the agent exited"),
        ),
        (
            st.rejection(st.R_UNKNOWN_TASK, "spec.task: unknown task 'nope'"),
            (st.Outcome.FAILED, st.R_UNKNOWN_TASK, "spec.task: unknown task 'nope'"),
        ),
    ],
    ids=["pending", "queued", "scheduled", "running", "grading", "succeeded", "rejected"],
)
def test_a_runs_outcome_comes_from_its_own_conditions(
    changes: list[st.Change], expected: tuple[st.Outcome, str, str]
) -> None:
    assert st.run_outcome(_run_conds(*changes)) == expected


def test_a_failed_run_also_says_succeeded_false_so_kubectl_wait_on_it_returns() -> None:
    conds = _run_conds(st.accepted(), st.Change("Failed", "True", st.R_AGENT_FAILED, "exit 3"))
    conds = st.apply_lifecycle(conds, *st.run_outcome(conds), generation=1, now=T1)
    assert view(conds)["Succeeded"] == ("False", st.R_AGENT_FAILED)
    assert view(conds)["Finished"] == ("True", st.R_AGENT_FAILED) and st.is_terminal(conds)
    assert st.derive_phase(conds) == "Failed"


# --- BenchSubmission ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "outcome"),
    [
        (gr.evaluating("demo-eval-00001"), "in flight"),
        (gr.failed(gr.R_EVAL_JOB_FAILED, "the eval Job failed"), "failed"),
        (gr.rejected(gr.R_AFTER_DEADLINE, "too late"), "failed"),
    ],
    ids=["evaluating", "failed", "rejected"],
)
def test_a_submissions_state_sets_the_gitops_conditions_and_observed_generation(
    update: gr.SubmissionUpdate, outcome: str
) -> None:
    new = gr.apply_update(BenchSubmissionStatus(), update, 2, T0)
    assert new is not None and new.observed_generation == 2
    conds = view(st.conditions_of(new))
    assert conds["Evaluated"] == ("False", update.reason)
    assert conds["Reconciling"] == ("True" if outcome == "in flight" else "False", update.reason)
    assert conds["Stalled"][0] == ("True" if outcome == "failed" else "False")
    assert conds["Ready"][0] == "False" and conds["Finished"][0] == (
        "False" if outcome == "in flight" else "True"
    )
    assert ("Succeeded" in conds) == (outcome != "in flight")


# --- the CRD schemas ------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [BenchRun, BenchSubmission], ids=["BenchRun", "BenchSubmission"])
def test_the_crds_carry_the_status_fields_and_refuse_spec_edits(model: Any) -> None:
    schema = openapi_schema(model)
    status = schema["properties"]["status"]["properties"]
    described = "The `metadata.generation` the status was computed from."
    assert status["observedGeneration"] == {"description": described, "type": "integer", "minimum": 0}
    assert "observedGeneration" in status["conditions"]["items"]["properties"]
    rules = schema["properties"]["spec"]["x-kubernetes-validations"]
    (rule,) = [r for r in rules if "oldSelf" in r["rule"]]
    assert rule["rule"] == "self == oldSelf" and "spec cannot change once created" in rule["message"]
    assert "metadata labels and annotations may change" in rule["message"]


# --- Argo CD's health scripts -----------------------------------------------------------------------


def cond(type_: str, status: str, reason: str = "Why", message: str = "because") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": T0, "observedGeneration": 1}  # fmt: skip


def obj(kind: str, status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "ns", "generation": generation},
        "spec": {},
    }
    if status is not None:
        body["status"] = status
    return body


def gitops(outcome: st.Outcome, reason: str, message: str = "because") -> list[dict[str, Any]]:
    return st.apply_lifecycle([], outcome, reason, message, generation=1, now=T0)


@pytest.mark.parametrize("kind", argo.KINDS)
def test_health_of_objects_not_observed_yet_or_with_a_newer_generation_is_progressing(kind: str) -> None:
    assert argo.health(kind, obj(kind, None))["status"] == "Progressing"
    assert argo.health(kind, obj(kind, {}))["status"] == "Progressing"
    assert argo.health(kind, obj(kind, {"conditions": []}))["status"] == "Progressing"
    done = {"observedGeneration": 1, "conditions": gitops(st.Outcome.SUCCEEDED, "Done")}
    assert argo.health(kind, obj(kind, done))["status"] == "Healthy"
    newer = argo.health(kind, obj(kind, done, generation=2))
    assert newer == {
        "status": "Progressing",
        "message": "Waiting for the a2rl operator to observe generation 2",
    }


@pytest.mark.parametrize("kind", argo.KINDS)
def test_health_follows_stalled_ready_and_reconciling(kind: str) -> None:
    def health(outcome: st.Outcome, reason: str, message: str) -> dict[str, str]:
        status = {"observedGeneration": 1, "conditions": gitops(outcome, reason, message)}
        return argo.health(kind, obj(kind, status))

    assert health(st.Outcome.IN_FLIGHT, "Running", "the agent is running") == {
        "status": "Progressing", "message": "Running: the agent is running",
    }  # fmt: skip
    assert health(st.Outcome.SUCCEEDED, "AgentCompleted", "exit 0") == {
        "status": "Healthy", "message": "AgentCompleted: exit 0",
    }  # fmt: skip
    assert health(st.Outcome.FAILED, "AgentFailed", "exit 3") == {
        "status": "Degraded", "message": "AgentFailed: exit 3",
    }  # fmt: skip
    assert health(st.Outcome.FAILED, "AgentFailed", "")["message"] == "AgentFailed"


def test_a_queued_benchrun_is_suspended_and_only_a_benchrun() -> None:
    conds = [cond("Accepted", "True"), cond("Queued", "True", "WaitingForAdmission", "queue q"),
             *gitops(st.Outcome.IN_FLIGHT, "Queued", "queue q")]  # fmt: skip
    status = {"observedGeneration": 1, "phase": "Queued", "conditions": conds}
    assert argo.health("BenchRun", obj("BenchRun", status)) == {
        "status": "Suspended", "message": "WaitingForAdmission: queue q",
    }  # fmt: skip
    admitted = [cond("Queued", "False", "Admitted"), *gitops(st.Outcome.IN_FLIGHT, "Running", "running")]
    assert argo.health("BenchRun", obj("BenchRun", {"conditions": admitted}))["status"] == "Progressing"
    assert (
        argo.health("BenchCampaign", obj("BenchCampaign", {"conditions": conds}))["status"] == "Progressing"
    )


def test_statuses_written_before_the_gitops_conditions_still_read_right() -> None:
    run = {
        "phase": "Failed",
        "conditions": [cond("Accepted", "True"), cond("Failed", "True", "AgentFailed", "x")],
    }
    assert argo.health("BenchRun", obj("BenchRun", run)) == {
        "status": "Degraded",
        "message": "AgentFailed: x",
    }
    ok = {"phase": "Succeeded", "conditions": [cond("Succeeded", "True", "AgentCompleted", "y")]}
    assert argo.health("BenchRun", obj("BenchRun", ok))["status"] == "Healthy"
    running = {"phase": "Running", "conditions": [cond("AgentRunning", "True", "Running")]}
    assert argo.health("BenchRun", obj("BenchRun", running)) == {
        "status": "Progressing", "message": "The BenchRun is running",
    }  # fmt: skip
    scored = {"state": "Succeeded", "score": 61.25, "conditions": [cond("Evaluated", "True", "Evaluated")]}
    assert argo.health("BenchSubmission", obj("BenchSubmission", scored)) == {
        "status": "Healthy", "message": "Scored 61.25",
    }  # fmt: skip
    rejected = {
        "state": "Rejected",
        "error": "too late",
        "conditions": [cond("Evaluated", "False", "AfterDeadline")],
    }
    assert argo.health("BenchSubmission", obj("BenchSubmission", rejected)) == {
        "status": "Degraded", "message": "Rejected: too late",
    }  # fmt: skip


def test_the_argocd_cm_patch_carries_the_scripts() -> None:
    assert argo.CM_PATCH.read_text(encoding="utf-8") == argo.cm_patch(), (
        "deploy/argocd/argocd-cm-patch.yaml drifted: run `python -m tests.support.argocd_health`"
    )
