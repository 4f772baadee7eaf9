"""Grading decisions, pure: BenchSubmission admission and status, the BenchRun's aggregate scores,
and the steps of the end of a run. Objects are wire dicts as the API server returns them; their
statuses are read and built as the API models (`BenchSubmissionStatus`, `BenchRunStatus`), store
documents as records (`ResultRecord`, `RunRecord`).

Submission states (`status.state`, with `status.reason` and the `Evaluated` condition):
Pending → Evaluating (eval Job created) → Succeeded (a score) or Failed (no score: the model
could not be evaluated, or the eval Job failed); Rejected when it is over budget, late, or its
run is gone or finished. Terminal states never change. Each state also sets the GitOps-readable
conditions (`status.lifecycle`: Pending/Evaluating in flight, Succeeded succeeded, Failed and
Rejected failed) and `status.observedGeneration`.

End of a run (the BenchRun's `Graded` condition; the terminal condition waits for it):
AwaitingAgent → WaitingForEvaluations (bounded) → Reporting (report Job) → ReportWritten
(`status.report` set, then Succeeded/Failed as the agent's end implies) or ReportFailed (Failed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from a2rl.api.benchrun import BenchRun, BenchRunSpec, BenchRunStatus, ObjectMeta, ReportRef
from a2rl.api.benchsubmission import BenchSubmissionSpec, BenchSubmissionStatus, SubmissionState
from a2rl.constants import (
    BASELINE_INDEX,
    COND_AGENT_FINISHED,
    COND_EVALUATED,
    COND_FAILED,
    COND_GRADED,
    REASON_COMPLETED,
    REASON_DEADLINE_EXCEEDED,
    REASON_DRIVER_BUDGET_EXHAUSTED,
)
from a2rl.records.report import ReportRecord
from a2rl.records.result import ResultRecord
from a2rl.records.run import (
    COMPLETED,
    DEADLINE_EXCEEDED,
    DRIVER_BUDGET_EXHAUSTED,
    FAILED,
    PREEMPTED,
    RunRecord,
    run_record,
)
from a2rl.runs import parse_time
from a2rl.scores import Scored, summarize
from a2rl.store.layout import RunLayout
from a2rl_operator import queueing
from a2rl_operator import status as st

Body = dict[str, Any]

# --- reasons (CamelCase) ----------------------------------------------------------------------
# BenchSubmission
R_EVALUATING = "Evaluating"
R_EVALUATED = "Evaluated"
R_CACHED = "Cached"
R_EVALUATION_ERROR = "EvaluationError"
R_EVAL_JOB_FAILED = "EvalJobFailed"
R_EVAL_TIMED_OUT = "EvalTimedOut"
R_NO_RESULT = "NoResult"
R_HELDOUT_MISSING = "HeldoutDataMissing"
R_ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"  # the judge/search URL cannot be a NetworkPolicy peer
R_MAX_SUBMISSIONS = "MaxSubmissionsExceeded"
R_AFTER_DEADLINE = "AfterDeadline"
R_UNKNOWN_RUN = "UnknownRun"
R_RUN_FINISHED = "RunFinished"
# BenchRun `Graded`
R_AWAITING_AGENT = "AwaitingAgent"
R_WAITING_FOR_EVALUATIONS = "WaitingForEvaluations"
R_REPORTING = "Reporting"
R_REPORT_WRITTEN = "ReportWritten"
R_REPORT_FAILED = "ReportFailed"

TERMINAL_STATES = frozenset({SubmissionState.SUCCEEDED, SubmissionState.FAILED, SubmissionState.REJECTED})
#: A submission's state as the GitOps-readable conditions tell it (`status.lifecycle`).
SUBMISSION_OUTCOMES = {
    SubmissionState.PENDING: st.Outcome.IN_FLIGHT,
    SubmissionState.EVALUATING: st.Outcome.IN_FLIGHT,
    SubmissionState.SUCCEEDED: st.Outcome.SUCCEEDED,
    SubmissionState.FAILED: st.Outcome.FAILED,
    SubmissionState.REJECTED: st.Outcome.FAILED,
}
#: Reasons of the AgentFinished condition → run.json's `end_reason` (the local runner's words).
#: The vocabulary is `a2rl.records.run.EndReason`; any other reason is `failed`.
END_REASONS = {
    REASON_COMPLETED: COMPLETED,
    REASON_DEADLINE_EXCEEDED: DEADLINE_EXCEEDED,
    REASON_DRIVER_BUDGET_EXHAUSTED: DRIVER_BUDGET_EXHAUSTED,
    queueing.R_PREEMPTED: PREEMPTED,
}


def now_utc() -> datetime:
    return datetime.now(UTC)


def sub_state(sub: Body) -> str:
    return str(st.submission_status(sub).state)


def is_terminal_state(state: str) -> bool:
    return state in {s.value for s in TERMINAL_STATES}


# --- admission ------------------------------------------------------------------------------


def run_deadline(run: Body, spec: BenchRunSpec) -> datetime | None:
    """When the agent's budget ends: `status.startTime + budget.wallTimeSeconds` (None before it starts)."""
    start = st.run_status(run).start_time
    return None if start is None else start + timedelta(seconds=spec.budget.wall_time_seconds)


