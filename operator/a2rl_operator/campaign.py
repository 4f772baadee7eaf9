"""Everything the operator does with a BenchCampaign; `register` adds the kopf handlers.

One reconcile (`reconcile_campaign`) serves every trigger — the campaign's create, resume and
update (`spec.maxConcurrentRuns` takes effect at once), a resync timer, any change of one of its
BenchRuns (labelled `a2rl.dev/campaign`) and of its report Job. Serialized per campaign (a lock
keyed by its uid), it:

1. expands the matrix (`a2rl.campaign.matrix.expand`); a campaign that cannot be expanded (or
   names an unknown task) is over: `Failed`, `InvalidSpec`, and no run is created;
2. lists the campaign's BenchRuns from the API server (never a cache) right before deciding;
3. creates the next planned runs in plan order while created-and-unfinished runs stay under
   `maxConcurrentRuns` (`campaign_decisions.next_runs`): each a BenchRun of the planned name,
   owned by the campaign (deleting the campaign deletes its runs; their finalizer keeps their
   records); a 409 is a run created already (names are deterministic, so a restart or a re-sync
   creates no duplicate);
4. writes the status — the roll-up of the runs' statuses (`a2rl.campaign.rollup`), the phase and
   the GitOps-readable conditions (`status.lifecycle`) — only when it changed;
5. once every run has ended: the campaign report Job (grading on and a store configured), and
   `status.reportUri` when it succeeded.

`campaign.json` (the campaign's metadata and spec) goes to the store on create, resume and update.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from typing import Any

import kopf
from a2rl_tasks import TASKS
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from a2rl.api.benchcampaign import BenchCampaignSpec, CampaignPhase
from a2rl.campaign.matrix import CampaignError, PlannedRun, expand
from a2rl.campaign.rollup import RunOutcome, rollup, status_figures
from a2rl.constants import (
    API_GROUP,
    API_GROUP_VERSION,
    API_VERSION,
    BENCHCAMPAIGN_KIND,
    BENCHCAMPAIGN_PLURAL,
    BENCHRUN_PLURAL,
    COMPONENT_REPORT,
    LABEL_CAMPAIGN,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from a2rl.store.layout import CampaignLayout
from a2rl_operator import campaign_decisions as cd
from a2rl_operator import dns_pins, store_access
from a2rl_operator import status as st
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.store import open_cached
from a2rl_operator.kube import Kube, NamespaceTerminatingError, is_namespace_terminating
from a2rl_operator.manifests import campaign_report as cr
from a2rl_operator.manifests.secret import store_uri
from a2rl_operator.metrics import timed

Body = dict[str, Any]
Logger = logging.Logger | logging.LoggerAdapter[Any]
RESYNC_S = 30.0
REPORT_JSON = "report.json"
#: Keys of `metadata` kept in campaign.json (the rest is the API server's bookkeeping).
RECORD_META = ("name", "namespace", "uid", "generation", "creationTimestamp", "labels")


# --- one lock per campaign ------------------------------------------------------------------------

_LOCKS_GUARD = threading.Lock()
_LOCKS: dict[str, threading.Lock] = {}


def campaign_lock(uid: str) -> threading.Lock:
    """The lock that serializes the reconciles of one campaign (kopf runs handlers in threads)."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(uid, threading.Lock())


def forget_lock(uid: str) -> None:
    with _LOCKS_GUARD:
        _LOCKS.pop(uid, None)


# --- reads and writes -----------------------------------------------------------------------------


def get_campaign(kube: Kube, namespace: str, name: str) -> Body | None:
    return kube.get_custom(BENCHCAMPAIGN_PLURAL, namespace, name)


def list_runs(kube: Kube, namespace: str, name: str, uid: str) -> list[Body]:
    """The campaign's BenchRuns as the API server has them now (its label, owned by its uid)."""
    listed = kube.custom.list_namespaced_custom_object(
        API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, label_selector=f"{LABEL_CAMPAIGN}={name}"
    )
    assert isinstance(listed, dict)
    items: list[Body] = listed.get("items") or []
    return [run for run in items if cd.is_owned(run, uid)]


def create_run(kube: Kube, manifest: Body) -> bool:
    """Create one of the campaign's BenchRuns; False when it exists already (409)."""
    meta = manifest["metadata"]
    try:
        kube.custom.create_namespaced_custom_object(
            API_GROUP, API_VERSION, meta["namespace"], BENCHRUN_PLURAL, manifest
        )
    except ApiException as exc:
        if is_namespace_terminating(exc):
            raise NamespaceTerminatingError(f"namespace {meta['namespace']} is being deleted") from None
        if exc.status != 409:
            raise
        return False
    return True


