"""kopf handlers: BenchRun → children, and children's state → BenchRun status.

- BenchRun create/resume: validate, get-or-create every child (idempotent), mark Accepted.
- Job / Pod events (label-selected) and the Job controller's quota FailedCreate events:
  recompute the run's conditions from what is observed, write them (status only), and post one
  Kubernetes Event per transition.
- BenchRun delete: the finalizer (bounded; see `finalizer.py`).

Handlers return None: kopf keeps its progress in `a2rl.dev/` annotations, never in status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from a2rl_tasks import TASKS
from pydantic import ValidationError

from a2rl.constants import (
    ANNOTATION_FORCE_FINALIZE,
    API_GROUP,
    API_VERSION,
    BENCHRUN_KIND,
    BENCHRUN_PLURAL,
    COMPONENT_AGENT,
    COND_ACCEPTED,
    COND_AGENT_FINISHED,
    COND_AGENT_RUNNING,
    FINALIZER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_RUN_NAME,
    LABEL_RUN_UID,
    MANAGED_BY,
)
from a2rl.tracing.context import run_trace_annotation_patch
from a2rl_operator import status as st
from a2rl_operator.config import OperatorConfig
from a2rl_operator.finalizer import Decision, decide
from a2rl_operator.fingerprint import SeenStates, job_fingerprint, pod_fingerprint
from a2rl_operator.kube import Kube, NameConflictError, NamespaceTerminatingError
from a2rl_operator.manifests import children, parse_spec
from a2rl_operator.manifests.common import workspace_name
from a2rl_operator.manifests.grading_network import UrlPeerError, url_peer
from a2rl_operator.manifests.network import GatewayError, parse_gateway
from a2rl_operator.manifests.secret import store_uri
from a2rl_operator.retention import retain
from a2rl_operator.run_tracing import now_ns, operator_tracing, record_run_span

Body = dict[str, Any]
Logger = logging.Logger | logging.LoggerAdapter[Any]
CHILD_LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_AGENT}
RESYNC_S = 60.0
RETENTION_RETRY_S = 5.0
MAX_WORKERS = 16  # threads for sync handlers (and pooled API connections)


def configure(settings: kopf.OperatorSettings) -> None:
    """Our names for kopf's state: finalizer and annotations under the a2rl.dev group."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    # Only our explicit Events (and kopf's warnings) reach users; no "Handler succeeded" noise.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = MAX_WORKERS


@kopf.on.startup()
def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure(settings)


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


# --- status writes and events ----------------------------------------------------------------


def _ref(run: Body) -> Body:
    meta = run["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": BENCHRUN_KIND,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
    }


def _event_reason(change: st.Change) -> str:
    return "Accepted" if change.type == COND_ACCEPTED and change.status == st.TRUE else change.reason


def post_events(run: Body, transitions: list[st.Change]) -> None:
    seen: set[str] = set()
    for change in transitions:
        if change.type == COND_AGENT_RUNNING and change.status == st.FALSE:
            continue  # said by AgentFinished
        reason = _event_reason(change)
        if reason in seen:
            continue
        seen.add(reason)
        message = st.one_line(f"{change.type}={change.status}: {change.message}")
        kopf.event(cast(Any, _ref(run)), type=st.event_type(change), reason=reason, message=message)


def write_changes(
    kube: Kube,
    namespace: str,
    name: str,
    changes_for: Callable[[list[st.Cond]], list[st.Change]],
    *,
    pod: Body | None = None,
    run: Body | None = None,
) -> list[st.Change]:
    """Apply `changes_for(conditions)` to the run's status; returns the transitions written.
    `run`, when given, is a fresh read used for the first attempt (saves a GET)."""
    written: list[st.Change] = []
    refs: list[Body] = []

    def mutate(run: Body) -> Body | None:
        old = dict(run.get("status") or {})
        conds = list(old.get("conditions") or [])
        generation = run["metadata"].get("generation")
        now = st.now_iso()
        new_conds, transitions = st.apply_changes(conds, changes_for(conds), generation, now)
        new = {**old, "conditions": new_conds, "observedGeneration": generation}
        new["phase"] = st.derive_phase(new_conds)
        started = st.agent_start_time(pod)
        if started and not new.get("startTime"):
            new["startTime"] = started
        if st.is_terminal(new_conds) and not new.get("completionTime"):
            new["completionTime"] = now
        if new == old:
            return None
        written[:] = transitions
        refs[:] = [run]
        return new

    if kube.update_status(namespace, name, mutate, initial=run) is not None and written:
        post_events(refs[0], written)
    return written


