"""Artifact retention of the finalizer: the final BenchRun record and where it goes (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from a2rl_operator.config import OperatorConfig
from a2rl_operator.retention import final_record, record_key, retain, retention_target

from a2rl.errors import A2rlError


def run(store: dict[str, Any] | None = None, **spec_extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["agent"]},
        "budget": {"wallTimeSeconds": 60},
        **spec_extra,
    }
    if store is not None:
        spec["store"] = store
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {
            "name": "demo",
            "namespace": "team-a",
            "uid": "0f0e-uid",
            "generation": 1,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "deletionTimestamp": "2025-01-01T01:00:00Z",
            "labels": {"team": "a"},
            "annotations": {"a2rl.dev/last-handled-configuration": "{}"},
            "managedFields": [{"manager": "kubectl"}],
            "finalizers": ["a2rl.dev/artifact-retention"],
        },
        "spec": spec,
        "status": {"phase": "Succeeded", "conditions": [{"type": "Succeeded", "status": "True"}]},
    }


def test_record_keeps_spec_status_and_identity_but_no_bookkeeping() -> None:
    record = final_record(run()).to_json()
    assert record_key(run()) == "team-a/demo-0f0e-uid/benchrun.json"
    assert record["metadata"] == {
        "name": "demo",
        "namespace": "team-a",
        "uid": "0f0e-uid",
        "generation": 1,
        "labels": {"team": "a"},
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "deletionTimestamp": "2025-01-01T01:00:00Z",
    }
    assert record["spec"]["task"] == "arith" and record["status"]["phase"] == "Succeeded"


CREDS = {"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}


def test_target_is_the_run_store_or_the_operator_default(tmp_path: Path) -> None:
    default = OperatorConfig(store_uri="s3://ops/runs", store_credentials=CREDS)
    assert retention_target(run(), default) == "s3://ops/runs"
    assert retention_target(run({"uri": "s3://mine/x"}), default) == "s3://mine/x"
    # The run's own credentials live in a Secret the operator may not read: no record.
    assert retention_target(run({"uri": "s3://mine/x", "secretRef": "creds"}), default) is None
    assert retention_target(run(), OperatorConfig()) is None
    assert retention_target(run(task=None), default) is None  # never accepted
    # An S3 store the operator holds no credentials for: retrying could never succeed.
    no_creds = OperatorConfig(store_uri="s3://ops/runs")
    assert retention_target(run(), no_creds) is None
    assert retention_target(run({"uri": str(tmp_path)}), no_creds) == str(tmp_path)


def test_retain_writes_the_record_into_a_real_store(tmp_path: Path) -> None:
    where = retain(run({"uri": str(tmp_path / "store")}), OperatorConfig())
    path = tmp_path / "store" / "team-a" / "demo-0f0e-uid" / "benchrun.json"
    assert where is not None and where.endswith("team-a/demo-0f0e-uid/benchrun.json")
    assert json.loads(path.read_text())["status"]["conditions"][0]["type"] == "Succeeded"
    assert retain(run(), OperatorConfig()) is None


def test_unreachable_store_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The finalizer retries on an error; it must not be swallowed."""
    creds = {**CREDS, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}  # discard port: nothing listens
    for key, value in creds.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(A2rlError, match="unreachable"):
        retain(run(), OperatorConfig(store_uri="s3://bucket/runs", store_credentials=creds))
