"""Store keys of the grading pods, the pure parts (the MinIO side:
tests/cluster/test_store_scoped.py): eval pods parse untrusted model files, so each gets keys that
reach its own submission only; the `fetch-heldout` init container the run's held-out artifact only;
the report pod the run's records in and `report/` out. Never the operator's keys where the store
can scope them; the operator's as before where it cannot."""

from __future__ import annotations

import json
from typing import Any

import pytest
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests import parse_spec
from a2rl_operator.manifests.eval_job import EvalTarget, eval_job
from a2rl_operator.manifests.report_job import report_job
from a2rl_operator.manifests.secret import eval_store_secret, grading_store_secret, report_store_secret
from a2rl_operator.store_access import (
    ANNOTATION_STORE_USER,
    eval_credentials,
    heldout_prefix,
    report_credentials,
    revoke_grading_user,
)

from a2rl.store.layout import RunLayout
from a2rl.store.scoped import (
    RunCredentials,
    eval_policy,
    eval_user,
    grading_user_prefix,
    heldout_policy,
    heldout_user,
    report_policy,
    report_user,
    run_user,
    user_secret,
)

UID = "5f0c2a9e-7d41-4b8e-9c3a-2e6f1d8b4a70"
OTHER_UID = "9a1b7c3d-0e2f-4a5b-8c6d-7e8f9a0b1c2d"
OPERATOR_KEYS = {"AWS_ENDPOINT_URL": "http://10.0.0.9:9000", "AWS_ACCESS_KEY_ID": "minio-root",
                 "AWS_SECRET_ACCESS_KEY": "operator-root-secret"}  # fmt: skip
CONFIG = OperatorConfig(store_uri="s3://a2rl-runs/prod", store_credentials=OPERATOR_KEYS)
GRADING = GradingConfig(grader_image="ghcr.io/a2rl/grader:0.1.0")
LAYOUT = RunLayout("team-a", "sft-qwen", UID)
OWN = f"prod/team-a/sft-qwen-{UID}"


def benchrun(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["agent"]},
        "budget": {"wallTimeSeconds": 600},
        **spec,
    }
    return {"metadata": {"name": "sft-qwen", "namespace": "team-a", "uid": UID}, "spec": base}


def statements(policy: dict[str, Any], action: str) -> list[str]:
    return [r for s in policy["Statement"] if action in s["Action"] for r in s["Resource"]]


def listable(policy: dict[str, Any]) -> list[str]:
    (stmt,) = [s for s in policy["Statement"] if s["Action"] == ["s3:ListBucket"]]
    return list(stmt["Condition"]["StringLike"]["s3:prefix"])


def test_an_eval_pods_policy_reads_its_submission_and_blobs_and_writes_its_result_only() -> None:
    policy = eval_policy("a2rl-runs", "prod", LAYOUT, 3)
    arn = "arn:aws:s3:::a2rl-runs"
    assert statements(policy, "s3:GetObject") == [
        f"{arn}/{OWN}/submissions/00003/*",
        f"{arn}/{OWN}/blobs/*",
        f"{arn}/{OWN}/submissions/00000/manifest.json",  # the base model: the parameter bound
    ]
    assert statements(policy, "s3:PutObject") == [
        f"{arn}/{OWN}/submissions/00003/result.json",
        f"{arn}/{OWN}/submissions/00003/details.jsonl",
        f"{arn}/{OWN}/traces/eval-*",
    ]
    text = json.dumps(policy)
    # Not the trusted side's seal, not another submission, no delete, no held-out data, no cache.
    for absent in (
        "seal.json",
        "00002",
        "00000/result",
        "00000/*",
        "DeleteObject",
        "heldout",
        "baselines",
        "data/",
    ):
        assert absent not in text
    assert all(s["Effect"] == "Allow" for s in policy["Statement"])
    assert "*" not in listable(policy) and "" not in listable(policy)


def test_the_heldout_reader_reads_its_tasks_artifact_and_the_report_writes_report_only() -> None:
    spec = parse_spec(benchrun())
    key = heldout_prefix(spec)
    assert key.startswith("data/arith/") and key.endswith("-seed0/heldout")
    held = heldout_policy("a2rl-runs", "prod", key)
    assert statements(held, "s3:GetObject") == [f"arn:aws:s3:::a2rl-runs/prod/{key}/*"]
    assert statements(held, "s3:PutObject") == [] and listable(held) == [f"prod/{key}", f"prod/{key}/*"]
    report = report_policy("a2rl-runs", "prod", LAYOUT)
    arn = "arn:aws:s3:::a2rl-runs"
    assert statements(report, "s3:GetObject") == [f"{arn}/{OWN}/*"]
    assert statements(report, "s3:PutObject") == [
        f"{arn}/{OWN}/report/*", f"{arn}/{OWN}/traces.jsonl", f"{arn}/{OWN}/traces/report-*"
    ]  # fmt: skip
    assert "heldout" not in json.dumps(report)


