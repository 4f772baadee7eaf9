"""Everything the operator does with BenchSubmissions: admit, evaluate in an eval Job, copy the
result into status, and keep the run's aggregate scores; `register` adds the kopf handlers to a
registry (`registry.build_registry`).

Every step is recomputed from what is observed (the submission, its run, its eval Job, the
store), so any handler may run any number of times: on a BenchSubmission event, on an eval Job
event, and from the run's grading resync timer (`benchrun.py`), which also catches missed events.
Grading is active only when the operator has a grader image (`A2RL_GRADER_IMAGE`,
`OperatorConfig.grading`).

Per submission:
1. refused (`Rejected`) when its run is gone or finished, it is over `spec.budget.maxSubmissions`,
   or it came after the deadline;
2. the baseline (index 0) is served from the store's baseline cache when the (task, model
   digest, evaluator version) was evaluated before: no eval Job;
3. otherwise the run's grading NetworkPolicy (`manifests/grading_network.py`) is made sure of,
   then an eval Job (`manifests/eval_job.py`) is created and the state is `Evaluating`;
4. when the Job has finished: `result.json` is read from the store and its score / error /
   timings are copied into the status (`Succeeded`, or `Failed` with the reason); a Job that
   failed without a result makes the submission `Failed` (the run goes on). The pod's log is
   archived to the store; a scored baseline is added to the cache;
5. the run's aggregate (`submissionCount`, `baselineScore`, `bestScore`, `bestSubmission`,
   `improvement`) is recomputed from all its submissions (written by `status_writer`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import kopf
from a2rl_grader.baseline import cluster_baseline_cache_key
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import heldout_key

from a2rl.api.benchrun import BenchRunSpec, BenchRunStatus
from a2rl.api.benchsubmission import BenchSubmissionSpec, SubmissionState
from a2rl.constants import (
    API_GROUP,
    API_VERSION,
    BASELINE_INDEX,
    BENCHSUBMISSION_KIND,
    BENCHSUBMISSION_PLURAL,
    COMPONENT_EVAL,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from a2rl.protocols import EvalProtocol
from a2rl.runs import parse_time
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.scoped import eval_user
from a2rl.tracing.spans import ATTR_SUBMISSION_INDEX
from a2rl_operator import status as st
from a2rl_operator import store_access
from a2rl_operator.config import OperatorConfig
from a2rl_operator.dns_pins import PinError
from a2rl_operator.grading import decisions as gr
from a2rl_operator.grading import kube as gk
from a2rl_operator.grading.store import RunStore, open_cached
from a2rl_operator.kube import Kube, NameConflictError, NamespaceTerminatingError, owned_by, plain
from a2rl_operator.manifests import parse_spec
from a2rl_operator.manifests.eval_job import EvalTarget, eval_job, eval_job_name
from a2rl_operator.manifests.grading_network import UrlPeerError, grading_policy_name
from a2rl_operator.manifests.secret import eval_store_secret, store_uri
from a2rl_operator.metrics import timed
from a2rl_operator.run_tracing import now_ns, operator_tracing, record_run_span
from a2rl_operator.status_writer import write_status

Body = dict[str, Any]
Logger = logging.Logger | logging.LoggerAdapter[Any]
EVAL_JOB_LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_EVAL}
WARNING_REASONS = frozenset(
    {gr.R_EVAL_JOB_FAILED, gr.R_EVAL_TIMED_OUT, gr.R_NO_RESULT, gr.R_HELDOUT_MISSING, gr.R_EVALUATION_ERROR}
)


# --- one submission -----------------------------------------------------------------------------


def write(kube: Kube, sub: Body, update: gr.SubmissionUpdate) -> bool:
    """Apply `update` to the submission's status; True when it was written (a transition)."""
    meta = sub["metadata"]

    def mutate(current: Body) -> Body | None:
        new = gr.apply_update(st.submission_status(current), update,
                              current["metadata"].get("generation"), st.now_iso())  # fmt: skip
        return None if new is None else st.status_wire(new)

    written = gk.update_submission_status(kube, meta["namespace"], meta["name"], mutate) is not None
    if written and update.state != SubmissionState.EVALUATING:
        bad = update.state == SubmissionState.REJECTED or update.reason in WARNING_REASONS
        gk.post_event(
            kube,
            sub,
            "Warning" if bad else "Normal",
            update.reason,
            f"{update.state.value}: {update.message}",
        )
    elif written:
        gk.post_event(kube, sub, "Normal", update.reason, update.message)
    return written


