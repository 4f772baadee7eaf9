"""Per-run store credentials scoped to the run's prefix (MinIO's admin API), so a run's recorder
cannot read what it must not: held-out artifacts, other runs, the baseline cache.

The operator holds store-wide keys. For each run whose store is an S3 bucket it asks MinIO's admin
API for a user `a2rl-<hash of the run uid>` with one policy, `a2rl-run-<same hash>`:

- read, write and delete under `<bucket>/<root>/<namespace>/<run>-<uid>/` (the run's records,
  blobs, clock, spans);
- read only: `<root>/models/` (`store:<name>` base models, which the set-up copies into the run)
  and `<root>/data/<task>/<version>-seed<seed>/train/` (the train split the set-up stages);
- list only those prefixes; nothing else (no `heldout/`, no `baselines/`, no other run).

Grading pods parse untrusted model files, so they get users of their own too (`grading_user_prefix`:
`a2g<hash of the run uid>`, one policy each, named as the user), never the operator's keys:

- `<prefix>h`, the run's held-out reader (`heldout_policy`): read and list the run's staged
  held-out artifact only (the eval pods' `fetch-heldout` init container);
- `<prefix><index:05d>`, one per eval pod (`eval_policy`): read submission `<index>`'s folder,
  the run's blobs (the snapshot to restore) and the base model's manifest (the parameter bound),
  write only that submission's `result.json` and `details.jsonl` and the eval's own span files;
  no held-out artifact, no other submission's result, no `seal.json`, no other run;
- `<prefix>r`, the report pod (`report_policy`): read the run's prefix, write only `report/`,
  `traces.jsonl` and the report's span files.

They are plain users, not service accounts or STS sessions of a broader parent: a MinIO user may
create access keys for itself, and keys derived from a parent with more rights could be minted back
to the parent's rights; a plain user's own keys have exactly its policy.

Every secret key is derived (HMAC-SHA256 of the run uid, or of the user name, under the operator's
own secret key), so a reconcile that runs twice (an operator restart) re-creates the same user with
the same key and the immutable Secrets stay right; the operator never reads Secrets back. `revoke`
removes the run's user and its policy, `revoke_user` one grading user, `revoke_grading` every
grading user of a run (the BenchRun's finalizer). A store that has no such API (AWS S3, a MinIO
that refuses the operator's keys) raises `ScopeUnavailableError`: the caller falls back to the
operator's keys and says so.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from a2rl.constants import BASELINE_INDEX, COMPONENT_EVAL, COMPONENT_REPORT
from a2rl.errors import A2rlError
from a2rl.store.layout import RunLayout

USER_PREFIX = "a2rl-"
POLICY_PREFIX = "a2rl-run-"
#: Grading users of a run: `a2g` + 12 hex digits of the run uid's hash, then the pod's suffix.
GRADING_USER_PREFIX = "a2g"
HELDOUT_SUFFIX = "h"
REPORT_SUFFIX = "r"
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


def grading_user_prefix(uid: str) -> str:
    """What every grading user of the run starts with (15 characters)."""
    return GRADING_USER_PREFIX + _digest(uid)[:12]


def eval_user(uid: str, index: int) -> str:
    """The eval pod of submission `index`: 20 characters up to index 99999."""
    return f"{grading_user_prefix(uid)}{index:05d}"


def report_user(uid: str) -> str:
    return grading_user_prefix(uid) + REPORT_SUFFIX


def heldout_user(uid: str) -> str:
    return grading_user_prefix(uid) + HELDOUT_SUFFIX


def user_secret(operator_secret: str, user: str) -> str:
    """A grading user's secret key (40 hex characters), derived from the operator's secret key."""
    digest = hmac.new(operator_secret.encode(), f"a2rl-scoped-store:{user}".encode(), hashlib.sha256)
    return digest.hexdigest()[:40]


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


def _listable(patterns: Sequence[str]) -> list[str]:
    """ListBucket prefixes for object patterns: `p/*` lists `p` and below, a key lists itself."""
    out: list[str] = []
    for pattern in patterns:
        for prefix in (pattern.removesuffix("/*"), pattern) if pattern.endswith("/*") else (pattern,):
            if prefix not in out:
                out.append(prefix)
    return out


def scoped_policy(bucket: str, *, read: Sequence[str], write: Sequence[str] = ()) -> dict[str, Any]:
    """Read (and list) the object patterns `read`, write (PutObject only: no delete) `write`;
    patterns are bucket keys, `*` a wildcard. Nothing else."""
    arn = f"arn:aws:s3:::{bucket}"
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": ["s3:GetBucketLocation", "s3:HeadBucket"], "Resource": [arn]},
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [arn],
            "Condition": {"StringLike": {"s3:prefix": _listable(read)}},
        },
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{arn}/{p}" for p in read]},
    ]
    if write:
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                "Resource": [f"{arn}/{p}" for p in write],
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def heldout_policy(bucket: str, root: str, heldout_key: str) -> dict[str, Any]:
    """The run's held-out reader: its task and seed's staged held-out artifact, read-only."""
    return scoped_policy(bucket, read=[f"{_join(root, heldout_key)}/*"])


def eval_policy(bucket: str, root: str, layout: RunLayout, index: int) -> dict[str, Any]:
    """One eval pod: submission `index`'s manifest and the run's blobs in; its result out."""
    own = _join(root, layout.prefix)
    sub = _join(root, layout.submission_dir(index))
    # The base model's manifest (submission 0): the evaluator derives the run's parameter bound
    # from it before it loads the submitted model.
    base = _join(root, layout.submission_manifest(BASELINE_INDEX))
    return scoped_policy(
        bucket,
        read=[f"{sub}/*", f"{own}/blobs/*", base],
        write=[
            _join(root, layout.submission_result(index)),
            _join(root, layout.submission_details(index)),
            f"{own}/traces/{COMPONENT_EVAL}-*",
        ],
    )


def report_policy(bucket: str, root: str, layout: RunLayout) -> dict[str, Any]:
    """The report pod: the run's records in; `report/`, the merged trace and its own spans out."""
    own = _join(root, layout.prefix)
    return scoped_policy(
        bucket,
        read=[f"{own}/*"],
        write=[f"{own}/report/*", _join(root, layout.traces), f"{own}/traces/{COMPONENT_REPORT}-*"],
    )


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
        from urllib3 import Retry, Timeout

        from a2rl.store.s3 import http_client

        parsed = urlparse(endpoint_url if "://" in endpoint_url else f"http://{endpoint_url}")
        if not parsed.netloc:
            raise ScopeUnavailableError(f"no S3 endpoint to administer: {endpoint_url!r}")
        self.secret_key = secret_key
        http = http_client(
            parsed.netloc,
            parsed.scheme == "https",
            timeout=Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
            retries=Retry(total=0),
            maxsize=2,
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

    def grant_user(self, user: str, policy: dict[str, Any]) -> RunCredentials:
        """A grading user (`eval_user`, `report_user`, `heldout_user`) with exactly `policy`, in a
        policy of the same name (idempotent, as `grant`)."""
        creds = RunCredentials(user, user_secret(self.secret_key, user))
        self._call("to add a policy", self.admin.policy_add, user, policy=policy)
        self._call("to add a user", self.admin.user_add, creds.access_key, creds.secret_key)
        self._call("to set the user's policy", self.admin.policy_set, user, user=creds.access_key)
        return creds

    def _remove(self, user: str, policy: str) -> None:
        for what, fn, arg in (
            ("to remove the user", self.admin.user_remove, user),
            ("to remove the policy", self.admin.policy_remove, policy),
        ):
            try:
                self._call(what, fn, arg)
            except ScopeUnavailableError as exc:
                if not _is_missing(exc):
                    raise

    def revoke(self, uid: str) -> None:
        """Remove the run's user and policy; a user or policy already gone is not an error."""
        self._remove(run_user(uid), run_policy_name(uid))

    def revoke_user(self, user: str) -> None:
        """Remove one grading user and its policy (gone already: not an error)."""
        self._remove(user, user)

    def revoke_grading(self, uid: str) -> list[str]:
        """Remove every grading user of the run and their policies (those the store lists);
        returns the users removed."""
        prefix = grading_user_prefix(uid)
        users = sorted(u for u in json.loads(self._call("to list users", self.admin.user_list) or "{}")
                       if u.startswith(prefix))  # fmt: skip
        policies = json.loads(self._call("to list policies", self.admin.policy_list) or "{}")
        for name in sorted(set(users) | {p for p in policies if p.startswith(prefix)}):
            self._remove(name, name)
        return users

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