def test_grading_users_are_stable_per_run_and_pod_distinct_and_short() -> None:
    users = [heldout_user(UID), report_user(UID), eval_user(UID, 0), eval_user(UID, 1), eval_user(UID, 99999)]
    assert len(set(users)) == len(users) and all(len(u) <= 20 for u in users)
    assert all(u.startswith(grading_user_prefix(UID)) for u in users)
    assert not any(u.startswith(grading_user_prefix(OTHER_UID)) for u in users)
    assert run_user(UID) not in users and not run_user(UID).startswith(grading_user_prefix(UID))
    assert user_secret("k", users[2]) == user_secret("k", users[2]) != user_secret("k", users[3])
    assert user_secret("k", users[2]) != user_secret("another-operator-key", users[2])


def test_each_grading_container_gets_its_own_secret_with_its_own_keys() -> None:
    run = benchrun()
    spec = parse_spec(run)
    heldout = RunCredentials(heldout_user(UID), "held-secret")
    ev = RunCredentials(eval_user(UID, 3), "eval-secret")
    rep = RunCredentials(report_user(UID), "report-secret")
    secrets = {
        "fetch-heldout": grading_store_secret(run, spec, CONFIG, heldout),
        "eval": eval_store_secret(run, spec, CONFIG, 3, ev),
        "report": report_store_secret(run, spec, CONFIG, rep),
    }
    for secret in secrets.values():
        data = secret["stringData"]
        assert data["AWS_SECRET_ACCESS_KEY"] != OPERATOR_KEYS["AWS_SECRET_ACCESS_KEY"]
        assert data["AWS_ENDPOINT_URL"] == OPERATOR_KEYS["AWS_ENDPOINT_URL"] and secret["immutable"] is True
        assert secret["metadata"]["ownerReferences"][0]["uid"] == UID
    assert secrets["eval"]["metadata"]["name"] == "sft-qwen-eval-00003-store"
    assert secrets["eval"]["stringData"]["AWS_ACCESS_KEY_ID"] == ev.access_key
    job = eval_job(run, {"metadata": {"name": "sft-qwen-00003", "uid": "sub-uid"}}, spec,
                   EvalTarget(index=3, store_uri="s3://a2rl-runs/prod", heldout_key=heldout_prefix(spec)),
                   GRADING)  # fmt: skip
    pod = job["spec"]["template"]["spec"]
    refs = {c["name"]: c["envFrom"] for c in pod["initContainers"] + pod["containers"]}
    assert refs == {
        "fetch-heldout": [{"secretRef": {"name": "sft-qwen-grading-store"}}],
        "eval": [{"secretRef": {"name": "sft-qwen-eval-00003-store"}}],
    }
    (report,) = report_job(run, spec, "s3://a2rl-runs/prod", GRADING)["spec"]["template"]["spec"][
        "containers"
    ]
    assert report["envFrom"] == [{"secretRef": {"name": "sft-qwen-report-store"}}]
    # Without scoped keys (a store that cannot): the operator's, as before.
    fallback = eval_store_secret(run, spec, CONFIG, 3, None)["stringData"]
    assert fallback["AWS_ACCESS_KEY_ID"] == "minio-root"


NOT_SCOPED = OperatorConfig(
    store_uri="s3://a2rl-runs/prod", store_credentials=OPERATOR_KEYS, scoped_store_credentials=False
)
FILE_STORE = OperatorConfig(store_uri="file:///srv/runs", store_credentials=OPERATOR_KEYS)
NO_KEYS = OperatorConfig(store_uri="s3://a2rl-runs/prod")


@pytest.mark.parametrize(
    ("spec", "config", "reason"),
    [
        ({"store": {"secretRef": "my-keys"}}, CONFIG, "secretRef"),
        ({}, NOT_SCOPED, "off"),
        ({}, FILE_STORE, "not an S3 store"),
        ({}, NO_KEYS, "no S3 endpoint"),
    ],
)
def test_no_grading_users_where_the_store_cannot_scope(spec: dict[str, Any], config: OperatorConfig,
                                                         reason: str) -> None:  # fmt: skip
    run = benchrun(**spec)
    for access in (
        eval_credentials(run, parse_spec(run), config, 1),
        report_credentials(run, parse_spec(run), config),
    ):
        assert access.credentials is None and reason in access.reason


def test_a_grading_user_is_removed_only_for_a_run_the_operator_scoped() -> None:
    """No annotation (the run got the operator's keys) or one naming another user: no store call."""
    run = benchrun()
    assert revoke_grading_user(run, parse_spec(run), CONFIG, eval_user(UID, 1)) is False
    run["metadata"]["annotations"] = {ANNOTATION_STORE_USER: "someone-else"}
    assert revoke_grading_user(run, parse_spec(run), CONFIG, eval_user(UID, 1)) is False