def refresh_aggregate(kube: Kube, namespace: str, run_name: str) -> None:
    """Recompute the run's scores from its submissions (no write when nothing changed)."""

    def edit(run: Body, status: BenchRunStatus) -> BenchRunStatus:
        subs = gk.list_submissions(kube, namespace, run_name, run["metadata"]["uid"])
        return gr.with_aggregate(status, gr.aggregate(subs))

    write_status(kube, namespace, run_name, edit=edit)


def _baseline_cache_key(
    task: str,
    model_digest: str,
    limit: int | None,
    eval_env: dict[str, str],
    *,
    store: ObjectStore,
    seed: int,
) -> str:
    """The key the eval pod's evaluator version gives: its judge (the run's own or the operator's)."""

    return cluster_baseline_cache_key(get_task(task, eval_env), model_digest, limit, store, seed)


def _heldout_key(task: str, seed: int, protocol: EvalProtocol) -> str:
    return heldout_key(get_task(task, protocol=protocol), seed)


def _pod_detail(kube: Kube, namespace: str, job_name: str) -> tuple[str | None, Body | None]:
    pods = gk.pods_of_job(kube, namespace, job_name)
    pod = pods[-1] if pods else None
    return (gr.pod_failure(pod) if pod is not None else None), pod


def archive_eval_logs(kube: Kube, store: RunStore, namespace: str, index: int, pod: Body | None) -> None:
    if pod is None:
        return
    text = gk.format_logs(pod["metadata"]["name"], gk.pod_logs(kube, namespace, pod))
    store.write_log(f"eval-{index:05d}", text)


@dataclass(frozen=True)
class _Context:
    """One submission with what its processing needs."""

    sub: Body
    spec: BenchSubmissionSpec
    run: Body
    run_spec: BenchRunSpec
    store: RunStore
    store_uri: str
    job_name: str
    #: The baseline's cache key (None for agent submissions).
    cache_key: str | None


def process_submission(kube: Kube, config: OperatorConfig, sub: Body, logger: Logger) -> None:
    """Move one submission one step forward (idempotent)."""
    meta = sub["metadata"]
    ns = meta["namespace"]
    spec = BenchSubmissionSpec.model_validate(sub["spec"])
    run = kube.get_run(ns, spec.run_name)
    if gr.is_terminal_state(gr.sub_state(sub)):
        if run is not None:
            refresh_aggregate(kube, ns, spec.run_name)
        return
    if run is not None and run["metadata"].get("deletionTimestamp"):
        return  # the run (and with it this submission) is being deleted
    if run is None or not gk.owned_by_run(sub, run["metadata"]["uid"]):
        message = f"no BenchRun {spec.run_name} in {ns} owns this submission"
        write(kube, sub, gr.rejected(gr.R_UNKNOWN_RUN, message))
        return
    run_spec = parse_spec(run)
    uri = store_uri(run_spec, config)
    if uri is None:  # a run without a store is never accepted; defensive
        write(kube, sub, gr.failed(gr.R_NO_RESULT, "the run has no object store"))
        return
    rmeta = run["metadata"]
    eval_env = config.grading.run_eval_env(run_spec)
    cache_key = (
        _baseline_cache_key(
            run_spec.task,
            spec.model_digest,
            run_spec.evaluation.limit,
            eval_env,
            store=open_cached(uri),
            seed=run_spec.seed,
        )
        if spec.index == BASELINE_INDEX
        else None
    )
    ctx = _Context(
        sub=sub,
        spec=spec,
        run=run,
        run_spec=run_spec,
        store=RunStore.open(uri, RunLayout(rmeta["namespace"], rmeta["name"], rmeta["uid"])),
        store_uri=uri,
        job_name=eval_job_name(spec.run_name, spec.index),
        cache_key=cache_key,
    )
    job = kube.get_job(ns, ctx.job_name)
    if job is None:
        _start(kube, config, ctx, logger)
    else:
        _observe(kube, config, ctx, job, logger)


