"""The end of a run in a cluster: wait for evaluations, run the report Job, set `status.report`.

With grading on, an accepted run gets `Graded=False` (`AwaitingAgent`) at once, and the
terminal condition then waits for grading (`status.observe` leaves it to this module). When
the workspace Job has finished (`AgentFinished`, for any reason):

1. wait for in-flight evaluations, at most `A2RL_GRADING_DRAIN_TIMEOUT` seconds after the agent
   finished (`Graded=False`, `WaitingForEvaluations`);
2. write `run.json` (the report's view of the run), archive the workspace pod's container logs
   to `logs/agent.log` and `logs/recorder.log`, create the report Job (`Reporting`);
3. when the report Job has finished: archive its log (`logs/report.log`), read `report.json`,
   set `status.report` (URI + summary), `Graded=True` (`ReportWritten`) and the terminal
   condition the agent's end implies (`Succeeded`: `AgentCompleted` or `BudgetExhausted`;
   `Failed`: `AgentFailed`). A failed report Job ends the run `Failed` (`ReportFailed`).

Steps are recomputed from what is observed; they run on BenchRun events, report Job events, and
a resync timer that also re-processes unfinished submissions (`submissions.resync_submissions`).
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from a2rl_tasks import get_task

from a2rl.constants import (
    API_GROUP,
    API_VERSION,
    BASELINE_INDEX,
    BENCHRUN_PLURAL,
    COMPONENT_AGENT,
    COMPONENT_REPORT,
    COND_ACCEPTED,
    COND_GRADED,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_RUN_NAME,
    MANAGED_BY,
)
from a2rl.store.layout import RunLayout
from a2rl_operator import grading as gr
from a2rl_operator import grading_kube as gk
from a2rl_operator import status as st
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading_config import GradingConfig
from a2rl_operator.grading_store import RunStore
from a2rl_operator.handlers import post_events, write_changes
from a2rl_operator.kube import Kube, NamespaceTerminatingError
from a2rl_operator.manifests import parse_spec
from a2rl_operator.manifests.grading_network import UrlPeerError, grading_network_policy
from a2rl_operator.manifests.job import AGENT_CONTAINER, RECORDER_CONTAINER
from a2rl_operator.manifests.report_job import report_job, report_job_name
from a2rl_operator.manifests.secret import store_uri
from a2rl_operator.run_tracing import now_ns, operator_tracing, record_root_span, record_run_span
from a2rl_operator.submissions import ensure_grading_policy, grading_of, resync_submissions

Body = dict[str, Any]
Logger = logging.Logger | logging.LoggerAdapter[Any]
REPORT_JOB_LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_REPORT}
RESYNC_S = GradingConfig.from_env().resync_s


def _conds(run: Body | kopf.Body) -> list[st.Cond]:
    return list((run.get("status") or {}).get("conditions") or [])


def needs_graded_mark(conds: list[st.Cond]) -> bool:
    return (
        st.is_true(conds, COND_ACCEPTED)
        and st.get_condition(conds, COND_GRADED) is None
        and not st.is_terminal(conds)
    )


def grading_open(conds: list[st.Cond]) -> bool:
    """Graded by this operator and not finished yet."""
    graded = st.get_condition(conds, COND_GRADED)
    return (
        graded is not None and graded.get("status") != st.TRUE and graded.get("reason") != gr.R_REPORT_FAILED
    )


def mark_graded(kube: Kube, namespace: str, name: str) -> None:
    """`Graded=False` (`AwaitingAgent`) on an accepted, unfinished run without it."""
    write_changes(
        kube, namespace, name, lambda conds: [gr.graded_awaiting()] if needs_graded_mark(conds) else []
    )


# --- the steps ----------------------------------------------------------------------------------


def _owned(obj: Body | None, uid: str) -> Body | None:
    if obj is None:
        return None
    owners = obj["metadata"].get("ownerReferences") or []
    return obj if any(o.get("uid") == uid for o in owners) else None


def prepare_report(
    kube: Kube, run: Body, store: RunStore, subs: list[Body], *, grading: GradingConfig, logger: Logger
) -> None:
    """run.json and the workspace pod's logs, before the report Job reads the store."""

    meta = run["metadata"]
    spec = parse_spec(run)
    pod = kube.newest_pod(meta["namespace"], meta["uid"], COMPONENT_AGENT)
    baseline = next((s for s in subs if int(s["spec"]["index"]) == BASELINE_INDEX), None)
    doc = gr.cluster_run_json(
        run,
        spec,
        base_model_digest=baseline["spec"]["modelDigest"] if baseline else None,
        evaluator_version=get_task(spec.task, grading.run_eval_env(spec)).evaluator_version,
        agent_exit_code=gr.container_exit_code(pod, AGENT_CONTAINER),
    )
    store.write_run_json(doc)
    if pod is not None:
        try:
            logs = gk.pod_logs(kube, meta["namespace"], pod, [RECORDER_CONTAINER, AGENT_CONTAINER])
            for container, text in logs.items():
                store.write_log(container, text)
        except Exception:
            logger.exception(
                "BenchRun %s/%s: could not archive the workspace logs", meta["namespace"], meta["name"]
            )