# --- BenchRun lifecycle ----------------------------------------------------------------------


def ensure_trace_context(body: Body, kube: Kube) -> None:
    """Give the run its trace context annotation (once: a valid one is kept) before any child is
    built, so every pod of the run carries the same trace id; `body` is updated in place."""
    meta = body["metadata"]
    patch = run_trace_annotation_patch(meta.get("annotations"))
    if patch is None:
        return
    kube.patch_run(meta["namespace"], meta["name"], patch)
    meta["annotations"] = {**(meta.get("annotations") or {}), **patch["metadata"]["annotations"]}


def reconcile(body: Body, kube: Kube, config: OperatorConfig, logger: Logger) -> None:
    """Create whatever is missing for the run (safe to call any number of times)."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    conds = (body.get("status") or {}).get("conditions") or []
    accepted = st.get_condition(conds, COND_ACCEPTED)
    done = st.is_terminal(conds) or st.get_condition(conds, COND_AGENT_FINISHED) is not None
    if done or (accepted is not None and accepted.get("status") == st.FALSE):
        refresh(kube, ns, name)  # never re-create the children of a finished run
        return
    rejected = problem(body, config)
    if rejected is not None:
        reason, message = rejected
        logger.info("BenchRun %s/%s not accepted: %s", ns, name, message)
        write_changes(kube, ns, name, lambda _c: st.rejection(reason, message))
        return
    # Accepted first, so it leads the condition list (children's watchers may write next).
    write_changes(kube, ns, name, lambda _c: [st.accepted()])
    ensure_trace_context(body, kube)
    started_ns = now_ns()
    created: list[str] = []
    try:
        for manifest in children(body, config):
            if kube.ensure(manifest, meta["uid"]):
                created.append(f"{manifest['kind']} {manifest['metadata']['name']}")
    except NameConflictError as exc:
        conflict = str(exc)
        write_changes(kube, ns, name, lambda _c: st.rejection(st.R_NAME_CONFLICT, conflict))
        return
    except NamespaceTerminatingError:
        logger.info("BenchRun %s/%s: its namespace is being deleted; nothing created", ns, name)
        return
    if created:
        logger.info("BenchRun %s/%s: created %s", ns, name, ", ".join(created))
        kopf.event(
            cast(Any, _ref(body)),
            type="Normal",
            reason="CreatedWorkspace",
            message="created " + ", ".join(created),
        )
        try:  # best effort: a store without credentials or a flaky one never fails the reconcile
            tracing = operator_tracing(store_uri(parse_spec(body), config))
            attrs: dict[str, str | int] = {"a2rl.created": ", ".join(created)}
            record_run_span(
                tracing, body, "operator.reconcile", start_ns=started_ns, end_ns=now_ns(), attributes=attrs
            )
        except Exception as exc:
            logger.warning("BenchRun %s/%s: no reconcile span recorded: %s", ns, name, exc)
    if not any(c.startswith("Job ") for c in created):
        refresh(kube, ns, name)  # a new Job is observed through its own watch event


def refresh(kube: Kube, namespace: str, name: str, quota_message: str | None = None) -> list[st.Change]:
    """Mirror the workspace Job and its pod into the run's conditions."""
    run = kube.get_run(namespace, name)
    if run is None or run["metadata"].get("deletionTimestamp"):
        return []  # a run being deleted gets no new conditions (nor Events in a dying namespace)
    uid = run["metadata"]["uid"]
    job = kube.get_job(namespace, workspace_name(run))
    if job is not None and not any(o.get("uid") == uid for o in job["metadata"].get("ownerReferences") or []):
        job = None
    pod = kube.newest_pod(namespace, uid, COMPONENT_AGENT) if job is not None else None
    obs = st.Observation(job=job, pod=pod, queue_name=(run.get("spec") or {}).get("queueName"),
                         quota_message=quota_message)  # fmt: skip
    return write_changes(kube, namespace, name, lambda conds: st.observe(obs, conds), pod=pod, run=run)


