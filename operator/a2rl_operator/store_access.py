"""The run's store credentials: scoped to its prefix where the store allows it (docs/operator.md,
"Store credentials of a run").

`run_credentials` is called by the reconcile before the run's `<run>-store` Secret is built: with
MinIO's admin API it creates (idempotently) the run's user and policy (`a2rl.store.scoped`) and
returns its keys; the BenchRun is annotated `a2rl.dev/store-user` so the finalizer knows to
remove the user (`revoke`). Where the store does not allow it (not S3, no admin API, the
operator's keys lack admin rights, a run with its own `spec.store.secretRef`), the run gets the
operator's keys as before and the reason is returned for a Warning Event.

Grading pods parse untrusted model files: they get users of their own the same way, never the
operator's keys where the store allows it (`heldout_credentials`: the eval pods' `fetch-heldout`;
`eval_credentials`: one eval pod; `report_credentials`: the report pod). `revoke_grading_user`
removes one when its pod has finished; the finalizer (`revoke`) removes all that remain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2rl_tasks import get_task
from a2rl_tasks.artifacts import heldout_key

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import API_GROUP, ENV_S3_ACCESS_KEY, ENV_S3_ENDPOINT, ENV_S3_SECRET_KEY
from a2rl.store.layout import CampaignLayout, RunLayout
from a2rl.store.scoped import (
    MinioScoper,
    RunCredentials,
    ScopeUnavailableError,
    eval_policy,
    eval_user,
    heldout_policy,
    heldout_user,
    parse_s3_uri,
    report_policy,
    report_user,
    run_policy,
    run_user,
    scoped_policy,
)
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import Body
from a2rl_operator.manifests.secret import store_uri

#: On the BenchRun: the store user the operator created for it (the finalizer removes it).
ANNOTATION_STORE_USER = f"{API_GROUP}/store-user"
#: The Warning Event on a BenchRun whose store user could not be created (`Access.failed`).
R_NOT_SCOPED = "StoreCredentialsNotScoped"
#: (bucket, root, the run's layout) → the IAM policy of one grading user.
PolicyFor = Callable[[str, str, RunLayout], dict[str, Any]]


@dataclass(frozen=True)
class Access:
    credentials: RunCredentials | None  # None: the operator's keys (see `reason`)
    reason: str  # one line for the log (and the Event of a failure)
    failed: bool = False  # scoping was wanted and the store could not do it: the admin's to fix


def _scoper(config: OperatorConfig) -> MinioScoper:
    creds = config.store_credentials
    endpoint, key, secret = (
        creds.get(ENV_S3_ENDPOINT),
        creds.get(ENV_S3_ACCESS_KEY),
        creds.get(ENV_S3_SECRET_KEY),
    )
    if not endpoint or not key or not secret:
        raise ScopeUnavailableError("the operator has no S3 endpoint and keys of its own to administer")
    return MinioScoper(endpoint, key, secret)


def read_only_prefixes(spec: BenchRunSpec) -> tuple[str, ...]:
    """What the set-up reads outside the run: the model library and the run's train split."""
    from a2rl_tasks import get_task
    from a2rl_tasks.artifacts import store_prefix
    from a2rl_tasks.staging import TRAIN

    task = get_task(spec.task, protocol=spec.evaluation.protocol)
    return ("models", f"{store_prefix(task, spec.seed)}/{TRAIN}")


def _not_scopable(spec: BenchRunSpec, config: OperatorConfig) -> str | None:
    if spec.store.secret_ref is not None:
        return "the run names its own store Secret (spec.store.secretRef)"
    if not config.scoped_store_credentials:
        return "per-run store credentials are off (--no-scoped-store-credentials)"
    return None