def campaign_ref(campaign: Body) -> Body:
    """What `kopf.event` needs to post an Event about the campaign."""
    meta = campaign["metadata"]
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHCAMPAIGN_KIND,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
    }


def post_event(kube: Kube, campaign: Body, reason: str, message: str, *, warning: bool = False) -> None:
    kube.post_event(campaign_ref(campaign), "Warning" if warning else "Normal", reason, st.one_line(message))


def campaign_store_uri(spec: BenchCampaignSpec, config: OperatorConfig) -> str | None:
    """The campaign's store: its template's (`spec.store.uri`), else the operator's."""
    return store_uri(spec.template, config)


def campaign_record(campaign: Body) -> Body:
    """campaign.json: the BenchCampaign as run (apiVersion, kind, the metadata that names it, spec)."""
    meta = campaign["metadata"]
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHCAMPAIGN_KIND,
        "metadata": {k: meta[k] for k in RECORD_META if meta.get(k) is not None},
        "spec": campaign.get("spec") or {},
    }


def write_campaign_record(campaign: Body, config: OperatorConfig, logger: Logger) -> str | None:
    """Write campaign.json to the campaign's store; its URL (None: no store, or not parseable).
    Raises when the store refuses (kopf retries the handler)."""
    meta = campaign["metadata"]
    try:
        spec = BenchCampaignSpec.model_validate(campaign.get("spec") or {})
    except ValidationError:
        return None  # the reconcile says why
    uri = campaign_store_uri(spec, config)
    if uri is None:
        logger.info(
            "BenchCampaign %s/%s: no store configured; campaign.json not written",
            meta["namespace"],
            meta["name"],
        )
        return None
    store = open_cached(uri)
    key = CampaignLayout(meta["namespace"], meta["name"]).campaign_json
    store.put_json(key, campaign_record(campaign))
    return store.url_for(key)


# --- the reconcile ----------------------------------------------------------------------------


def plan(name: str, spec: Body) -> list[PlannedRun]:
    """The campaign's runs; raises CampaignError (with a message for `InvalidSpec`)."""
    try:
        parsed = BenchCampaignSpec.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CampaignError(f"spec.{where}: {first['msg']}") from exc
    planned = expand(name, parsed)
    unknown = sorted({run.spec.task for run in planned if run.spec.task not in TASKS})
    if unknown:
        raise CampaignError(f"unknown task {', '.join(unknown)} (known: {', '.join(sorted(TASKS))})")
    return planned


def reconcile_campaign(kube: Kube, config: OperatorConfig, namespace: str, name: str, logger: Logger) -> None:
    """Take the campaign one step forward (safe to call any number of times, from any trigger)."""
    campaign = get_campaign(kube, namespace, name)
    if campaign is None or campaign["metadata"].get("deletionTimestamp"):
        return
    uid = campaign["metadata"]["uid"]
    with campaign_lock(uid):
        campaign = get_campaign(kube, namespace, name)  # fresh, under the lock
        if (
            campaign is None
            or campaign["metadata"].get("deletionTimestamp")
            or campaign["metadata"]["uid"] != uid
        ):
            return
        try:
            planned = plan(name, campaign.get("spec") or {})
        except CampaignError as exc:
            write_campaign_status(kube, campaign, None, cd.invalid_verdict(str(exc)), logger)
            return
        spec = BenchCampaignSpec.model_validate(campaign["spec"])
        existing = {run["metadata"]["name"]: run for run in list_runs(kube, namespace, name, uid)}
        created: list[str] = []
        try:
            for run in cd.next_runs(planned, existing, spec.max_concurrent_runs):
                manifest = cd.run_manifest(campaign, run)
                if create_run(kube, manifest):
                    created.append(run.name)
                existing[run.name] = manifest  # created now (or a moment ago): in flight
        except NamespaceTerminatingError:
            logger.info(
                "BenchCampaign %s/%s: its namespace is being deleted; no run created", namespace, name
            )
            return
        if created:
            logger.info("BenchCampaign %s/%s: created BenchRun %s", namespace, name, ", ".join(created))
            post_event(kube, campaign, "CreatedRuns", f"created BenchRun {', '.join(created)}")
        outcomes: dict[str, RunOutcome] = {
            run.name: cd.run_outcome(existing[run.name]) for run in planned if run.name in existing
        }
        result = rollup(planned, outcomes)
        judged = cd.verdict(result, planned, outcomes)
        report_uri = None
        if judged.over:
            report_uri = advance_report(
                kube, config, campaign, spec, runs=list(existing.values()), logger=logger
            )
        write_campaign_status(
            kube,
            campaign,
            status_figures(result),
            judged,
            logger,
            completion=cd.last_completion(list(existing.values())),
            report_uri=report_uri,
        )