def admission(
    sub_spec: BenchSubmissionSpec,
    created: datetime | None,
    run: Body,
    spec: BenchRunSpec,
    allowance_s: int,
) -> tuple[str, str] | None:
    """(reason, message) when the submission must be refused; None when it may be evaluated.

    The baseline (index 0) is never over budget or late; every submission is refused once the
    run has ended. `submittedAt` (the recorder's clock) must be before the deadline, and the
    object must have been created (the API server's clock) within grace + `allowance_s` after it:
    the model snapshot is uploaded between the two.
    """
    if st.is_terminal(st.conditions_of(st.run_status(run))):
        return R_RUN_FINISHED, f"BenchRun {run['metadata']['name']} has already finished"
    if sub_spec.index == BASELINE_INDEX:
        return None
    cap = spec.budget.max_submissions
    if cap is not None and sub_spec.index > cap:
        return R_MAX_SUBMISSIONS, f"submission {sub_spec.index} exceeds spec.budget.maxSubmissions={cap}"
    deadline = run_deadline(run, spec)
    if deadline is None:
        return None
    submitted = sub_spec.submitted_at
    if submitted.tzinfo is None:
        submitted = submitted.replace(tzinfo=UTC)
    if submitted > deadline:
        return R_AFTER_DEADLINE, (
            f"submitted at {st.now_iso(submitted)}, after the budget ended at {st.now_iso(deadline)}"
        )
    latest = deadline + timedelta(seconds=spec.budget.grace_seconds + allowance_s)
    if created is not None and created > latest:
        return R_AFTER_DEADLINE, (
            f"created at {st.now_iso(created)}, later than {st.now_iso(latest)} (deadline + grace + "
            f"{allowance_s} s upload allowance)"
        )
    return None


# --- Jobs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobOutcome:
    succeeded: bool
    reason: str  # the Job condition's reason (e.g. DeadlineExceeded, BackoffLimitExceeded)
    message: str