def advance(
    kube: Kube, config: OperatorConfig, grading: GradingConfig, namespace: str, name: str, *, logger: Logger
) -> gr.Step:
    """Take the end of the run one step forward (idempotent); returns the step taken."""
    run = kube.get_run(namespace, name)
    if run is None:
        return gr.Step(gr.StepKind.NOTHING)
    conds = _conds(run)
    meta = run["metadata"]
    if meta.get("deletionTimestamp") or not grading_open(conds) or gr.agent_finish(conds) is None:
        return gr.Step(gr.StepKind.NOTHING)  # a run being deleted is not graded any more
    spec = parse_spec(run)
    uri = store_uri(spec, config)
    if uri is None:
        return gr.Step(gr.StepKind.NOTHING)
    store = RunStore.open(uri, RunLayout(meta["namespace"], meta["name"], meta["uid"]))
    subs = gk.list_submissions(kube, namespace, name, meta["uid"])
    job_name = report_job_name(name)
    job = _owned(kube.get_job(namespace, job_name), meta["uid"])
    step = gr.end_step(conds, subs, job, gr.now_utc(), grading.drain_timeout_s)
    report: dict[str, Any] | None = None
    if step.kind is gr.StepKind.START_REPORT:
        prepare_report(kube, run, store, subs, grading=grading, logger=logger)
        try:
            try:  # the report pod is under the run's grading NetworkPolicy too (no eval Job may exist)
                ensure_grading_policy(kube, config, grading, run, spec)
            except UrlPeerError:  # the report calls no judge: the policy without those URLs
                kube.ensure(grading_network_policy(run, [], config), meta["uid"])
            if kube.ensure(report_job(run, spec, uri, grading), meta["uid"]):
                logger.info("BenchRun %s/%s: created report Job %s", namespace, name, job_name)
        except NamespaceTerminatingError:
            logger.info("BenchRun %s/%s: its namespace is being deleted; no report Job", namespace, name)
            return gr.Step(gr.StepKind.NOTHING)
    elif step.kind in (gr.StepKind.FINISH, gr.StepKind.REPORT_FAILED):
        _archive_report_log(kube, store, namespace, job_name, logger)
        tracing = operator_tracing(uri)
        attrs: dict[str, str | int] = {"a2rl.step": step.kind.value}
        end_ns = now_ns()
        record_run_span(tracing, run, "operator.end_of_run", start_ns=end_ns, end_ns=end_ns, attributes=attrs)
        record_root_span(tracing, run, end_ns)  # the last span of the run's trace
        if step.kind is gr.StepKind.FINISH:
            report = store.read_report()
            if report is None:
                missing = (
                    f"the report Job {job_name} finished but {store.report_uri()} is missing or unreadable"
                )
                step = gr.Step(gr.StepKind.REPORT_FAILED, step.pending, missing)
    changes = gr.step_changes(step, conds, job_name, store.report_uri())
    extra = {"report": gr.report_ref(report, store.report_uri())} if report is not None else {}
    write_grading(kube, namespace, name, changes, extra)
    return step


