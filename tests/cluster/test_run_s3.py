"""`a2rl run FILE --store s3://BUCKET/PREFIX` end to end against the real MinIO.

The store's endpoint and keys come from the standard variables (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), as `hack/testenv up` prints them. A tiny scripted
agent writes code and submits a copy of the base model; baseline, submission, code revisions,
logs and report must all land in MinIO, and the agent must not see the store's keys.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli import main

from a2rl.store.cas import TreeManifest
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store
from tests.support.run_support import SUBMIT_BASE_COPY, arith_spec, benchrun_doc

pytestmark = [pytest.mark.minio, pytest.mark.slow]

AGENT = "import json, os, shutil, urllib.request\n" + SUBMIT_BASE_COPY


def test_local_run_with_an_s3_store(
    minio: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", minio.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", minio.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", minio.secret_key)
    monkeypatch.setenv("A2RL_HOME", str(tmp_path / "home"))
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    doc = benchrun_doc("s3-run", arith_spec(agent, wall_s=120, grace_s=2))
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    uri = f"s3://a2rl-runs/{uuid.uuid4().hex[:8]}/team"

    code = main(["run", str(path), "--store", uri])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]

    store = open_store(uri)  # the same variables, read again
    run_jsons = [k for k in store.list("local") if k.endswith("/run.json")]
    assert len(run_jsons) == 1, run_jsons
    layout = RunLayout.from_prefix(run_jsons[0].rsplit("/", 1)[0])
    assert layout.name == "s3-run"
    run = store.get_json(layout.run_json)
    assert run["end_reason"] == "completed" and run["ended_at"]

    baseline = store.get_json(layout.submission_result(0))
    result = store.get_json(layout.submission_result(1))
    assert baseline["score"] is not None and result["index"] == 1 and result["task"] == "arith"
    manifest = store.get_json(layout.submission_manifest(1))
    assert manifest["model_path"] == "output/v1" and manifest["identical_to_base"] is True
    for entry in TreeManifest.from_json(manifest["model"]).entries:
        assert store.exists(layout.blob(entry.sha256)), entry.path
    revisions = list(store.list(layout.revisions))
    assert revisions
    tree = TreeManifest.from_json(store.get_json(revisions[-1])["tree"])
    assert [e.path for e in tree.entries] == ["train.py"]
    assert store.exists(f"{layout.report_dir}/report.json")
    assert [k for k in store.list("baselines/arith") if k.endswith(".json")]
    agent_log = store.get_bytes(layout.log("agent")).decode()
    assert "secrets visible: []" in agent_log
    reply = json.loads(agent_log.split("agent: submit -> ", 1)[1].splitlines()[0])
    assert reply["submission_id"] == 1 and reply["score"] == baseline["score"]
    assert uri in out
    # Nothing of the run was written to the local default store.
    assert not (tmp_path / "home" / "store" / "local").exists()