def job_outcome(job: Body | None) -> JobOutcome | None:
    """How a finished Job ended (None while it runs)."""
    if job is None:
        return None
    conds = {
        c.get("type"): c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    for type_ in ("Complete", "SuccessCriteriaMet"):
        if type_ in conds:
            c = conds[type_]
            return JobOutcome(True, str(c.get("reason") or type_), str(c.get("message") or ""))
    for type_ in ("Failed", "FailureTarget"):
        if type_ in conds:
            c = conds[type_]
            return JobOutcome(False, str(c.get("reason") or type_), str(c.get("message") or ""))
    return None


# --- submission status ----------------------------------------------------------------------


@dataclass(frozen=True)
class SubmissionUpdate:
    """A new state of a submission: its status fields (those set in `fields`; set to None: removed)
    and the `Evaluated` condition."""

    state: SubmissionState
    reason: str
    message: str
    fields: BenchSubmissionStatus

    @property
    def condition(self) -> st.Change:
        status = st.TRUE if self.state == SubmissionState.SUCCEEDED else st.FALSE
        return st.Change(COND_EVALUATED, status, self.reason, self.message)

    @property
    def outcome(self) -> st.Outcome:
        """For the GitOps-readable conditions (`status.lifecycle`): a rejected submission failed."""
        return SUBMISSION_OUTCOMES[self.state]


def evaluating(job_name: str) -> SubmissionUpdate:
    return SubmissionUpdate(SubmissionState.EVALUATING, R_EVALUATING, f"eval Job {job_name} created",
                            BenchSubmissionStatus(eval_job=job_name))  # fmt: skip


def rejected(reason: str, message: str) -> SubmissionUpdate:
    return SubmissionUpdate(SubmissionState.REJECTED, reason, message, BenchSubmissionStatus(error=message))


def failed(reason: str, message: str, job_name: str | None = None) -> SubmissionUpdate:
    fields = BenchSubmissionStatus(error=message)
    if job_name:
        fields.eval_job = job_name
    return SubmissionUpdate(SubmissionState.FAILED, reason, message, fields)


def from_result(
    result: ResultRecord, *, result_uri: str, job_name: str | None, cached: bool = False
) -> SubmissionUpdate:
    """Copy score / error / timings of a `result.json` into the submission's status."""
    fields = BenchSubmissionStatus(
        score=result.score,
        error=str(result.error) if result.error else None,
        evaluator_version=result.evaluator_version,
        result_uri=result_uri,
        started_at=parse_time(result.started_at),
        finished_at=parse_time(result.finished_at),
        duration_seconds=_nonneg(result.duration_s),
        cached=cached,
    )
    if job_name:
        fields.eval_job = job_name
    if fields.score is not None and fields.error is None:
        reason = R_CACHED if cached else R_EVALUATED
        how = "from the baseline cache" if cached else "by its eval Job"
        return SubmissionUpdate(SubmissionState.SUCCEEDED, reason, f"score {fields.score} {how}", fields)
    fields.score = None
    fields.error = fields.error or "the evaluation produced no score"
    return SubmissionUpdate(SubmissionState.FAILED, R_EVALUATION_ERROR, fields.error, fields)


def from_failed_job(outcome: JobOutcome, job_name: str, pod_detail: str | None = None) -> SubmissionUpdate:
    """The eval Job failed without writing result.json."""
    if outcome.reason == "DeadlineExceeded":
        reason, what = R_EVAL_TIMED_OUT, "the eval Job ran out of time (activeDeadlineSeconds)"
    else:
        reason, what = R_EVAL_JOB_FAILED, f"the eval Job failed ({outcome.reason})"
    detail = "; ".join(x for x in (outcome.message, pod_detail) if x)
    return failed(reason, f"{what}: {detail}" if detail else what, job_name)


def pod_failure(pod: Body) -> str | None:
    """`container eval exited with code 3 (Error): <termination message>` for the first failed container."""
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        term = (cs.get("state") or {}).get("terminated") or {}
        code = term.get("exitCode")
        if code not in (None, 0):
            msg = f"container {cs.get('name')} exited with code {code}"
            if term.get("reason"):
                msg += f" ({term['reason']})"
            if term.get("message"):
                msg += f": {st.one_line(str(term['message']), 500)}"
            return msg
    return None


def container_exit_code(pod: Body | None, container: str) -> int | None:
    """Exit code of a terminated container of `pod` (None: running, absent or unknown)."""
    if pod is None:
        return None
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        if cs.get("name") == container:
            code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
            return int(code) if isinstance(code, int) else None
    return None


def no_result(job_name: str) -> SubmissionUpdate:
    return failed(R_NO_RESULT, f"the eval Job {job_name} completed without writing result.json", job_name)


def apply_update(
    old: BenchSubmissionStatus, update: SubmissionUpdate, generation: int | None, now: str
) -> BenchSubmissionStatus | None:
    """The submission's new status (None: nothing to write). A terminal state is never changed."""
    if "state" in old.model_fields_set and is_terminal_state(str(old.state)):
        return None
    conds = st.set_condition(st.conditions_of(old), update.condition, generation, now)
    conds = st.apply_lifecycle(
        conds, update.outcome, update.reason, update.message, generation=generation, now=now
    )
    status = old.model_copy(
        update={
            "observed_generation": generation,
            "state": update.state.value,
            "reason": update.reason,
            **{name: getattr(update.fields, name) for name in update.fields.model_fields_set},
            "conditions": st.condition_models(conds),
        }
    )
    return None if st.status_wire(status) == st.status_wire(old) else status


# --- the BenchRun's aggregate scores ---------------------------------------------------------


def aggregate(subs: Sequence[Body]) -> BenchRunStatus:
    """`submissionCount`, `baselineScore`, `bestScore`, `bestSubmission`, `improvement` of a run from
    its BenchSubmissions, as a status with just those fields set (None: unset). Rejected submissions
    do not count; the baseline is index 0; the best is the highest score (the earliest submission
    wins ties)."""
    scored = []
    for sub in subs:
        status = st.submission_status(sub)
        if status.state == SubmissionState.REJECTED:
            continue
        score = status.score if status.state == SubmissionState.SUCCEEDED else None
        scored.append(Scored(int(sub["spec"]["index"]), score))
    summary = summarize(scored)
    return BenchRunStatus(
        submission_count=summary.submissions,
        baseline_score=summary.baseline_score,
        best_score=summary.best_score,
        best_submission=summary.best_submission,
        improvement=summary.improvement,
    )


def with_aggregate(status: BenchRunStatus, agg: BenchRunStatus) -> BenchRunStatus:
    """`status` with the fields of `agg` (`aggregate`'s) set; those that are None removed."""
    return status.model_copy(update={name: getattr(agg, name) for name in agg.model_fields_set})


# --- the end of a run -----------------------------------------------------------------------


class StepKind(Enum):
    NOTHING = "nothing"  # not graded by this operator, or the agent still runs
    DONE = "done"  # graded (or the report failed): nothing left to do
    WAIT_EVALUATIONS = "wait-evaluations"
    START_REPORT = "start-report"
    WAIT_REPORT = "wait-report"
    FINISH = "finish"
    REPORT_FAILED = "report-failed"


@dataclass(frozen=True)
class Step:
    kind: StepKind
    pending: int = 0
    message: str = ""


def pending_evaluations(subs: Sequence[Body]) -> int:
    return sum(1 for s in subs if not is_terminal_state(sub_state(s)))


def end_step(
    conds: Sequence[st.Cond],
    subs: Sequence[Body],
    report_job: Body | None,
    now: datetime,
    drain_timeout_s: int,
) -> Step:
    """What the end of the run needs next, from what is observed."""
    graded = st.get_condition(conds, COND_GRADED)
    if graded is None:
        return Step(StepKind.NOTHING)
    if graded.get("status") == st.TRUE or graded.get("reason") == R_REPORT_FAILED:
        return Step(StepKind.DONE)
    finished = st.get_condition(conds, COND_AGENT_FINISHED)
    if finished is None or finished.get("status") != st.TRUE:
        return Step(StepKind.NOTHING)
    pending = pending_evaluations(subs)
    if report_job is not None:
        outcome = job_outcome(report_job)
        if outcome is None:
            return Step(StepKind.WAIT_REPORT, pending)
        if outcome.succeeded:
            return Step(StepKind.FINISH, pending)
        detail = f"{outcome.reason}: {outcome.message}" if outcome.message else outcome.reason
        return Step(StepKind.REPORT_FAILED, pending, f"the report Job failed ({detail})")
    ended = parse_time(finished.get("lastTransitionTime")) or now
    waited = (now - ended).total_seconds()
    if pending and waited < drain_timeout_s:
        # A stable message (no countdown): re-observing the same state writes nothing.
        until = st.now_iso(ended + timedelta(seconds=drain_timeout_s))
        return Step(
            StepKind.WAIT_EVALUATIONS, pending, f"{pending} evaluation(s) in flight; waiting until {until}"
        )
    return Step(StepKind.START_REPORT, pending)


def agent_finish(conds: Sequence[st.Cond]) -> st.Change | None:
    cond = st.get_condition(conds, COND_AGENT_FINISHED)
    if cond is None or cond.get("status") != st.TRUE:
        return None
    return st.Change(COND_AGENT_FINISHED, st.TRUE, str(cond["reason"]), str(cond.get("message") or ""))


def graded_awaiting() -> st.Change:
    return st.Change(COND_GRADED, st.FALSE, R_AWAITING_AGENT, "submissions are evaluated as they come; "
                     "the report is written when the agent has finished")  # fmt: skip


def step_changes(
    step: Step, conds: Sequence[st.Cond], report_job_name: str, report_uri: str = ""
) -> list[st.Change]:
    """The `Graded` (and terminal) conditions a step sets."""
    if step.kind is StepKind.WAIT_EVALUATIONS:
        return [st.Change(COND_GRADED, st.FALSE, R_WAITING_FOR_EVALUATIONS, step.message)]
    if step.kind in (StepKind.START_REPORT, StepKind.WAIT_REPORT):
        late = f"; {step.pending} evaluation(s) still running are not in it" if step.pending else ""
        return [
            st.Change(
                COND_GRADED, st.FALSE, R_REPORTING, f"report Job {report_job_name} writes the report{late}"
            )
        ]
    if step.kind is StepKind.FINISH:
        finish = agent_finish(conds)
        changes = [st.Change(COND_GRADED, st.TRUE, R_REPORT_WRITTEN, f"report written to {report_uri}")]
        return changes + ([st.terminal_for(finish)] if finish is not None else [])
    if step.kind is StepKind.REPORT_FAILED:
        return [st.Change(COND_GRADED, st.FALSE, R_REPORT_FAILED, step.message),
                st.Change(COND_FAILED, st.TRUE, R_REPORT_FAILED, step.message)]  # fmt: skip
    return []


def end_reason(conds: Sequence[st.Cond]) -> str | None:
    finish = agent_finish(conds)
    if finish is None:
        return None
    return END_REASONS.get(finish.reason, FAILED)


def summary_line(report: ReportRecord) -> str:
    def num(value: float | None) -> str:
        return "—" if value is None else f"{float(value):.1f}"

    best = num(report.best_score)
    if report.best_submission is not None:
        best += f" (submission {report.best_submission})"
    imp = report.improvement
    # Counts a report left out read 0 (a null one reads None, as the JSON says).
    given = report.model_fields_set
    valid = report.valid_submissions if "valid_submissions" in given else 0
    total = report.total_submissions if "total_submissions" in given else 0
    return (
        f"baseline {num(report.baseline_score)}, best {best}, "
        f"improvement {'—' if imp is None else f'{float(imp):+.1f}'}, "
        f"{valid}/{total} submissions scored"
    )


def report_ref(report: ReportRecord, uri: str) -> ReportRef:
    """`status.report` from report.json."""
    return ReportRef(
        uri=uri,
        schema_version=str(report.schema_version),
        baseline_score=report.baseline_score,
        best_score=report.best_score,
        improvement=report.improvement,
        valid_submissions=int(report.valid_submissions or 0),
        route=report.route,
        summary=summary_line(report),
    )


def _nonneg(value: float | None) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def cluster_run_json(
    run: Body,
    spec: BenchRunSpec,
    *,
    base_model_digest: str | None,
    evaluator_version: str,
    agent_exit_code: int | None,
) -> RunRecord:
    """run.json of a cluster run (the local runner's document, `mode: cluster`), for the report;
    a run queued through Kueue also carries its queue wait and evictions (`status`)."""
    meta = run["metadata"]
    status = st.run_status(run)
    conds = st.conditions_of(status)
    started = status.start_time
    finished = next((c for c in status.conditions if c.type == COND_AGENT_FINISHED), None)
    ended = finished.last_transition_time if finished else None
    # The labels too: a campaign's runs are found in the store by their `a2rl.dev/campaign` label.
    labels = dict(meta.get("labels") or {})
    model = BenchRun(
        metadata=ObjectMeta(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"], labels=labels),
        spec=spec,
    )
    return run_record(
        model,
        RunLayout(meta["namespace"], meta["name"], meta["uid"]),
        base_model_digest=base_model_digest or "",
        evaluator_version=evaluator_version,
        started_at=started.timestamp() if started else None,
        ended_at=ended.timestamp() if ended else None,
        end_reason=end_reason(conds),
        agent_exit_code=agent_exit_code,
        mode="cluster",
        sandbox="pod",
        queue_wait_seconds=status.queue_wait_seconds,
        evictions=status.evictions,
    )