def _start(kube: Kube, config: OperatorConfig, ctx: _Context, logger: Logger) -> None:
    """Admission, the baseline cache, then the eval Job. Only a submission without a Job is
    admitted: one already evaluating finishes even when the run ends meanwhile."""
    grading = config.grading
    meta = ctx.sub["metadata"]
    ns = meta["namespace"]
    created = parse_time(meta.get("creationTimestamp"))
    refusal = gr.admission(ctx.spec, created, ctx.run, ctx.run_spec, grading.submit_allowance_s)
    if refusal is not None:
        write(kube, ctx.sub, gr.rejected(*refusal))
        refresh_aggregate(kube, ns, ctx.spec.run_name)
        return
    store = ctx.store
    if ctx.cache_key is not None:
        cached = store.baseline_from_cache(ctx.cache_key, ctx.spec.model_digest)
        if cached is not None:
            result_uri = store.url(store.layout.submission_result(BASELINE_INDEX))
            write(kube, ctx.sub, gr.from_result(cached, result_uri=result_uri, job_name=None, cached=True))
            refresh_aggregate(kube, ns, ctx.spec.run_name)
            return
    task, seed = ctx.run_spec.task, ctx.run_spec.seed
    heldout = _heldout_key(task, seed, ctx.run_spec.evaluation.protocol)
    if not grading.heldout_pvc and not store.has_artifact(heldout):
        command = f"a2rl data stage {task} --seed {seed} --store {ctx.store_uri}"
        message = f"held-out data not staged at {store.url(heldout)}: run `{command}`"
        write(kube, ctx.sub, gr.failed(gr.R_HELDOUT_MISSING, message))
        refresh_aggregate(kube, ns, ctx.spec.run_name)
        return
    target = EvalTarget(index=ctx.spec.index, store_uri=ctx.store_uri, heldout_key=heldout)
    try:
        pins = gk.grading_pins(kube, config, ctx.run, ctx.run_spec, logger)
    except PinError as exc:
        logger.warning("BenchSubmission %s/%s: no eval Job yet (next resync): %s", ns, meta["name"], exc)
        return
    manifest = eval_job(
        ctx.run, ctx.sub, ctx.run_spec, target, grading, pins=pins, pod_defaults=config.pod_defaults
    )
    started_ns = now_ns()
    try:
        if gk.ensure_grading_policy(kube, config, ctx.run, ctx.run_spec, logger):
            logger.info("BenchRun %s/%s: created NetworkPolicy %s", ns, ctx.spec.run_name,
                        grading_policy_name(ctx.run))  # fmt: skip
        # The eval pod parses untrusted model files: keys of its own (this submission's snapshot in,
        # its result out), never the operator's where the store can scope them.
        access = store_access.eval_credentials(ctx.run, ctx.run_spec, config, ctx.spec.index)
        if access.credentials is None:
            logger.warning("BenchSubmission %s/%s: %s", ns, meta["name"], access.reason)
        secret = eval_store_secret(ctx.run, ctx.run_spec, config, ctx.spec.index, access.credentials)
        kube.ensure(secret, ctx.run["metadata"]["uid"])
        if kube.ensure(manifest, meta["uid"]):
            logger.info("BenchSubmission %s/%s: created eval Job %s", ns, meta["name"], ctx.job_name)
            attrs: dict[str, str | int] = {ATTR_SUBMISSION_INDEX: ctx.spec.index, "a2rl.job": ctx.job_name}
            tracing = operator_tracing(ctx.store_uri)
            record_run_span(
                tracing, ctx.run, "operator.eval_job", start_ns=started_ns, end_ns=now_ns(), attributes=attrs
            )
    except NameConflictError as exc:
        write(kube, ctx.sub, gr.failed(gr.R_EVAL_JOB_FAILED, str(exc)))
        return
    except NamespaceTerminatingError:
        logger.info("BenchSubmission %s/%s: its namespace is being deleted; no eval Job", ns, meta["name"])
        return
    except UrlPeerError as exc:
        write(kube, ctx.sub, gr.failed(gr.R_ENDPOINT_NOT_ALLOWED, f"no eval pod may call it: {exc}"))
        refresh_aggregate(kube, ns, ctx.spec.run_name)
        return
    write(kube, ctx.sub, gr.evaluating(ctx.job_name))


