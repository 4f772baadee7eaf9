"""Per-run store credentials on a real MinIO (`a2rl.store.scoped`, `a2rl_operator.store_access`):
what a run's keys reach, what each grading pod's keys reach (eval, held-out fetch, report), and
the fallback when the store refuses to create them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from a2rl_operator.config import OperatorConfig
from a2rl_operator.store_access import run_credentials

from a2rl.api.benchrun import BenchRunSpec
from a2rl.errors import A2rlError
from a2rl.store.layout import RunLayout
from a2rl.store.s3 import S3Store
from a2rl.store.scoped import (
    MinioScoper,
    ScopeUnavailableError,
    eval_policy,
    eval_user,
    grading_user_prefix,
    heldout_policy,
    heldout_user,
    report_policy,
    report_user,
    run_policy,
)

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


def _seed(root: S3Store, layout: RunLayout, other: RunLayout) -> None:
    """A staged arith and gsm8k, the run's submissions 0 and 1, another team's run, the cache."""
    for key, data in {"data/arith/1-seed0/heldout/manifest.json": b"gold-arith",
                      "data/gsm8k/1-seed0/heldout/manifest.json": b"gold-gsm8k",
                      layout.submission_manifest(0): b"{}", layout.submission_result(0): b'{"score": 12.5}',
                      layout.submission_manifest(1): b"{}", layout.blob("ab12"): b"weights",
                      layout.revision(0): b"{}", layout.run_json: b"{}",
                      other.submission_result(1): b'{"score": 80.0}', other.blob("cd34"): b"rival weights",
                      "baselines/arith/d/v.json": b'{"score": 12.5}'}.items():  # fmt: skip
        root.put_bytes(key, data)


def _denied(call: Any, *args: Any) -> None:
    with pytest.raises(Exception, match="AccessDenied"):
        result = call(*args)
        if hasattr(result, "__next__"):
            list(result)


def test_an_eval_pods_keys_restore_its_snapshot_and_write_its_result_and_nothing_else(minio: Any) -> None:
    """What a parser exploit in eval pod 1 could do with its keys: read submission 1 and the run's
    blobs, write its own result; not another run's objects, not the bucket's listing, not held-out
    data (its own task's included: the init container fetched it), not another submission's
    result, not the seal, not the baseline cache; no deletes; no new users or policies."""
    root = _s3(minio, minio.access_key, minio.secret_key)
    layout = RunLayout("team-a", "sft-qwen", str(uuid.uuid4()))
    other = RunLayout("team-b", "rival", str(uuid.uuid4()))
    _seed(root, layout, other)
    scoper = MinioScoper(minio.endpoint, minio.access_key, minio.secret_key)
    creds = scoper.grant_user(eval_user(layout.uid, 1), eval_policy(BUCKET, ROOT, layout, 1))
    assert scoper.grant_user(eval_user(layout.uid, 1), eval_policy(BUCKET, ROOT, layout, 1)) == creds
    ev = _s3(minio, creds.access_key, creds.secret_key)
    assert (
        ev.get_bytes(layout.submission_manifest(1)) == b"{}"
        and ev.get_bytes(layout.blob("ab12")) == b"weights"
    )
    assert ev.get_bytes(layout.submission_manifest(0)) == b"{}"  # the base model (the parameter bound)
    ev.put_bytes(layout.submission_details(1), b"{}\n")
    ev.put_bytes(layout.submission_result(1), b'{"score": 40.0}')
    ev.put_bytes(layout.trace_part("eval", 7, "f00d", 0), b"{}\n")
    for key in (other.submission_result(1), other.blob("cd34"), "data/arith/1-seed0/heldout/manifest.json",
                "data/gsm8k/1-seed0/heldout/manifest.json", layout.submission_result(0), layout.run_json,
                layout.revision(0), "baselines/arith/d/v.json"):  # fmt: skip
        _denied(ev.get_bytes, key)
    for prefix in ("", "team-b", "data", "data/arith/1-seed0/heldout", layout.prefix, layout.submissions):
        _denied(ev.list, prefix)
    recorder_spans = layout.trace_part("recorder", 1, "beef", 0)
    for key in (layout.submission_result(0), layout.submission_seal(1), other.submission_result(1),
                "baselines/arith/d/v.json", recorder_spans, layout.run_json):  # fmt: skip
        _denied(ev.put_bytes, key, b'{"score": 100.0}')
    _denied(ev.delete, layout.submission_result(1))
    assert root.get_bytes(layout.submission_result(0)) == b'{"score": 12.5}'  # untouched
    assert root.get_bytes(other.submission_result(1)) == b'{"score": 80.0}'
    admin = MinioScoper(minio.endpoint, creds.access_key, creds.secret_key)
    with pytest.raises(ScopeUnavailableError):  # no user of its own making, no policy
        admin.grant_user(eval_user(layout.uid, 2), eval_policy(BUCKET, "", layout, 2))
    with pytest.raises(ScopeUnavailableError):
        admin.grant(layout.uid, {"Version": "2012-10-17", "Statement": []})
    scoper.revoke_user(creds.access_key)
    with pytest.raises(Exception, match="InvalidAccessKeyId"):
        ev.get_bytes(layout.submission_manifest(1))


def test_the_heldout_reader_and_the_report_reach_their_part_only(minio: Any) -> None:
    root = _s3(minio, minio.access_key, minio.secret_key)
    layout = RunLayout("team-a", "sft-qwen", str(uuid.uuid4()))
    other = RunLayout("team-b", "rival", str(uuid.uuid4()))
    _seed(root, layout, other)
    scoper = MinioScoper(minio.endpoint, minio.access_key, minio.secret_key)
    held = scoper.grant_user(
        heldout_user(layout.uid), heldout_policy(BUCKET, ROOT, "data/arith/1-seed0/heldout")
    )
    h = _s3(minio, held.access_key, held.secret_key)
    assert h.get_bytes("data/arith/1-seed0/heldout/manifest.json") == b"gold-arith"
    listed = list(h.list("data/arith/1-seed0/heldout"))
    assert "data/arith/1-seed0/heldout/manifest.json" in listed
    assert all(k.startswith("data/arith/1-seed0/heldout/") for k in listed)
    for key in ("data/gsm8k/1-seed0/heldout/manifest.json", layout.blob("ab12"), other.submission_result(1)):
        _denied(h.get_bytes, key)
    _denied(h.put_bytes, "data/arith/1-seed0/heldout/manifest.json", b"forged")
    _denied(h.list, "data")
    rep = scoper.grant_user(report_user(layout.uid), report_policy(BUCKET, ROOT, layout))
    r = _s3(minio, rep.access_key, rep.secret_key)
    assert r.get_bytes(layout.submission_result(0)) == b'{"score": 12.5}'
    assert layout.submission_result(0) in set(r.list(layout.prefix))
    r.put_bytes(f"{layout.report_dir}/report.json", b"{}")
    r.put_bytes(layout.traces, b"")
    r.put_bytes(layout.trace_part("report", 9, "cafe", 0), b"")
    for key in (
        "data/arith/1-seed0/heldout/manifest.json",
        other.submission_result(1),
        "baselines/arith/d/v.json",
    ):
        _denied(r.get_bytes, key)
    for key in (layout.submission_result(0), layout.submission_seal(0), other.submission_result(1)):
        _denied(r.put_bytes, key, b'{"score": 100.0}')
    _denied(r.list, "team-b")
    # The finalizer's sweep: every grading user of this run (and its policy), no other run's.
    ev = scoper.grant_user(eval_user(layout.uid, 1), eval_policy(BUCKET, ROOT, layout, 1))
    rival = scoper.grant_user(eval_user(other.uid, 1), eval_policy(BUCKET, ROOT, other, 1))
    assert scoper.revoke_grading(layout.uid) == sorted([held.access_key, rep.access_key, ev.access_key])
    assert scoper.revoke_grading(layout.uid) == []
    with pytest.raises(A2rlError, match="InvalidAccessKeyId"):
        _s3(minio, rep.access_key, rep.secret_key)
    assert _s3(minio, rival.access_key, rival.secret_key).get_bytes(other.blob("cd34")) == b"rival weights"
    policies = json.loads(scoper.admin.policy_list())
    assert not [p for p in policies if p.startswith(grading_user_prefix(layout.uid))]
    scoper.revoke_grading(other.uid)