def write_campaign_status(
    kube: Kube,
    campaign: Body,
    figures: Any,
    judged: cd.Verdict,
    logger: Logger,
    **kwargs: Any,
) -> None:
    """Write the campaign's status when it changed (guarded by resourceVersion, retried on
    conflicts); one Event when its phase changes."""
    meta = campaign["metadata"]
    phases: list[tuple[str | None, str]] = []

    def mutate(current: Body) -> Body | None:
        old = cd.status_of(current)
        generation = current["metadata"].get("generation")
        new, _ = cd.campaign_status(old, figures, judged, generation, st.now_iso(), **kwargs)
        if cd.same_status(old, new):
            return None
        phases[:] = [(old.phase, str(new.phase))]
        return new.to_wire()

    written = kube.update_custom_status(
        BENCHCAMPAIGN_PLURAL, BENCHCAMPAIGN_KIND, meta["namespace"], meta["name"], mutate, initial=campaign
    )
    if written is not None and phases and phases[0][0] != phases[0][1]:
        failed = judged.phase == CampaignPhase.FAILED
        if failed or judged.over:
            logger.info(
                "BenchCampaign %s/%s: %s: %s", meta["namespace"], meta["name"], judged.phase, judged.message
            )
        post_event(kube, campaign, judged.reason, f"{judged.phase}: {judged.message}", warning=failed)


# --- the campaign report -----------------------------------------------------------------------


def _job_outcome(job: Body | None) -> str | None:
    """`Complete`/`Failed` once the Job has ended, else None."""
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == st.TRUE:
            return str(cond["type"])
    return None


def advance_report(
    kube: Kube,
    config: OperatorConfig,
    campaign: Body,
    spec: BenchCampaignSpec,
    *,
    runs: list[Body],
    logger: Logger,
) -> str | None:
    """Every run has ended: create the campaign report Job (once), and when it has succeeded return
    the report's URI for `status.reportUri` (None until then, and when there is no report: grading
    off, no store, or the Job failed)."""
    meta = campaign["metadata"]
    ns, name = meta["namespace"], meta["name"]
    if (campaign.get("status") or {}).get("reportUri"):
        return None  # kept by campaign_status
    uri = campaign_store_uri(spec, config)
    if not config.grading.enabled or uri is None:
        return None
    job = kube.get_job(ns, cr.report_job_name(name))
    if job is not None and not cd.is_owned(job, meta["uid"]):
        logger.warning(
            "BenchCampaign %s/%s: Job %s is not the campaign's; no report", ns, name, cr.report_job_name(name)
        )
        return None
    outcome = _job_outcome(job)
    if job is None:
        owner = cd.owner_reference(campaign)
        access = store_access.campaign_report_credentials(campaign, runs, uri, config)
        if access.credentials is None:
            logger.warning("BenchCampaign %s/%s: %s", ns, name, access.reason)
        try:
            pins = dns_pins.store_pins(config)
            kube.ensure(cr.report_network_policy(campaign, owner, config), meta["uid"])
            kube.ensure(cr.report_store_secret(campaign, owner, uri, config, access.credentials), meta["uid"])
            manifest = cr.report_job(
                campaign, owner, uri, config.grading, pins=pins, pod_defaults=config.pod_defaults
            )
            if kube.ensure(manifest, meta["uid"]):
                logger.info("BenchCampaign %s/%s: created report Job %s", ns, name, cr.report_job_name(name))
        except (dns_pins.PinError, NamespaceTerminatingError) as exc:
            logger.warning("BenchCampaign %s/%s: no report Job yet: %s", ns, name, exc)
        return None
    if outcome is None:
        return None
    try:
        store_access.revoke_campaign_report_user(campaign, config)
    except Exception as exc:  # best effort: a store without an admin API has no such user
        logger.info("BenchCampaign %s/%s: report store user not removed: %s", ns, name, exc)
    if outcome == "Failed":
        if (campaign.get("status") or {}).get("phase") in (CampaignPhase.SUCCEEDED, CampaignPhase.FAILED):
            logger.warning(
                "BenchCampaign %s/%s: the report Job %s failed", ns, name, cr.report_job_name(name)
            )
        return None
    store = open_cached(uri)
    key = f"{CampaignLayout(ns, name).report_dir}/{REPORT_JSON}"
    if not store.exists(key):
        logger.warning(
            "BenchCampaign %s/%s: the report Job succeeded but %s is missing", ns, name, store.url_for(key)
        )
        return None
    return store.url_for(key)


# --- handlers ----------------------------------------------------------------------------------