def _observe(kube: Kube, config: OperatorConfig, ctx: _Context, job: Body, logger: Logger) -> None:
    """The eval Job exists: wait for it, then copy its result into the status."""
    meta = ctx.sub["metadata"]
    ns = meta["namespace"]
    if owned_by(job, meta["uid"]) is None:
        message = f"Job {ctx.job_name} exists and is not owned by this BenchSubmission"
        write(kube, ctx.sub, gr.failed(gr.R_EVAL_JOB_FAILED, message))
        return
    outcome = gr.job_outcome(job)
    if outcome is None:
        write(kube, ctx.sub, gr.evaluating(ctx.job_name))  # no write when already Evaluating
        return
    try:  # the pod is done: its store user goes (the finalizer removes what is left)
        store_access.revoke_grading_user(ctx.run, ctx.run_spec, config,
                                         eval_user(ctx.run["metadata"]["uid"], ctx.spec.index))  # fmt: skip
    except Exception as exc:
        logger.warning(
            "BenchSubmission %s/%s: its eval store user is not removed yet: %s", ns, meta["name"], exc
        )
    detail, pod = _pod_detail(kube, ns, ctx.job_name)
    try:
        archive_eval_logs(kube, ctx.store, ns, ctx.spec.index, pod)
    except Exception:
        logger.exception("BenchSubmission %s/%s: could not archive the eval log", ns, meta["name"])
    store = ctx.store
    result = store.read_result(ctx.spec.index)
    if result is not None:
        result_uri = store.url(store.layout.submission_result(ctx.spec.index))
        update = gr.from_result(result, result_uri=result_uri, job_name=ctx.job_name)
        if ctx.cache_key is not None and update.state == SubmissionState.SUCCEEDED:
            store.cache_baseline(ctx.cache_key, result)
    elif outcome.succeeded:
        update = gr.no_result(ctx.job_name)
    else:
        update = gr.from_failed_job(outcome, ctx.job_name, detail)
    write(kube, ctx.sub, update)
    refresh_aggregate(kube, ns, ctx.spec.run_name)


def resync_submissions(kube: Kube, config: OperatorConfig, run: Body, logger: Logger) -> None:
    """Process every unfinished submission of the run (safety net for missed events)."""
    meta = run["metadata"]
    for sub in gk.list_submissions(kube, meta["namespace"], meta["name"], meta["uid"]):
        if not gr.is_terminal_state(gr.sub_state(sub)):
            try:
                process_submission(kube, config, sub, logger)
            except Exception:
                logger.exception(
                    "BenchSubmission %s/%s: step failed", meta["namespace"], sub["metadata"]["name"]
                )


# --- handlers ---------------------------------------------------------------------------------


def on_submission(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    config: OperatorConfig = memo.config
    if type == "DELETED" or not config.grading.enabled:
        return
    process_submission(memo.kube, config, plain(body), logger)


def on_eval_job(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    config: OperatorConfig = memo.config
    if type == "DELETED" or not config.grading.enabled:
        return
    owners = body["metadata"].get("ownerReferences") or []
    owner = next((o for o in owners if o.get("kind") == BENCHSUBMISSION_KIND), None)
    if owner is None:
        return
    sub = gk.get_submission(memo.kube, body["metadata"]["namespace"], owner["name"])
    if sub is not None and sub["metadata"].get("uid") == owner.get("uid"):
        process_submission(memo.kube, config, sub, logger)


def register(registry: kopf.OperatorRegistry) -> None:
    """Add the BenchSubmission handlers to `registry`."""
    kopf.on.event(API_GROUP, API_VERSION, BENCHSUBMISSION_PLURAL, registry=registry)(timed(on_submission))
    kopf.on.event("batch", "v1", "jobs", labels=EVAL_JOB_LABELS, registry=registry)(timed(on_eval_job))
