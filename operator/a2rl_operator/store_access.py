"""The run's store credentials: scoped to its prefix where the store allows it (docs/operator.md,
"Store credentials of a run").

`run_credentials` is called by the reconcile before the run's `<run>-store` Secret is built: with
MinIO's admin API it creates (idempotently) the run's user and policy (`a2rl.store.scoped`) and
returns its keys; the BenchRun is annotated `a2rl.dev/store-user` so the finalizer knows to
remove the user (`revoke`). Where the store does not allow it (not S3, no admin API, the
operator's keys lack admin rights, a run with its own `spec.store.secretRef`), the run gets the
operator's keys as before and the reason is returned for a Warning Event.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import API_GROUP, ENV_S3_ACCESS_KEY, ENV_S3_ENDPOINT, ENV_S3_SECRET_KEY
from a2rl.store.layout import RunLayout
from a2rl.store.scoped import (
    MinioScoper,
    RunCredentials,
    ScopeUnavailableError,
    parse_s3_uri,
    run_policy,
    run_user,
)
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import Body
from a2rl_operator.manifests.secret import store_uri

#: On the BenchRun: the store user the operator created for it (the finalizer removes it).
ANNOTATION_STORE_USER = f"{API_GROUP}/store-user"
#: Events on the BenchRun when its Secret is created.
R_SCOPED = "StoreCredentialsScoped"
R_NOT_SCOPED = "StoreCredentialsNotScoped"


@dataclass(frozen=True)
class Access:
    credentials: RunCredentials | None  # None: the operator's keys (see `reason`)
    reason: str  # one line for the Event


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


def run_credentials(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Access:
    """The run's own keys (user + policy created in the store), or why it gets the operator's."""
    if spec.store.secret_ref is not None:
        return Access(None, "the run names its own store Secret (spec.store.secretRef)")
    if not config.scoped_store_credentials:
        return Access(None, "per-run store credentials are off (--no-scoped-store-credentials)")
    uri = store_uri(spec, config)
    meta = body["metadata"]
    layout = RunLayout(meta["namespace"], meta["name"], meta["uid"])
    try:
        bucket, root = parse_s3_uri(uri or "")
        policy = run_policy(bucket, root, layout, read_only_prefixes(spec))
        creds = _scoper(config).grant(meta["uid"], policy)
    except ScopeUnavailableError as exc:
        return Access(None, f"the recorder gets the operator's store keys: {exc}")
    return Access(creds, f"store user {creds.access_key}: read-write {layout.prefix}/ only")


def store_user_annotation(access: Access) -> dict[str, str]:
    return {ANNOTATION_STORE_USER: access.credentials.access_key} if access.credentials is not None else {}


def revoke(body: Body, config: OperatorConfig) -> str | None:
    """Remove the run's store user and policy when the operator created them (its annotation);
    returns the user removed. Raises ScopeUnavailableError when the store refuses (retried)."""
    annotations = body["metadata"].get("annotations") or {}
    user = annotations.get(ANNOTATION_STORE_USER)
    uid = body["metadata"]["uid"]
    if not user or user != run_user(uid):
        return None
    _scoper(config).revoke(uid)
    return user
