"""Everything the operator does with a BenchRun, from creation to the end of the run; `register`
adds the kopf handlers to a registry (`registry.build_registry`).

The workspace:
- BenchRun create/resume: validate, get-or-create every child (idempotent), then the first
  status in one write (`Accepted`, `Graded=False` with grading on, the new Job's state).
- Job / Pod events (label-selected), Kueue's Workloads of the workspace Jobs (`queueing`) and
  the Job controller's quota FailedCreate events: recompute the run's conditions from what is
  observed and write them (status only, through `status_writer.write_status`, which posts an
  Event for a transition a user acts on or waits for).
- With a queueing limit (`--queue-timeout`): a run Kueue has not admitted in time ends `Failed`
  (`NotScheduled`), its Workload deactivated.
- BenchRun delete: the finalizer (bounded; see `finalizer.py`).

The end of the run, with grading on (`OperatorConfig.grading`): an accepted run gets
`Graded=False` (`AwaitingAgent`) with its first status, and the terminal condition then waits for grading
(`status.observe` leaves it to this module). When the workspace Job has finished
(`AgentFinished`, for any reason):

1. wait for in-flight evaluations, at most `A2RL_GRADING_DRAIN_TIMEOUT` seconds after the agent
   finished (`Graded=False`, `WaitingForEvaluations`);
2. write `run.json` (the report's view of the run), archive the workspace pod's container logs
   to `logs/agent.log` and `logs/recorder.log`, create the report Job (`Reporting`);
3. when the report Job has finished: archive its log (`logs/report.log`), read `report.json`,
   set `status.report` (URI + summary), `Graded=True` (`ReportWritten`) and the terminal
   condition the agent's end implies (`Succeeded`: `AgentCompleted` or `BudgetExhausted`;
   `Failed`: `AgentFailed`). A failed report Job ends the run `Failed` (`ReportFailed`).

Steps are recomputed from what is observed; they run on BenchRun events, report Job events, and
a resync timer that also re-processes unfinished submissions
(`benchsubmission.resync_submissions`).

Handlers return None: kopf keeps its progress in `a2rl.dev/` annotations, never in status.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from datetime import UTC, datetime
from typing import Any

import kopf
from a2rl_tasks import TASKS, get_task
from pydantic import ValidationError

from a2rl.api.benchrun import BenchRunSpec, BenchRunStatus, ReportRef
from a2rl.constants import (
    ANNOTATION_FORCE_FINALIZE,
    API_GROUP,
    API_VERSION,
    BASELINE_INDEX,
    BENCHRUN_PLURAL,
    COMPONENT_AGENT,
    COMPONENT_GATEWAY,
    COMPONENT_REPORT,
    COND_ACCEPTED,
    COND_AGENT_FINISHED,
    COND_GRADED,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_RUN_NAME,
    LABEL_RUN_UID,
    MANAGED_BY,
)
from a2rl.records.report import ReportRecord
from a2rl.store.layout import RunLayout
from a2rl.store.scoped import report_user
from a2rl_operator import dns_pins, driver_usage, queueing, store_access
from a2rl_operator import status as st
from a2rl_operator.benchsubmission import resync_submissions
from a2rl_operator.config import OperatorConfig
from a2rl_operator.finalizer import Decision, decide
from a2rl_operator.fingerprint import Deferred, SeenStates, job_fingerprint, pod_fingerprint
from a2rl_operator.grading import decisions as gr
from a2rl_operator.grading import kube as gk
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.grading.store import RunStore
from a2rl_operator.kube import Kube, NameConflictError, NamespaceTerminatingError, owned_by, plain
from a2rl_operator.manifests import parse_spec, workspace_children
from a2rl_operator.manifests.common import workspace_name
from a2rl_operator.manifests.gateway import GATEWAY_CONTAINER, has_gateway, new_gateway_token
from a2rl_operator.manifests.grading_network import UrlPeerError, grading_network_policy, url_peer
from a2rl_operator.manifests.job import AGENT_CONTAINER, RECORDER_CONTAINER, workspace_job
from a2rl_operator.manifests.network import GatewayError, parse_gateway
from a2rl_operator.manifests.report_job import report_job, report_job_name
from a2rl_operator.manifests.secret import report_store_secret, store_uri
from a2rl_operator.metrics import timed
from a2rl_operator.retention import retain
from a2rl_operator.run_tracing import now_ns, operator_tracing, record_root_span, record_run_span
from a2rl_operator.status_writer import RUNS, ChangesFor, run_ref, write_status
from a2rl_operator.watched import WatchedChildren

Body = dict[str, Any]
Logger = logging.Logger | logging.LoggerAdapter[Any]
CHILD_LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_AGENT}
QUOTA_EVENT_REASON = "FailedCreate"  # the Job controller's, when a ResourceQuota refuses a pod
QUOTA_EVENT_FIELDS = f"involvedObject.kind=Job,reason={QUOTA_EVENT_REASON}"  # the Events watch's selector
REPORT_JOB_LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_REPORT}
RESYNC_S = 60.0
RETENTION_RETRY_S = 5.0
PIN_RETRY_S = 10.0
#: The last state of each child (Job, Pod, Workload) the run's conditions were computed from.
_SEEN = SeenStates()
#: Runs whose children changed before their first status was written.
_DEFERRED = Deferred()
#: The workspace Jobs and pods as their watches last delivered them (read by `refresh`).
_WATCHED = WatchedChildren()


# --- validation that the CRD schema cannot express -------------------------------------------


def problem(body: Body, config: OperatorConfig) -> tuple[str, str] | None:
    """(reason, message) when the run cannot be accepted; None when it can."""

    try:
        spec = parse_spec(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return st.R_INVALID_SPEC, f"spec.{where}: {first['msg']}"
    if spec.task not in TASKS:
        return st.R_UNKNOWN_TASK, f"spec.task: unknown task {spec.task!r} (known: {', '.join(sorted(TASKS))})"
    if spec.llm_gateway:
        try:
            parse_gateway(spec.llm_gateway)
        except GatewayError as exc:
            return st.R_INVALID_SPEC, f"spec.llmGateway: {exc}"
    if spec.evaluation.judge is not None:  # the eval pods' NetworkPolicy must be able to allow it
        try:
            url_peer(spec.evaluation.judge.base_url, body["metadata"]["namespace"])
        except UrlPeerError as exc:
            return st.R_INVALID_SPEC, f"spec.evaluation.judge.baseUrl: {exc}"
    if store_uri(spec, config) is None:
        return st.R_NO_STORE, "spec.store.uri is unset and the operator has no default store (--store-uri)"
    return None


# --- BenchRun lifecycle ----------------------------------------------------------------------


def reconcile(body: Body, kube: Kube, config: OperatorConfig, logger: Logger) -> None:
    """Create whatever is missing for the run (safe to call any number of times)."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    if ns in kube.terminating:
        return  # everything in it is going: nothing to create, no status to write
    conds = st.run_conditions(body)
    accepted = st.get_condition(conds, COND_ACCEPTED)
    done = st.is_terminal(conds) or st.get_condition(conds, COND_AGENT_FINISHED) is not None
    if done or (accepted is not None and accepted.get("status") == st.FALSE):
        refresh(kube, ns, name, config=config)  # never re-create the children of a finished run
        return
    rejected = problem(body, config)
    if rejected is not None:
        reason, message = rejected
        logger.info("BenchRun %s/%s not accepted: %s", ns, name, message)
        write_status(kube, ns, name, lambda _c: st.rejection(reason, message))
        return
    uid = meta["uid"]
    _DEFERRED.begin(uid)  # the children's events until the first status is written: `refresh` after it
    try:
        existed = accept(body, kube, config, logger)
    finally:
        _DEFERRED.end(uid)
    # The Job existed (a resumed run), or its pod's events came before this first status and were
    # left alone (`_refresh_on_change`, `refresh`): observe it all.
    if existed is not None and (_DEFERRED.take(uid) or existed):
        refresh(kube, ns, name, config=config)