def run_credentials(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Access:
    """The run's own keys (user + policy created in the store), or why it gets the operator's."""
    reason = _not_scopable(spec, config)
    if reason is not None:
        return Access(None, reason)
    uri = store_uri(spec, config)
    meta = body["metadata"]
    layout = RunLayout(meta["namespace"], meta["name"], meta["uid"])
    try:
        bucket, root = parse_s3_uri(uri or "")
        policy = run_policy(bucket, root, layout, read_only_prefixes(spec))
        creds = _scoper(config).grant(meta["uid"], policy)
    except ScopeUnavailableError as exc:
        return Access(None, f"the recorder gets the operator's store keys: {exc}", failed=True)
    return Access(creds, f"store user {creds.access_key}: read-write {layout.prefix}/ only")


def heldout_prefix(spec: BenchRunSpec) -> str:
    """The run's staged held-out artifact (relative to the store root)."""
    return heldout_key(get_task(spec.task, protocol=spec.evaluation.protocol), spec.seed)


def _grading_access(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, *, who: str, user: str, policy: PolicyFor
) -> Access:
    reason = _not_scopable(spec, config)
    if reason is not None:
        return Access(None, reason)
    meta = body["metadata"]
    layout = RunLayout(meta["namespace"], meta["name"], meta["uid"])
    try:
        bucket, root = parse_s3_uri(store_uri(spec, config) or "")
        creds = _scoper(config).grant_user(user, policy(bucket, root, layout))
    except ScopeUnavailableError as exc:
        return Access(None, f"the {who} gets the operator's store keys: {exc}", failed=True)
    return Access(creds, f"store user {creds.access_key} for the {who}")


def heldout_credentials(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Access:
    """Keys that read the run's held-out artifact and nothing else (`fetch-heldout`)."""
    key = heldout_prefix(spec)

    def policy(bucket: str, root: str, _layout: RunLayout) -> dict[str, Any]:
        return heldout_policy(bucket, root, key)

    user = heldout_user(body["metadata"]["uid"])
    return _grading_access(body, spec, config, who="held-out fetch", user=user, policy=policy)


def eval_credentials(body: Body, spec: BenchRunSpec, config: OperatorConfig, index: int) -> Access:
    """Keys of submission `index`'s eval pod: its snapshot in, its result out."""

    def policy(bucket: str, root: str, layout: RunLayout) -> dict[str, Any]:
        return eval_policy(bucket, root, layout, index)

    user = eval_user(body["metadata"]["uid"], index)
    return _grading_access(
        body, spec, config, who=f"eval pod of submission {index}", user=user, policy=policy
    )


def report_credentials(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Access:
    """Keys of the report pod: the run's records in, `report/` out."""
    user = report_user(body["metadata"]["uid"])
    return _grading_access(body, spec, config, who="report pod", user=user, policy=report_policy)


def revoke_grading_user(body: Body, spec: BenchRunSpec, config: OperatorConfig, user: str) -> bool:
    """Remove one grading user whose pod has finished; False when the run's keys are not scoped.
    Raises ScopeUnavailableError when the store refuses."""
    if _not_scopable(spec, config) is not None or not _is_scoped(body):
        return False
    _scoper(config).revoke_user(user)
    return True


def _is_scoped(body: Body) -> bool:
    annotations = body["metadata"].get("annotations") or {}
    return annotations.get(ANNOTATION_STORE_USER) == run_user(body["metadata"]["uid"])


def store_user_annotation(access: Access) -> dict[str, str]:
    return {ANNOTATION_STORE_USER: access.credentials.access_key} if access.credentials is not None else {}


def revoke(body: Body, config: OperatorConfig) -> list[str]:
    """Remove the run's store user and policy and every grading user still there when the operator
    created them (its annotation: the store scopes keys); returns the users removed. Raises
    ScopeUnavailableError when the store refuses (retried)."""
    if not _is_scoped(body):
        return []
    uid = body["metadata"]["uid"]
    scoper = _scoper(config)
    scoper.revoke(uid)
    return [run_user(uid), *scoper.revoke_grading(uid)]


def campaign_report_user(campaign: Body) -> str:
    """The store user of a campaign's report pod (the campaign's uid names it as a run's does)."""
    return report_user(campaign["metadata"]["uid"])


def campaign_report_credentials(campaign: Body, runs: list[Body], uri: str, config: OperatorConfig) -> Access:
    """Keys of a campaign's report pod: read `campaign.json` and everything of the campaign's runs
    (each run's own prefix), write the campaign's `report/`, and — because `a2rl campaign report`
    finds a campaign's runs by their run.json's label — list the campaign's namespace's keys and
    read the `run.json` of its runs (run metadata only: no submission, result, held-out data or
    cache of another run; no other namespace). The operator's keys where the store cannot scope
    them."""
    if not config.scoped_store_credentials:
        return Access(None, "per-run store credentials are off (--no-scoped-store-credentials)")
    meta = campaign["metadata"]
    layout = CampaignLayout(meta["namespace"], meta["name"])
    try:
        bucket, root = parse_s3_uri(uri)

        def key(*parts: str) -> str:
            return "/".join(p.strip("/") for p in (root, *parts) if p.strip("/"))

        prefixes = [RunLayout(r["metadata"]["namespace"], r["metadata"]["name"], r["metadata"]["uid"]).prefix
                    for r in runs]  # fmt: skip
        policy = scoped_policy(
            bucket,
            read=[
                key(layout.campaign_json),
                *(f"{key(p)}/*" for p in prefixes),
                key(meta["namespace"], "*", "run.json"),
            ],
            write=[f"{key(layout.report_dir)}/*"],
        )
        for statement in policy["Statement"]:
            if statement["Action"] == ["s3:ListBucket"]:  # the namespace's folder (keys only)
                statement["Condition"]["StringLike"]["s3:prefix"].append(f"{key(meta['namespace'])}/")
        creds = _scoper(config).grant_user(campaign_report_user(campaign), policy)
    except ScopeUnavailableError as exc:
        return Access(None, f"the campaign report pod gets the operator's store keys: {exc}")
    return Access(creds, f"store user {creds.access_key} for the campaign report pod")


def revoke_campaign_report_user(campaign: Body, config: OperatorConfig) -> None:
    """Remove the campaign report pod's store user (gone already: not an error). Raises
    ScopeUnavailableError when the store refuses."""
    if config.scoped_store_credentials:
        _scoper(config).revoke_user(campaign_report_user(campaign))
