"""Per-run store credentials on a real MinIO (`a2rl.store.scoped`, `a2rl_operator.store_access`):
what a run's keys reach, and the fallback when the store refuses to create them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from a2rl_operator.config import OperatorConfig
from a2rl_operator.store_access import run_credentials

from a2rl.api.benchrun import BenchRunSpec
from a2rl.errors import A2rlError
from a2rl.store.layout import RunLayout
from a2rl.store.s3 import S3Store
from a2rl.store.scoped import MinioScoper, run_policy

pytestmark = pytest.mark.minio

BUCKET, ROOT = "a2rl-scoped", "runs"


def _s3(minio: Any, key: str, secret: str) -> S3Store:
    return S3Store(minio.endpoint.removeprefix("http://"), key, secret, BUCKET, ROOT)


def _spec() -> BenchRunSpec:
    return BenchRunSpec.model_validate({
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["agent"]},
        "budget": {"wallTimeSeconds": 60},
        "store": {"uri": f"s3://{BUCKET}/{ROOT}"},
    })  # fmt: skip


def test_a_runs_keys_reach_its_prefix_the_models_and_its_train_split_only(minio: Any) -> None:
    """Read-write in the run's prefix, read-only `models/` and the train split; no held-out
    artifact, no other run, no baseline cache (read, list or write); the same keys on a second
    grant; dead after revoke."""
    root = _s3(minio, minio.access_key, minio.secret_key)
    layout = RunLayout("team-a", "demo", str(uuid.uuid4()))
    for key, data in {"data/arith/1-seed0/heldout/heldout.jsonl": b"gold",
                      "data/arith/1-seed0/train/train.jsonl": b"train",
                      "models/blobs/abc": b"weights",
                      "team-a/other-0123456789ab/blobs/x": b"other",
                      "baselines/arith/d/v.json": b"{}"}.items():  # fmt: skip
        root.put_bytes(key, data)
    scoper = MinioScoper(minio.endpoint, minio.access_key, minio.secret_key)
    policy = run_policy(BUCKET, ROOT, layout, ("models", "data/arith/1-seed0/train"))
    creds = scoper.grant(layout.uid, policy)
    assert scoper.grant(layout.uid, policy) == creds  # a second reconcile: same user, same key
    run = _s3(minio, creds.access_key, creds.secret_key)
    run.put_bytes(layout.run_clock, b"{}")
    run.copy("models/blobs/abc", layout.blob("abc"))  # a `store:` base model copied into the run
    assert run.get_bytes(layout.blob("abc")) == b"weights"
    assert run.get_bytes("data/arith/1-seed0/train/train.jsonl") == b"train"
    assert sorted(run.list(layout.prefix)) == [layout.blob("abc"), layout.run_clock]
    run.delete(layout.run_clock)
    for key in ("data/arith/1-seed0/heldout/heldout.jsonl", "team-a/other-0123456789ab/blobs/x",
                "baselines/arith/d/v.json"):  # fmt: skip
        with pytest.raises(Exception, match="AccessDenied"):
            run.get_bytes(key)
    for prefix in ("data/arith/1-seed0/heldout", "team-a", ""):
        with pytest.raises(Exception, match="AccessDenied"):
            list(run.list(prefix))
    with pytest.raises(Exception, match="AccessDenied"):
        run.put_bytes("baselines/arith/d/v.json", b"poisoned")
    scoper.revoke(layout.uid)
    scoper.revoke(layout.uid)  # already gone: not an error
    with pytest.raises(Exception, match="InvalidAccessKeyId"):
        run.get_bytes(layout.blob("abc"))


def test_a_store_that_refuses_falls_back_to_the_operators_keys_and_says_why(minio: Any) -> None:
    """Keys without admin rights (a run's own) cannot create users: the run gets the operator's
    keys, and the reason names the refusal; an unreachable admin endpoint likewise."""
    layout = RunLayout("team-a", "fallback", str(uuid.uuid4()))
    scoper = MinioScoper(minio.endpoint, minio.access_key, minio.secret_key)
    creds = scoper.grant(layout.uid, run_policy(BUCKET, ROOT, layout))
    body = {"metadata": {"namespace": "team-a", "name": "x", "uid": str(uuid.uuid4())}}
    weak = {"AWS_ENDPOINT_URL": minio.endpoint, "AWS_ACCESS_KEY_ID": creds.access_key,
            "AWS_SECRET_ACCESS_KEY": creds.secret_key}  # fmt: skip
    access = run_credentials(body, _spec(), OperatorConfig(store_credentials=weak))
    assert access.credentials is None and "operator's store keys" in access.reason
    assert "refused" in access.reason
    down = {**weak, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    access = run_credentials(body, _spec(), OperatorConfig(store_credentials=down))
    assert access.credentials is None and "refused" in access.reason
    off = OperatorConfig(store_credentials=weak, scoped_store_credentials=False)
    assert run_credentials(body, _spec(), off).credentials is None
    scoper.revoke(layout.uid)
    with pytest.raises(A2rlError):  # and the refused keys are really gone
        _s3(minio, creds.access_key, creds.secret_key)