def _archive_report_log(kube: Kube, store: RunStore, namespace: str, job_name: str, logger: Logger) -> None:
    try:
        pods = gk.pods_of_job(kube, namespace, job_name)
        text = "".join(gk.format_logs(p["metadata"]["name"], gk.pod_logs(kube, namespace, p)) for p in pods)
        store.write_log(COMPONENT_REPORT, text)
    except Exception:
        logger.exception("could not archive the log of %s/%s", namespace, job_name)


def write_grading(
    kube: Kube, namespace: str, name: str, changes: list[st.Change], extra: dict[str, Any]
) -> None:
    """Apply the `Graded` (and terminal) changes and `extra` status fields; post Events."""
    if not changes and not extra:
        return
    written: list[st.Change] = []
    refs: list[Body] = []

    def mutate(run: Body) -> Body | None:
        old = dict(run.get("status") or {})
        conds = list(old.get("conditions") or [])
        if not grading_open(conds):
            return None  # someone else finished it meanwhile
        generation = run["metadata"].get("generation")
        now = st.now_iso()
        new_conds, transitions = st.apply_changes(conds, changes, generation, now)
        new = {**old, **extra, "conditions": new_conds, "observedGeneration": generation}
        new["phase"] = st.derive_phase(new_conds)
        if st.is_terminal(new_conds) and not new.get("completionTime"):
            new["completionTime"] = now
        if new == old:
            return None
        written[:] = transitions
        refs[:] = [run]
        return new

    if kube.update_status(namespace, name, mutate) is not None and written:
        post_events(refs[0], written)


# --- handlers ---------------------------------------------------------------------------------


@kopf.on.resume(API_GROUP, API_VERSION, BENCHRUN_PLURAL, id="grading-mark")
@kopf.on.create(API_GROUP, API_VERSION, BENCHRUN_PLURAL, id="grading-mark")
def on_run_created(body: kopf.Body, memo: Any, **_: Any) -> None:
    """Registered after the workspace reconcile: the run is Accepted (or refused) by now."""
    if not grading_of(memo).enabled:
        return
    meta = body["metadata"]
    run = memo.kube.get_run(meta["namespace"], meta["name"])
    if run is None:
        return
    conds = _conds(run)
    if st.get_condition(conds, COND_ACCEPTED) is None and not st.is_terminal(conds):
        raise kopf.TemporaryError("waiting for the run to be accepted", delay=1)
    mark_graded(memo.kube, meta["namespace"], meta["name"])


def _finished_and_open(status: kopf.Status, memo: Any, **_: Any) -> bool:
    conds = list(status.get("conditions") or [])
    return grading_of(memo).enabled and grading_open(conds) and gr.agent_finish(conds) is not None


@kopf.on.event(API_GROUP, API_VERSION, BENCHRUN_PLURAL, when=_finished_and_open)
def on_run_finished(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    if type == "DELETED":
        return
    meta = body["metadata"]
    advance(memo.kube, memo.config, grading_of(memo), meta["namespace"], meta["name"], logger=logger)


@kopf.on.event("batch", "v1", "jobs", labels=REPORT_JOB_LABELS)
def on_report_job(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    grading = grading_of(memo)
    run_name = (body["metadata"].get("labels") or {}).get(LABEL_RUN_NAME)
    if type == "DELETED" or not grading.enabled or not run_name:
        return
    advance(memo.kube, memo.config, grading, body["metadata"]["namespace"], run_name, logger=logger)


def _being_graded(status: kopf.Status, memo: Any, **_: Any) -> bool:
    conds = list(status.get("conditions") or [])
    return grading_of(memo).enabled and (needs_graded_mark(conds) or grading_open(conds))


@kopf.timer(API_GROUP, API_VERSION, BENCHRUN_PLURAL, id="grading-resync", interval=RESYNC_S,
            initial_delay=RESYNC_S, when=_being_graded)  # fmt: skip
def grading_resync(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    """Safety net: mark, re-process unfinished submissions, and advance the end of the run."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    grading = grading_of(memo)
    run = memo.kube.get_run(ns, name)
    if run is None:
        return
    if needs_graded_mark(_conds(run)):
        mark_graded(memo.kube, ns, name)
    resync_submissions(memo.kube, memo.config, grading, run, logger)
    advance(memo.kube, memo.config, grading, ns, name, logger=logger)