def on_campaign(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    """Create, resume, update: campaign.json to the store, then the reconcile."""
    meta = body["metadata"]
    campaign = get_campaign(memo.kube, meta["namespace"], meta["name"])
    if campaign is None or campaign["metadata"].get("deletionTimestamp"):
        return
    try:
        write_campaign_record(campaign, memo.config, logger)
    except Exception as exc:  # the store is down: the runs must not wait for it; kopf retries
        reconcile_campaign(memo.kube, memo.config, meta["namespace"], meta["name"], logger)
        raise kopf.TemporaryError(
            f"campaign.json not written yet: {st.one_line(str(exc))}", delay=15
        ) from exc
    reconcile_campaign(memo.kube, memo.config, meta["namespace"], meta["name"], logger)


def resync(body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    meta = body["metadata"]
    reconcile_campaign(memo.kube, memo.config, meta["namespace"], meta["name"], logger)


def _open(body: kopf.Body, memo: Any, **_: Any) -> bool:
    """A campaign still in flight, or over and waiting for its report."""
    status = body.get("status") or {}
    if status.get("phase") not in (CampaignPhase.SUCCEEDED, CampaignPhase.FAILED):
        return True
    config: OperatorConfig = memo.config
    return config.grading.enabled and not status.get("reportUri") and _reason(status) != cd.R_INVALID_SPEC


def _reason(status: Body) -> str | None:
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Finished"), None)
    return None if cond is None else cond.get("reason")


def _run_fingerprint(run: kopf.Body) -> Hashable:
    """What a campaign reads of one of its runs: its phase, scores and cost, and whether it goes."""
    status = run.get("status") or {}
    keys = ("phase", "baselineScore", "bestScore", "improvement", "driverCostUSD", "completionTime")
    return (tuple(status.get(k) for k in keys), bool(run["metadata"].get("deletionTimestamp")))


_SEEN: dict[str, Hashable] = {}
_SEEN_LOCK = threading.Lock()


def _is_new(uid: str, fingerprint: Hashable | None) -> bool:
    with _SEEN_LOCK:
        if fingerprint is None:
            _SEEN.pop(uid, None)
            return True
        if _SEEN.get(uid) == fingerprint:
            return False
        _SEEN[uid] = fingerprint
        return True


def on_campaign_run(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    """One of a campaign's BenchRuns changed (or went): the campaign takes its next step."""
    meta = body["metadata"]
    campaign = (meta.get("labels") or {}).get(LABEL_CAMPAIGN)
    if not campaign:
        return
    uid = meta.get("uid") or ""
    if not _is_new(uid, None if type == "DELETED" else _run_fingerprint(body)):
        return
    try:
        reconcile_campaign(memo.kube, memo.config, meta["namespace"], campaign, logger)
    except BaseException:
        _is_new(uid, None)  # not handled after all: the next event must not be skipped
        raise


def on_report_job(body: kopf.Body, memo: Any, type: str | None, logger: Logger, **_: Any) -> None:
    campaign = (body["metadata"].get("labels") or {}).get(LABEL_CAMPAIGN)
    if type == "DELETED" or not campaign or _job_outcome(dict(body)) is None:
        return
    reconcile_campaign(memo.kube, memo.config, body["metadata"]["namespace"], campaign, logger)


def on_campaign_delete(body: kopf.Body, **_: Any) -> None:
    forget_lock(body["metadata"].get("uid") or "")


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Add the BenchCampaign handlers to `registry`."""
    del config
    camp = (API_GROUP, API_VERSION, BENCHCAMPAIGN_PLURAL)
    kopf.on.create(*camp, id="campaign-create", registry=registry)(timed(on_campaign))
    kopf.on.resume(*camp, id="campaign-resume", registry=registry)(timed(on_campaign))
    kopf.on.update(*camp, id="campaign-update", field="spec", registry=registry)(timed(on_campaign))
    kopf.timer(
        *camp, id="campaign-resync", interval=RESYNC_S, initial_delay=RESYNC_S, when=_open, registry=registry
    )(timed(resync))
    # Optional: no finalizer. Deleting a campaign is the garbage collector's (its runs keep theirs).
    kopf.on.delete(*camp, id="campaign-delete", optional=True, registry=registry)(timed(on_campaign_delete))
    kopf.on.event(
        API_GROUP,
        API_VERSION,
        BENCHRUN_PLURAL,
        id="campaign-runs",
        labels={LABEL_CAMPAIGN: kopf.PRESENT},
        registry=registry,
    )(timed(on_campaign_run))
    report_labels: dict[str, Any] = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: COMPONENT_REPORT,
        LABEL_CAMPAIGN: kopf.PRESENT,
    }
    kopf.on.event("batch", "v1", "jobs", id="campaign-report-job", labels=report_labels, registry=registry)(
        timed(on_report_job)
    )