def accept(body: Body, kube: Kube, config: OperatorConfig, logger: Logger) -> bool | None:
    """Create every missing child of a valid run, then write its first status (`Accepted`).
    Returns whether the workspace Job existed already; None: not accepted (a name conflict, its
    namespace being deleted)."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    started_ns = now_ns()
    access = store_access.run_credentials(body, parse_spec(body), config)
    run = body  # the freshest read of the run (the first status write is guarded by it)
    if access.credentials is not None:  # before the Secret: the finalizer must know to remove the user
        annotation = store_access.store_user_annotation(access)
        run = kube.patch_run(ns, name, {"metadata": {"annotations": annotation}})
    created: list[str] = []
    new_job: Body | None = None
    spec = parse_spec(body)
    try:
        # The pod has no DNS: the names it uses are resolved here, the store's before anything is
        # created, the gateway Service's once it exists.
        try:
            pins = dns_pins.store_pins(config)
        except dns_pins.PinError as exc:
            raise kopf.TemporaryError(f"the workspace pod's names: {exc}", delay=PIN_RETRY_S) from exc
        for manifest in workspace_children(body, config, access.credentials, new_gateway_token()):
            if kube.ensure(manifest, meta["uid"]):
                created.append(f"{manifest['kind']} {manifest['metadata']['name']}")
        try:
            services, notes = dns_pins.service_pins(body, spec, config, kube)
        except dns_pins.PinError as exc:
            raise kopf.TemporaryError(f"the workspace pod's names: {exc}", delay=PIN_RETRY_S) from exc
        for note in notes:
            logger.warning("BenchRun %s/%s: %s", ns, name, note)
        job = workspace_job(body, spec, config, pins + services)
        new_job = kube.create_owned(job, meta["uid"])
        if new_job is not None:
            created.append(f"Job {job['metadata']['name']}")
    except NameConflictError as exc:
        conflict = str(exc)
        write_status(kube, ns, name, lambda _c: st.rejection(st.R_NAME_CONFLICT, conflict))
        return None
    except NamespaceTerminatingError:
        logger.info("BenchRun %s/%s: its namespace is being deleted; nothing created", ns, name)
        return None
    if any(c.startswith("Secret ") for c in created):
        level = logging.WARNING if access.failed else logging.INFO
        logger.log(level, "BenchRun %s/%s: %s", ns, name, access.reason)
        if access.failed:  # the admin has something to fix: an Event too
            kube.post_event(run_ref(body), "Warning", store_access.R_NOT_SCOPED, access.reason)
    if created:
        logger.info("BenchRun %s/%s: created %s", ns, name, ", ".join(created))
        try:  # best effort: a store without credentials or a flaky one never fails the reconcile
            tracing = operator_tracing(store_uri(parse_spec(body), config))
            attrs: dict[str, str | int] = {"a2rl.created": ", ".join(created)}
            record_run_span(
                tracing, body, "operator.reconcile", start_ns=started_ns, end_ns=now_ns(), attributes=attrs
            )
        except Exception as exc:
            logger.warning("BenchRun %s/%s: no reconcile span recorded: %s", ns, name, exc)
    write_first_status(kube, config, run, new_job)
    return new_job is None


def first_changes(config: OperatorConfig, new_job: Body | None, queue_name: str | None) -> ChangesFor:
    """An accepted run's first status, written once its children exist, in one write: `Accepted`,
    with grading on `Graded=False` (`AwaitingAgent`), and what `new_job` (the workspace Job as
    just created; None when it existed) implies. Until it is written, the Job, Pod and Event
    watchers leave the run alone (`refresh`), so `Accepted` leads the condition list."""

    def changes(conds: list[st.Cond]) -> list[st.Change]:
        out = [st.accepted()]
        after = st.apply_changes(conds, out, None, st.now_iso())[0]
        if config.grading.enabled and needs_graded_mark(after):
            out.append(gr.graded_awaiting())
            after = st.apply_changes(after, out[-1:], None, st.now_iso())[0]
        if new_job is not None:
            obs = st.Observation(job=new_job, pod=None, queue_name=queue_name, observed_at=st.now_iso())
            out += st.observe(obs, after)
        return out

    return changes


def write_first_status(kube: Kube, config: OperatorConfig, run: Body, new_job: Body | None) -> None:
    """`first_changes`, with `run` as the first read; the new Job's state is marked seen, so its
    watch event (the same state) reads and writes nothing more."""
    meta = run["metadata"]
    job_uid = None
    if new_job is not None:  # as the API server created it: it has its uid
        job_uid = new_job["metadata"]["uid"]
        _SEEN.is_new(job_uid, job_fingerprint(new_job))
    changes = first_changes(config, new_job, (run.get("spec") or {}).get("queueName"))
    try:
        write_status(kube, meta["namespace"], meta["name"], changes, run=run)
    except BaseException:
        if job_uid:
            _SEEN.forget(job_uid)  # not written after all: the Job's next event must be observed
        raise


def refresh(
    kube: Kube,
    namespace: str,
    name: str,
    quota_message: str | None = None,
    *,
    config: OperatorConfig | None = None,
) -> list[st.Change]:
    """Mirror the workspace Job and its pod into the run's conditions; with `config`, a stack
    run's driver usage too (`driver_usage`: `driverTokens`, `driverCostUSD`, the budget's refusal)."""
    if namespace in kube.terminating:
        return []  # its namespace is being deleted: no reads, no status, no Events
    run = RUNS.get(namespace, name) or kube.get_run(namespace, name)
    if run is None or run["metadata"].get("deletionTimestamp"):
        return []  # a run being deleted gets no new conditions
    if st.get_condition(st.run_conditions(run), COND_ACCEPTED) is None:
        # Its reconcile writes the first status (`write_first_status`), then looks again.
        _DEFERRED.add(run["metadata"]["uid"])
        run = kube.get_run(namespace, name)
        if run is None or st.get_condition(st.run_conditions(run), COND_ACCEPTED) is None:
            return []
        _DEFERRED.take(run["metadata"]["uid"])
    uid = run["metadata"]["uid"]
    queue_name = (run.get("spec") or {}).get("queueName")
    job_name = workspace_name(run)
    pod, job = _WATCHED.children(
        namespace,
        uid,
        job_name,
        queued=bool(queue_name),
        read_pod=lambda: kube.newest_pod(namespace, uid, COMPONENT_AGENT),
        read_job=lambda: kube.get_job(namespace, job_name),
    )
    summary = driver_usage.read_summary(run, config) if config is not None else None
    workload = None
    if job is not None and queue_name:  # Kueue's Workload of the Job: why it waits, an eviction
        workload = queueing.find_workload(kube.custom, namespace, job["metadata"]["uid"])
    start = st.run_status(run).start_time
    started_at = st.now_iso(start) if start is not None else None
    clock = st.budget_started(st.run_conditions(run), pod, started_at)
    if (
        workload is not None
        and job is not None
        and (job.get("spec") or {}).get("suspend")
        and queueing.is_active(workload)
        and clock
    ):  # evicted after its budget clock started: the run ends Preempted, Kueue must never restart it
        queueing.deactivate(kube.custom, workload)
    obs = st.Observation(job=job, pod=pod, queue_name=queue_name, quota_message=quota_message,
                         driver_refused=driver_usage.refused_reason(summary), workload=workload,
                         started_at=started_at, observed_at=st.now_iso(), budget_started=clock)  # fmt: skip
    return write_status(
        kube,
        namespace,
        name,
        lambda conds: st.observe(obs, conds),
        edit=lambda _run, status: queueing.with_queue_stats(
            driver_usage.with_usage(status, summary), workload
        ),
        pod=pod,
        run=run,
    )


def on_benchrun(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    reconcile(plain(body), memo.kube, memo.config, logger)


def _in_flight(body: kopf.Body, **_: Any) -> bool:
    return not st.is_terminal(st.run_conditions(body))


def _waiting_for_admission(body: kopf.Body, **_: Any) -> bool:
    return queueing.waiting_for_admission(st.run_conditions(body))


def enforce_queue_limit(
    kube: Kube, config: OperatorConfig, namespace: str, name: str, logger: Logger
) -> None:
    """End a run Kueue has not admitted within the queueing limit (`--queue-timeout`): its
    Workload deactivated first (Kueue must never start it later), then `Failed` (`NotScheduled`)."""
    run = kube.get_run(namespace, name)
    if run is None or run["metadata"].get("deletionTimestamp"):
        return
    now = datetime.now(UTC)
    if not queueing.not_scheduled(st.run_conditions(run), now, config.queue_timeout_s):
        return
    job = kube.get_job(namespace, workspace_name(run))
    if job is None or not (job.get("spec") or {}).get("suspend"):
        return  # admitted meanwhile: the next observation says so
    workload = queueing.find_workload(kube.custom, namespace, job["metadata"]["uid"])
    if workload is not None:
        queueing.deactivate(kube.custom, workload)
    logger.warning("BenchRun %s/%s: not admitted within %s s; Failed (NotScheduled)",
                   namespace, name, config.queue_timeout_s)  # fmt: skip
    write_status(
        kube,
        namespace,
        name,
        lambda conds: [st.Change(*c) for c in queueing.not_scheduled(conds, now, config.queue_timeout_s)],
    )


def queue_limit(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    meta = body["metadata"]
    enforce_queue_limit(memo.kube, memo.config, meta["namespace"], meta["name"], logger)


def resync(body: kopf.Body, memo: Any, **_: Any) -> None:
    """Safety net for missed watch events (a restart, a dropped watch): re-observe slowly."""
    meta = body["metadata"]
    refresh(memo.kube, meta["namespace"], meta["name"], config=memo.config)


def on_benchrun_delete(body: kopf.Body, meta: kopf.Meta, memo: Any, logger: Logger, **_: Any) -> None:
    """Artifact retention (the final record into the store), bounded by the finalizer timeout
    and skipped at once with the `a2rl.dev/force-finalize` annotation."""
    config: OperatorConfig = memo.config
    _DEFERRED.take(meta.uid or "")  # a run deleted before its first status: nothing to look at
    decision = decide(dict(meta.annotations), meta.get("deletionTimestamp"), datetime.now(UTC),
                      config.finalizer_timeout_s)  # fmt: skip
    if decision is Decision.RELEASE:
        logger.warning("releasing BenchRun %s/%s without retention (forced or timed out after %ss)",
                       meta.namespace, meta.name, config.finalizer_timeout_s)  # fmt: skip
        return
    try:
        where = retain(plain(body), config)
        revoked = store_access.revoke(plain(body), config)  # the run's own store users go with it
    except Exception as exc:
        raise kopf.TemporaryError(
            st.one_line(
                f"artifact retention failed, retrying (the finalizer lets go after "
                f"{config.finalizer_timeout_s}s or with {ANNOTATION_FORCE_FINALIZE}=true): {exc}"
            ),
            delay=RETENTION_RETRY_S,
        ) from exc
    # Records in the object store are kept: they are never deleted with the BenchRun.
    logger.info("BenchRun %s/%s deleted; final record %s; store users %s", meta.namespace, meta.name,
                where or "not kept", f"{', '.join(revoked)} removed" if revoked else "none")  # fmt: skip


# --- children -------------------------------------------------------------------------------


def _owner_run(obj: kopf.Body) -> tuple[str, str] | None:
    labels = obj["metadata"].get("labels") or {}
    name = labels.get(LABEL_RUN_NAME)
    if not name or not labels.get(LABEL_RUN_UID):
        return None
    return obj["metadata"]["namespace"], name


def _refresh_on_change(body: kopf.Body, memo: Any, type: str | None, fingerprint: Hashable) -> None:
    """Re-observe the owning run when the child changed in a way its conditions depend on."""
    uid = body["metadata"].get("uid") or ""
    if type == "DELETED":
        _SEEN.forget(uid)
        return
    owner = _owner_run(body)
    if owner is None or not _SEEN.is_new(uid, fingerprint):
        return
    run_uid = (body["metadata"].get("labels") or {}).get(LABEL_RUN_UID) or ""
    if _DEFERRED.defer_if_writing(run_uid):
        return  # its reconcile is writing the first status, and observes the run right after
    _refresh_observed(memo, owner, uid)


def _refresh_observed(memo: Any, owner: tuple[str, str], uid: str) -> None:
    """Refresh the run `owner` after a change of the object `uid` was marked seen; a failed refresh
    forgets that mark, so the next event of the object is not skipped."""
    try:
        refresh(memo.kube, *owner, config=memo.config)
    except BaseException:
        _SEEN.forget(uid)  # not observed after all: the next event must not be skipped
        raise


async def on_run_seen(body: kopf.Body, type: str | None, **_: Any) -> None:
    """Keep the run's newest state for `refresh` (on kopf's event loop: no thread for a dict write)."""
    RUNS.saw(plain(body), type)


def on_job(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    _WATCHED.saw_job(plain(body), type)
    _refresh_on_change(body, memo, type, job_fingerprint(body))


def on_pod(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    _WATCHED.saw_pod(plain(body), type)
    _refresh_on_change(body, memo, type, pod_fingerprint(body))


def on_workload(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    """Kueue's Workload of a run's workspace Job changed (its reason for waiting, an eviction):
    re-observe the run."""
    uid = body["metadata"].get("uid") or ""
    if type == "DELETED":
        _SEEN.forget(uid)
        return
    job_name = queueing.job_of(body)
    if job_name is None or not _SEEN.is_new(uid, queueing.workload_fingerprint(body)):
        return
    job = memo.kube.get_job(body["metadata"]["namespace"], job_name)
    labels = ((job or {}).get("metadata") or {}).get("labels") or {}
    owner = _owner_run(job) if job is not None else None
    if (
        owner is None
        or labels.get(LABEL_MANAGED_BY) != MANAGED_BY
        or labels.get(LABEL_COMPONENT) != COMPONENT_AGENT
    ):
        return
    _refresh_observed(memo, owner, uid)


def _is_quota_event(body: kopf.Body, **_: Any) -> bool:
    # The watch asks for these fields already (`QUOTA_EVENT_FIELDS`); checked again all the same.
    involved = body.get("involvedObject") or {}
    return (
        body.get("reason") == QUOTA_EVENT_REASON
        and involved.get("kind") == "Job"
        and st.is_quota_message(str(body.get("message") or ""))
    )


def on_quota_event(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    """A ResourceQuota refused the workspace pod: say so, and wait (the Job controller retries)."""
    if type == "DELETED":
        return
    involved = body["involvedObject"]
    job = memo.kube.get_job(involved["namespace"], involved["name"])
    if job is None or (job["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
        return
    owner = _owner_run(job)
    if owner is not None:
        refresh(
            memo.kube, *owner, quota_message=str(body.get("message") or "exceeded quota"), config=memo.config
        )


# --- the end of the run (grading) ------------------------------------------------------------


def _conds(run: Body | kopf.Body) -> list[st.Cond]:
    return st.run_conditions(run)


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
        graded is not None
        and graded.get("status") != st.TRUE
        and graded.get("reason") not in (gr.R_REPORT_FAILED, queueing.R_NOT_SCHEDULED)
    )


def mark_graded(kube: Kube, namespace: str, name: str) -> None:
    """`Graded=False` (`AwaitingAgent`) on an accepted, unfinished run without it."""
    write_status(
        kube, namespace, name, lambda conds: [gr.graded_awaiting()] if needs_graded_mark(conds) else []
    )


# --- the steps ----------------------------------------------------------------------------------


def prepare_report(
    kube: Kube, run: Body, store: RunStore, subs: list[Body], *, config: OperatorConfig, logger: Logger
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
        evaluator_version=get_task(spec.task, config.grading.run_eval_env(spec)).evaluator_version,
        agent_exit_code=gr.container_exit_code(pod, AGENT_CONTAINER),
    )
    store.write_run_json(doc)
    if pod is not None:
        try:
            logs = gk.pod_logs(kube, meta["namespace"], pod, [RECORDER_CONTAINER, AGENT_CONTAINER])
            for container, text in logs.items():
                store.write_log(container, text)
            if has_gateway(spec) and AGENT_CONTAINER in logs:  # a stack run: its event stream
                store.write_agent_trajectory(logs[AGENT_CONTAINER])
        except Exception:
            logger.exception(
                "BenchRun %s/%s: could not archive the workspace logs", meta["namespace"], meta["name"]
            )
    gateway = (
        kube.newest_pod(meta["namespace"], meta["uid"], COMPONENT_GATEWAY) if has_gateway(spec) else None
    )
    if gateway is not None:  # a stack run: its driver gateway's log (no secrets: it redacts them)
        try:
            text = gk.pod_logs(kube, meta["namespace"], gateway, [GATEWAY_CONTAINER])[GATEWAY_CONTAINER]
            store.write_log(COMPONENT_GATEWAY, text)
        except Exception:
            logger.exception(
                "BenchRun %s/%s: could not archive the gateway log", meta["namespace"], meta["name"]
            )


def advance(kube: Kube, config: OperatorConfig, namespace: str, name: str, *, logger: Logger) -> gr.Step:
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
    job = owned_by(kube.get_job(namespace, job_name), meta["uid"])
    step = gr.end_step(conds, subs, job, gr.now_utc(), config.grading.drain_timeout_s)
    report: ReportRecord | None = None
    if step.kind is gr.StepKind.START_REPORT:
        prepare_report(kube, run, store, subs, config=config, logger=logger)
        try:
            try:  # the report pod is under the run's grading NetworkPolicy too (no eval Job may exist)
                gk.ensure_grading_policy(kube, config, run, spec)
            except UrlPeerError:  # the report calls no judge: the policy without those URLs
                kube.ensure(grading_network_policy(run, [], config), meta["uid"])
            # Its own store keys: the run's records in, report/ out (never the operator's, where
            # the store can scope them).
            access = store_access.report_credentials(run, spec, config)
            if access.credentials is None:
                logger.warning("BenchRun %s/%s: %s", namespace, name, access.reason)
            kube.ensure(report_store_secret(run, spec, config, access.credentials), meta["uid"])
            pins = gk.grading_pins(kube, config, run, spec, logger)
            manifest = report_job(run, spec, uri, config.grading, pins=pins, pod_defaults=config.pod_defaults)
            if kube.ensure(manifest, meta["uid"]):
                logger.info("BenchRun %s/%s: created report Job %s", namespace, name, job_name)
        except NamespaceTerminatingError:
            logger.info("BenchRun %s/%s: its namespace is being deleted; no report Job", namespace, name)
            return gr.Step(gr.StepKind.NOTHING)
        except dns_pins.PinError as exc:
            logger.warning("BenchRun %s/%s: no report Job yet (next resync): %s", namespace, name, exc)
            return gr.Step(gr.StepKind.NOTHING)
    elif step.kind in (gr.StepKind.FINISH, gr.StepKind.REPORT_FAILED):
        _archive_report_log(kube, store, namespace, job_name, logger)
        _revoke_quietly(run, spec, config, report_user(meta["uid"]), logger)
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
    ref = gr.report_ref(report, store.report_uri()) if report is not None else None
    write_grading(kube, namespace, name, changes, ref)
    return step


def _revoke_quietly(run: Body, spec: BenchRunSpec, config: OperatorConfig, user: str, logger: Logger) -> None:
    """Remove a grading user whose pod has finished (best effort: the finalizer removes what is left)."""
    try:
        store_access.revoke_grading_user(run, spec, config, user)
    except Exception as exc:
        logger.warning("BenchRun %s/%s: store user %s not removed yet: %s",
                       run["metadata"]["namespace"], run["metadata"]["name"], user, exc)  # fmt: skip


def _archive_report_log(kube: Kube, store: RunStore, namespace: str, job_name: str, logger: Logger) -> None:
    try:
        pods = gk.pods_of_job(kube, namespace, job_name)
        text = "".join(gk.format_logs(p["metadata"]["name"], gk.pod_logs(kube, namespace, p)) for p in pods)
        store.write_log(COMPONENT_REPORT, text)
    except Exception:
        logger.exception("could not archive the log of %s/%s", namespace, job_name)


def write_grading(
    kube: Kube, namespace: str, name: str, changes: list[st.Change], report: ReportRef | None = None
) -> None:
    """Apply the `Graded` (and terminal) changes and `status.report`; post Events."""
    if not changes and report is None:
        return

    def edit(_run: Body, status: BenchRunStatus) -> BenchRunStatus:
        return status if report is None else status.model_copy(update={"report": report})

    # Nothing is written once the grading is closed: someone else finished it meanwhile.
    write_status(kube, namespace, name, lambda _c: changes, edit=edit, only_if=grading_open)


# --- handlers of the end of the run ------------------------------------------------------------


def _grading(memo: Any) -> GradingConfig:
    config: OperatorConfig = memo.config
    return config.grading


def _finished_and_open(body: kopf.Body, memo: Any, **_: Any) -> bool:
    conds = _conds(body)
    return _grading(memo).enabled and grading_open(conds) and gr.agent_finish(conds) is not None


def on_run_finished(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    if type == "DELETED":
        return
    meta = body["metadata"]
    advance(memo.kube, memo.config, meta["namespace"], meta["name"], logger=logger)


def on_report_job(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    run_name = (body["metadata"].get("labels") or {}).get(LABEL_RUN_NAME)
    if type == "DELETED" or not _grading(memo).enabled or not run_name:
        return
    advance(memo.kube, memo.config, body["metadata"]["namespace"], run_name, logger=logger)


def _being_graded(body: kopf.Body, memo: Any, **_: Any) -> bool:
    conds = _conds(body)
    return _grading(memo).enabled and (needs_graded_mark(conds) or grading_open(conds))


def grading_resync(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    """Safety net: mark, re-process unfinished submissions, and advance the end of the run."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    run = memo.kube.get_run(ns, name)
    if run is None:
        return
    if needs_graded_mark(_conds(run)):
        mark_graded(memo.kube, ns, name)
    resync_submissions(memo.kube, memo.config, run, logger)
    advance(memo.kube, memo.config, ns, name, logger=logger)