@kopf.on.resume(API_GROUP, API_VERSION, BENCHRUN_PLURAL)
@kopf.on.create(API_GROUP, API_VERSION, BENCHRUN_PLURAL)
def on_benchrun(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    reconcile(_plain(body), memo.kube, memo.config, logger)


def _in_flight(status: kopf.Status, **_: Any) -> bool:
    return not st.is_terminal(status.get("conditions") or [])


@kopf.timer(
    API_GROUP, API_VERSION, BENCHRUN_PLURAL, interval=RESYNC_S, initial_delay=RESYNC_S, when=_in_flight
)
def resync(body: kopf.Body, memo: Any, **_: Any) -> None:
    """Safety net for missed watch events (a restart, a dropped watch): re-observe slowly."""
    meta = body["metadata"]
    refresh(memo.kube, meta["namespace"], meta["name"])


@kopf.on.delete(API_GROUP, API_VERSION, BENCHRUN_PLURAL)
def on_benchrun_delete(body: kopf.Body, meta: kopf.Meta, memo: Any, logger: Logger, **_: Any) -> None:
    """Artifact retention (the final record into the store), bounded by the finalizer timeout
    and skipped at once with the `a2rl.dev/force-finalize` annotation."""
    config: OperatorConfig = memo.config
    decision = decide(dict(meta.annotations), meta.get("deletionTimestamp"), datetime.now(UTC),
                      config.finalizer_timeout_s)  # fmt: skip
    if decision is Decision.RELEASE:
        logger.warning("releasing BenchRun %s/%s without retention (forced or timed out after %ss)",
                       meta.namespace, meta.name, config.finalizer_timeout_s)  # fmt: skip
        return
    try:
        where = retain(_plain(body), config)
    except Exception as exc:
        raise kopf.TemporaryError(
            st.one_line(
                f"artifact retention failed, retrying (the finalizer lets go after "
                f"{config.finalizer_timeout_s}s or with {ANNOTATION_FORCE_FINALIZE}=true): {exc}"
            ),
            delay=RETENTION_RETRY_S,
        ) from exc
    # Records in the object store are kept: they are never deleted with the BenchRun.
    logger.info("BenchRun %s/%s deleted; final record %s", meta.namespace, meta.name, where or "not kept")


# --- children -------------------------------------------------------------------------------


def _owner_run(obj: kopf.Body) -> tuple[str, str] | None:
    labels = obj["metadata"].get("labels") or {}
    name = labels.get(LABEL_RUN_NAME)
    if not name or not labels.get(LABEL_RUN_UID):
        return None
    return obj["metadata"]["namespace"], name


_SEEN = SeenStates()


def _refresh_on_change(body: kopf.Body, memo: Any, type: str | None, fingerprint: Hashable) -> None:
    """Re-observe the owning run when the child changed in a way its conditions depend on."""
    uid = body["metadata"].get("uid") or ""
    if type == "DELETED":
        _SEEN.forget(uid)
        return
    owner = _owner_run(body)
    if owner is None or not _SEEN.is_new(uid, fingerprint):
        return
    try:
        refresh(memo.kube, *owner)
    except BaseException:
        _SEEN.forget(uid)  # not observed after all: the next event must not be skipped
        raise


@kopf.on.event("batch", "v1", "jobs", labels=CHILD_LABELS)
def on_job(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    _refresh_on_change(body, memo, type, job_fingerprint(body))


@kopf.on.event("", "v1", "pods", labels=CHILD_LABELS)
def on_pod(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    _refresh_on_change(body, memo, type, pod_fingerprint(body))


def _is_quota_event(body: kopf.Body, **_: Any) -> bool:
    involved = body.get("involvedObject") or {}
    return (
        body.get("reason") == "FailedCreate"
        and involved.get("kind") == "Job"
        and st.is_quota_message(str(body.get("message") or ""))
    )


@kopf.on.event("", "v1", "events", when=_is_quota_event)
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
        refresh(memo.kube, *owner, quota_message=str(body.get("message") or "exceeded quota"))


def _plain(body: kopf.Body) -> Body:
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": dict(body["metadata"]),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }
