"""Per-run store credentials, the pure parts: the policy's reach, when the operator scopes, and
when the finalizer removes a user (the MinIO side: tests/cluster/test_store_scoped.py)."""

from __future__ import annotations

import json
from typing import Any

from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests import children
from a2rl_operator.manifests.secret import grading_store_secret
from a2rl_operator.store_access import (
    ANNOTATION_STORE_USER,
    read_only_prefixes,
    revoke,
    run_credentials,
)

from a2rl.api.benchrun import BenchRunSpec
from a2rl.store.layout import RunLayout
from a2rl.store.scoped import RunCredentials, run_policy, run_secret, run_user

UID = "0d9c6a8e-1f2b-4c3d-8e9f-a0b1c2d3e4f5"
OPERATOR_KEYS = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "root",
                 "AWS_SECRET_ACCESS_KEY": "root-secret"}  # fmt: skip
CONFIG = OperatorConfig(store_uri="s3://runs/a2rl", store_credentials=OPERATOR_KEYS)


def benchrun(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["agent"]},
        "budget": {"wallTimeSeconds": 60},
        **spec,
    }
    return {"metadata": {"name": "demo", "namespace": "team-a", "uid": UID}, "spec": base}


def test_the_policy_reaches_the_run_models_and_train_split_and_nothing_else() -> None:
    spec = BenchRunSpec.model_validate(benchrun()["spec"])
    prefixes = read_only_prefixes(spec)
    assert prefixes[0] == "models" and prefixes[1].endswith("/train")
    policy = run_policy("runs", "a2rl", RunLayout("team-a", "demo", UID), prefixes)
    text = json.dumps(policy)
    assert "heldout" not in text and "baselines" not in text
    writes = [s for s in policy["Statement"] if "s3:PutObject" in s["Action"]]
    assert [s["Resource"] for s in writes] == [[f"arn:aws:s3:::runs/a2rl/team-a/demo-{UID}/*"]]
    assert all(s["Effect"] == "Allow" for s in policy["Statement"])
    listing = next(s for s in policy["Statement"] if s["Action"] == ["s3:ListBucket"])
    assert "*" not in listing["Condition"]["StringLike"]["s3:prefix"]


def test_keys_are_stable_per_run_and_differ_between_runs() -> None:
    assert run_user(UID) == run_user(UID) and len(run_user(UID)) <= 20
    assert run_secret("k", UID) == run_secret("k", UID) != run_secret("k", UID + "x")
    assert run_secret("k", UID) != run_secret("other-operator-key", UID)


def test_the_recorders_secret_holds_the_runs_keys_and_the_grading_secret_the_operators() -> None:
    run = benchrun()
    creds = RunCredentials("a2rl-run", "run-secret")
    (secret,) = [m for m in children(run, CONFIG, creds) if m["kind"] == "Secret"]
    assert secret["stringData"]["AWS_ACCESS_KEY_ID"] == "a2rl-run"
    assert secret["stringData"]["AWS_SECRET_ACCESS_KEY"] == "run-secret"
    (fallback,) = [m for m in children(run, CONFIG) if m["kind"] == "Secret"]
    assert fallback["stringData"]["AWS_ACCESS_KEY_ID"] == "root"
    spec = BenchRunSpec.model_validate(run["spec"])
    grading = grading_store_secret(run, spec, CONFIG)
    assert grading["metadata"]["name"] == "demo-grading-store"
    assert grading["stringData"]["AWS_ACCESS_KEY_ID"] == "root"


def test_no_scoping_for_a_runs_own_secret_or_when_off() -> None:
    own = benchrun(store={"secretRef": "my-keys"})
    access = run_credentials(own, BenchRunSpec.model_validate(own["spec"]), CONFIG)
    assert access.credentials is None and "secretRef" in access.reason
    run = benchrun()
    off = OperatorConfig(store_uri="s3://runs/a2rl", store_credentials=OPERATOR_KEYS,
                         scoped_store_credentials=False)  # fmt: skip
    assert run_credentials(run, BenchRunSpec.model_validate(run["spec"]), off).credentials is None
    local = OperatorConfig(store_uri="file:///srv/runs", store_credentials=OPERATOR_KEYS)
    access = run_credentials(run, BenchRunSpec.model_validate(run["spec"]), local)
    assert access.credentials is None and "not an S3 store" in access.reason


def test_the_finalizer_removes_only_the_user_the_operator_created() -> None:
    """No annotation, or one naming another user: nothing to remove (and no store call)."""
    assert revoke(benchrun(), CONFIG) == []
    forged = benchrun()
    forged["metadata"]["annotations"] = {ANNOTATION_STORE_USER: "someone-else"}
    assert revoke(forged, CONFIG) == []
