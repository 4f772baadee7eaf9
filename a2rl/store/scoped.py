"""Per-run store credentials scoped to the run's prefix (MinIO's admin API), so a run's recorder
cannot read what it must not: held-out artifacts, other runs, the baseline cache.

The operator holds store-wide keys. For each run whose store is an S3 bucket it asks MinIO's admin
API for a user `a2rl-<hash of the run uid>` with one policy, `a2rl-run-<same hash>`:

- read, write and delete under `<bucket>/<root>/<namespace>/<run>-<uid>/` (the run's records,
  blobs, clock, spans);
- read only: `<root>/models/` (`store:<name>` base models, which the set-up copies into the run)
  and `<root>/data/<task>/<version>-seed<seed>/train/` (the train split the set-up stages);
- list only those prefixes; nothing else (no `heldout/`, no `baselines/`, no other run).

The secret key is derived (HMAC-SHA256 of the run uid under the operator's own secret key), so a
reconcile that runs twice (an operator restart) re-creates the same user with the same key and the
run's immutable Secret stays right; the operator never reads Secrets back. `revoke` removes the
user and its policy (the BenchRun's finalizer). A store that has no such API (AWS S3, a MinIO that
refuses the operator's keys) raises `ScopeUnavailableError`: the caller falls back to the operator's
keys and says so.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from a2rl.errors import A2rlError
from a2rl.store.layout import RunLayout

USER_PREFIX = "a2rl-"
POLICY_PREFIX = "a2rl-run-"
#: Admin calls are short: a store that does not answer quickly is treated as not allowing scoping.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 15.0


class ScopeUnavailableError(A2rlError):
    """The store cannot give a run credentials of its own (no admin API, or not allowed)."""


@dataclass(frozen=True)
class RunCredentials:
    access_key: str
    secret_key: str


def _digest(uid: str) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:15]


def run_user(uid: str) -> str:
    """The run's access key: 20 characters (MinIO's limit), the same on every reconcile."""
    return USER_PREFIX + _digest(uid)


def run_policy_name(uid: str) -> str:
    return POLICY_PREFIX + _digest(uid)


def run_secret(operator_secret: str, uid: str) -> str:
    """The run's secret key (40 hex characters), derived from the operator's secret key."""
    return hmac.new(operator_secret.encode(), f"a2rl-run-store:{uid}".encode(), hashlib.sha256).hexdigest()[
        :40
    ]


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def run_policy(bucket: str, root: str, layout: RunLayout, read_only: tuple[str, ...] = ()) -> dict[str, Any]:
    """The IAM policy of one run: its own prefix read-write, `read_only` prefixes (relative to the
    store root) readable, those prefixes listable, nothing else."""
    own = _join(root, layout.prefix)
    readable = [_join(root, p) for p in read_only]
    arn = f"arn:aws:s3:::{bucket}"
    listable = [own, f"{own}/*"] + [x for p in readable for x in (p, f"{p}/*")]
    return {
        "Version": "2012-10-17",
        "Statement": [
            # HeadBucket (the store client's bucket check) and the region, without listing.
            {"Effect": "Allow", "Action": ["s3:GetBucketLocation", "s3:HeadBucket"], "Resource": [arn]},
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [arn],
                "Condition": {"StringLike": {"s3:prefix": listable}},
            },
            {
                "Effect": "Allow",
                "Action": [
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:DeleteObject",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                ],
                "Resource": [f"{arn}/{own}/*"],
            },
            *(
                [
                    {
                        "Effect": "Allow",
                        "Action": ["s3:GetObject"],
                        "Resource": [f"{arn}/{p}/*" for p in readable],
                    }
                ]
                if readable
                else []
            ),
        ],
    }


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/root` → (bucket, root)."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ScopeUnavailableError(f"not an S3 store: {uri}")
    return parsed.netloc, parsed.path.strip("/")


class MinioScoper:
    """Creates and removes per-run users through MinIO's admin API, as the operator."""

    def __init__(self, endpoint_url: str, access_key: str, secret_key: str) -> None:
        from minio import MinioAdmin
        from minio.credentials import StaticProvider
        from urllib3 import PoolManager, Retry, Timeout

        parsed = urlparse(endpoint_url if "://" in endpoint_url else f"http://{endpoint_url}")
        if not parsed.netloc:
            raise ScopeUnavailableError(f"no S3 endpoint to administer: {endpoint_url!r}")
        self.secret_key = secret_key
        http = PoolManager(
            timeout=Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S), retries=Retry(total=0), maxsize=2
        )
        self.admin = MinioAdmin(
            endpoint=parsed.netloc,
            credentials=StaticProvider(access_key, secret_key),
            secure=parsed.scheme == "https",
            http_client=http,
        )

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> str:
        try:
            return str(fn(*args, **kwargs))
        except Exception as exc:
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ScopeUnavailableError(f"the store refused {what}: {detail}") from exc

    def grant(self, uid: str, policy: dict[str, Any]) -> RunCredentials:
        """The run's user with exactly `policy` (idempotent: the same user, key and policy again)."""
        creds = RunCredentials(run_user(uid), run_secret(self.secret_key, uid))
        name = run_policy_name(uid)
        self._call("to add a policy", self.admin.policy_add, name, policy=policy)
        self._call("to add a user", self.admin.user_add, creds.access_key, creds.secret_key)
        self._call("to set the user's policy", self.admin.policy_set, name, user=creds.access_key)
        return creds

    def revoke(self, uid: str) -> None:
        """Remove the run's user and policy; a user or policy already gone is not an error."""
        for what, fn, arg in (
            ("to remove the user", self.admin.user_remove, run_user(uid)),
            ("to remove the policy", self.admin.policy_remove, run_policy_name(uid)),
        ):
            try:
                self._call(what, fn, arg)
            except ScopeUnavailableError as exc:
                if not _is_missing(exc):
                    raise

    def user_exists(self, uid: str) -> bool:
        try:
            info = json.loads(self._call("user info", self.admin.user_info, run_user(uid)))
        except ScopeUnavailableError as exc:
            if _is_missing(exc):
                return False
            raise
        return bool(info)


def _is_missing(exc: BaseException) -> bool:
    text = f"{exc} {exc.__cause__}".lower()
    return "does not exist" in text or "not found" in text or "nosuch" in text