# --- registration -----------------------------------------------------------------------------


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Add the BenchRun handlers to `registry`. One create/resume handler: each more would cost
    every run a PATCH of kopf's progress annotations."""
    run = (API_GROUP, API_VERSION, BENCHRUN_PLURAL)
    # First: every event's run kept for `refresh` (kopf calls event handlers before the others).
    kopf.on.event(*run, id="watched-runs", registry=registry)(on_run_seen)
    kopf.on.create(*run, registry=registry)(timed(on_benchrun))
    kopf.on.resume(*run, registry=registry)(timed(on_benchrun))
    kopf.timer(*run, interval=RESYNC_S, initial_delay=RESYNC_S, when=_in_flight, registry=registry)(
        timed(resync)
    )
    if config.queue_timeout_s is not None:  # the queueing limit, checked a few times within it
        every = min(30.0, max(1.0, config.queue_timeout_s / 4))
        kopf.timer(*run, id="queue-limit", interval=every, when=_waiting_for_admission,
                   registry=registry)(timed(queue_limit))  # fmt: skip
    kopf.on.delete(*run, registry=registry)(timed(on_benchrun_delete))
    kopf.on.event("batch", "v1", "jobs", labels=CHILD_LABELS, registry=registry)(timed(on_job))
    kopf.on.event("", "v1", "pods", labels=CHILD_LABELS, registry=registry)(timed(on_pod))
    kopf.on.event("", "v1", "events", when=_is_quota_event, registry=registry)(timed(on_quota_event))
    # Kueue's Workloads (where Kueue is installed; kopf serves the resource once its CRD exists).
    workloads = (queueing.WORKLOAD_GROUP, queueing.WORKLOAD_VERSION, queueing.WORKLOAD_PLURAL)
    kopf.on.event(*workloads, registry=registry)(timed(on_workload))
    # The end of the run (no-ops while grading is off).
    kopf.on.event(*run, when=_finished_and_open, registry=registry)(timed(on_run_finished))
    kopf.on.event("batch", "v1", "jobs", labels=REPORT_JOB_LABELS, registry=registry)(timed(on_report_job))
    resync_s = config.grading.resync_s
    kopf.timer(*run, id="grading-resync", interval=resync_s, initial_delay=resync_s, when=_being_graded,
               registry=registry)(timed(grading_resync))  # fmt: skip
