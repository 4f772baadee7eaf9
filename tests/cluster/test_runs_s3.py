"""`a2rl runs` against the real MinIO: a run exported from a directory store, imported into S3,
listed, compared, deleted with batched DeleteObjects, and imported again byte for byte."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from a2rl_cli import main

from a2rl.store.local import LocalStore
from a2rl.store.open import open_store
from tests.support.report_runs import sample_run

pytestmark = [pytest.mark.minio]


def test_runs_round_trip_through_s3(
    minio: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", minio.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", minio.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", minio.secret_key)
    monkeypatch.setenv("A2RL_HOME", str(tmp_path / "home"))
    local = LocalStore(tmp_path / "store")
    w = sample_run(tmp_path, local)
    tar = tmp_path / "run.tar"
    assert main(["runs", "export", "demo", "-o", str(tar), "--store", str(local.root)]) == 0
    uri = f"s3://a2rl-runs/{uuid.uuid4().hex[:8]}/team"
    s3 = open_store(uri)
    s3.put_json("baselines/arith/x/arith-1.json", {"score": 5.0})
    expected = {k: local.get_bytes(k) for k in local.list(w.layout.prefix)}

    assert main(["runs", "import", str(tar), "--store", uri]) == 0
    assert {k: s3.get_bytes(k) for k in s3.list(w.layout.prefix)} == expected
    capsys.readouterr()
    assert main(["runs", "list", "--json", "--store", uri]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["ref"] == "demo-0123456789ab" and row["best_score"] == 42.5 and row["state"] == "completed"
    assert main(["runs", "compare", "demo", "--store", uri]) == 0
    assert "42.5 (#3)" in capsys.readouterr().out

    assert main(["runs", "rm", "demo", "--yes", "--store", uri]) == 0
    assert list(s3.list(w.layout.prefix)) == []
    assert s3.exists("baselines/arith/x/arith-1.json")
    assert main(["runs", "import", str(tar), "--store", uri]) == 0
    assert {k: s3.get_bytes(k) for k in s3.list(w.layout.prefix)} == expected
