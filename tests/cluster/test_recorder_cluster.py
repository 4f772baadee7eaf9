"""The recorder in cluster mode on the real control plane and the real MinIO.

`a2rl recorder serve` runs as a process configured by environment exactly like the sidecar:
S3 store, the run's ServiceAccount token (the operator's Role: create/get BenchSubmissions), no
held-out data. The test plays the agent (HTTP) and the operator (it patches the BenchSubmission
status with admin credentials). Fault tests stop MinIO for real.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from a2rl.constants import BENCHRUN_KIND, LABEL_RUN_UID, LABEL_SUBMISSION_INDEX, RECORDER_DRAIN_MARGIN_S
from a2rl.store.base import ObjectStore
from a2rl.store.cas import TreeManifest, hash_tree, restore_tree
from a2rl.store.layout import RunLayout
from tests.support.recorder_cluster_support import (
    ClusterRun,
    RecorderProc,
    make_cluster_run,
    make_workspace,
    write_model,
)
from tests.testenv.controlplane import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

REPO = Path(__file__).resolve().parents[2]
OUTAGE_S = 30


@pytest.fixture(scope="module")
def admin(control_plane: Any) -> client.ApiClient:
    from tests.support.operator_install import install_crds

    api = control_plane.api_client()
    install_crds(api, REPO / "crds")
    return api


@pytest.fixture
def crun(control_plane: Any, admin: client.ApiClient, namespace: str, minio: Any) -> ClusterRun:
    return make_cluster_run(control_plane, admin, namespace, minio)


@pytest.fixture
def recorders(tmp_path: Path) -> Iterator[list[RecorderProc]]:
    started: list[RecorderProc] = []
    yield started
    for rec in started:
        rec.close()
        print(f"--- recorder log {rec.log_path} ---\n{rec.log()[-4000:]}")


def start_recorder(
    crun: ClusterRun, tmp_path: Path, started: list[RecorderProc], **extra: str
) -> RecorderProc:
    ws = tmp_path / "ws"
    rec = RecorderProc(
        crun.recorder_env(ws, tmp_path / "spool", **extra), tmp_path / f"recorder-{len(started)}.log"
    )
    started.append(rec)
    return rec


def missing_blobs(store: ObjectStore, layout: RunLayout, tree: dict[str, Any]) -> list[str]:
    manifest = TreeManifest.from_json(tree)
    return [e.path for e in manifest.entries if not store.exists(layout.blob(e.sha256))]


def submit_in_background(rec: RecorderProc, model_path: str) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        t0 = time.monotonic()
        out["status"], out["body"] = rec.submit(model_path)
        out["seconds"] = time.monotonic() - t0

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def same_tree(a: Path, b: Path) -> bool:
    return hash_tree(a).digest == hash_tree(b).digest


def test_submit_creates_a_benchsubmission_and_answers_with_the_operators_score(
    crun: ClusterRun, tmp_path: Path, recorders: list[RecorderProc]
) -> None:
    ws = make_workspace(tmp_path)
    (ws / "code" / "train.py").write_text("print('train')\n")
    model = write_model(ws / "output" / "v1", os.urandom(2 << 20))
    crun.create_baseline(score=10.0)
    rec = start_recorder(crun, tmp_path, recorders)

    thread, out = submit_in_background(rec, "output/v1")
    sub = crun.wait_submission(1)
    # The object: owned by the BenchRun, labelled, the snapshot's digests in the spec.
    meta, spec = sub["metadata"], sub["spec"]
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (BENCHRUN_KIND, crun.name, crun.uid)
    assert meta["labels"][LABEL_RUN_UID] == crun.uid and meta["labels"][LABEL_SUBMISSION_INDEX] == "1"
    assert spec["runName"] == crun.name and spec["index"] == 1 and spec["modelPath"] == "output/v1"
    assert spec["modelDigest"] == hash_tree(model).digest
    assert spec["codeRevision"] == 1 and spec["identicalToBase"] is False
    store, layout = crun.store(), crun.layout
    assert spec["manifestUri"] == f"{crun.store_uri}/{layout.submission_manifest(1)}"
    # Everything the eval Job needs is in MinIO before the object exists.
    manifest = store.get_json(layout.submission_manifest(1))
    assert manifest["model_digest"] == spec["modelDigest"] and manifest["code_digest"] == spec["codeDigest"]
    assert missing_blobs(store, layout, manifest["model"]) == []
    restore_tree(store, layout, TreeManifest.from_json(manifest["model"]), tmp_path / "restored")
    assert same_tree(tmp_path / "restored", model)
    revision = store.get_json(layout.revision(1))
    assert revision["reason"] == "submit" and missing_blobs(store, layout, revision["tree"]) == []
    assert manifest["snapshot"]["bytes_uploaded"] >= 2 << 20

    # The run's ServiceAccount (the recorder's credentials) cannot write a score.
    sa_api = k8s_config.new_client_from_config(config_file=str(crun.kubeconfig))
    with pytest.raises(ApiException) as denied:
        crun.set_status(1, "Succeeded", score=100.0, api=sa_api)
    assert denied.value.status == 403
    assert thread.is_alive(), "the agent waits for the evaluation"

    crun.set_status(1, "Succeeded", score=42.5)
    thread.join(60)
    assert out["status"] == 200, out
    body = out["body"]
    assert body["submission_id"] == 1 and body["score"] == 42.5
    assert body["baseline_score"] == 10.0 and body["improvement"] == 32.5
    assert body["best"] == {"submission_id": 1, "score": 42.5} and body["total_submissions"] == 1
    assert "error" not in body

    # A second submission of the same bytes uploads nothing new; a failed evaluation is reported.
    shutil.copytree(model, ws / "output" / "v2")
    thread, out = submit_in_background(rec, str(ws / "output" / "v2"))
    sub2 = crun.wait_submission(2)
    assert sub2["spec"]["modelDigest"] == spec["modelDigest"] and sub2["spec"]["codeRevision"] == 1
    manifest2 = store.get_json(layout.submission_manifest(2))
    assert manifest2["snapshot"] == {**manifest2["snapshot"], "files_uploaded": 0, "bytes_uploaded": 0}
    crun.set_status(2, "Failed", error="the model does not load: bad config")
    thread.join(60)
    assert out["status"] == 200, out
    body = out["body"]
    assert body["submission_id"] == 2 and body["score"] is None and body["improvement"] is None
    assert body["error"] == "the model does not load: bad config"
    assert body["best"] == {"submission_id": 1, "score": 42.5} and body["total_submissions"] == 2
    status, listed = rec.get("/submissions")
    assert status == 200
    assert [(s["submission_id"], s["score"]) for s in listed] == [(1, 42.5), (2, None)]
    assert rec.terminate() == 0


def test_sigterm_flushes_the_last_code_revision_even_through_a_store_outage(
    crun: ClusterRun, tmp_path: Path, recorders: list[RecorderProc], minio: Any
) -> None:
    ws = make_workspace(tmp_path)
    (ws / "code" / "train.py").write_text("lr = 1e-4\n")
    rec = start_recorder(crun, tmp_path, recorders)
    assert rec.get("/health")[0] == 200
    minio.stop()
    try:
        (ws / "code" / "train.py").write_text("lr = 3e-5  # the agent's last edit\n")
        (ws / "code" / "eval.py").write_text("print('eval')\n")
        rec.proc.send_signal(signal.SIGTERM)
        time.sleep(5)
        assert rec.proc.poll() is None, "the recorder must not exit before the revision is stored"
        assert list((tmp_path / "spool").glob("*.json")), "the revision waits in the spool"
    finally:
        minio.start()
    assert rec.proc.wait(60) == 0
    store, layout = crun.store(), crun.layout
    (key,) = list(store.list(layout.revisions))
    revision = store.get_json(key)
    assert revision["reason"] == "final"
    restore_tree(store, layout, TreeManifest.from_json(revision["tree"]), tmp_path / "code-restored")
    assert same_tree(tmp_path / "code-restored", ws / "code")
    assert not list((tmp_path / "spool").iterdir())


def test_sigterm_mid_evaluation_ends_once_the_submission_is_recorded_and_says_so(
    crun: ClusterRun, tmp_path: Path, recorders: list[RecorderProc]
) -> None:
    """The evaluation goes on in the cluster (the operator records its score), so the drain does
    not wait for it: seconds, not the drain timeout (90 s here) nor the eval's own (300 s)."""
    ws = make_workspace(tmp_path)
    write_model(ws / "output" / "v1", os.urandom(1 << 20))
    crun.create_baseline(score=10.0)
    message = tmp_path / "termination-log"
    rec = start_recorder(crun, tmp_path, recorders, A2RL_TERMINATION_MESSAGE_PATH=str(message))
    thread, out = submit_in_background(rec, "output/v1")
    crun.wait_submission(1)
    started = time.monotonic()
    assert rec.terminate(timeout=60) == 0
    drained_s = time.monotonic() - started
    thread.join(10)
    print(f"drain with an evaluation in flight: {drained_s:.1f} s; {message.read_text().strip()!r}")
    assert drained_s < 15
    assert out["status"] == 200 and out["body"]["score"] is None
    assert "the run is ending" in out["body"]["error"]
    text = message.read_text()
    assert text.startswith("drained in ") and "everything recorded is in the store" in text
    # Its record is whole and the object stays for the operator to evaluate.
    assert crun.get_submission(1) is not None
    manifest = crun.store().get_json(crun.layout.submission_manifest(1))
    assert missing_blobs(crun.store(), crun.layout, manifest["model"]) == []


def test_a_drain_the_store_outlasts_ends_at_its_deadline_and_says_what_was_lost(
    crun: ClusterRun, tmp_path: Path, recorders: list[RecorderProc], minio: Any
) -> None:
    """One deadline for the whole drain (8 s here) plus the margin the pod's grace includes; the
    termination message counts what stayed in the spool."""
    ws = make_workspace(tmp_path)
    (ws / "code" / "train.py").write_text("lr = 1e-4\n")
    message = tmp_path / "termination-log"
    rec = start_recorder(
        crun, tmp_path, recorders, A2RL_RECORDER_DRAIN_TIMEOUT="8", A2RL_TERMINATION_MESSAGE_PATH=str(message)
    )
    assert rec.get("/health")[0] == 200
    minio.stop()
    try:
        (ws / "code" / "train.py").write_text("lr = 3e-5  # the agent's last edit\n")
        started = time.monotonic()
        code = rec.terminate(timeout=60)
        drained_s = time.monotonic() - started
    finally:
        minio.start()
    text = message.read_text()
    print(f"drain through an outage: {drained_s:.1f} s; {text.strip()!r}")
    assert code == 0
    assert 8 <= drained_s < 8 + RECORDER_DRAIN_MARGIN_S
    assert text.startswith("drain cut after ") and "never reached the store (left in the spool)" in text
    left = int(text.split(": ", 1)[1].split()[0])
    assert left == len(list((tmp_path / "spool").glob("*.json"))) >= 1


def test_minio_down_for_30s_during_a_submission_loses_nothing(
    crun: ClusterRun, tmp_path: Path, recorders: list[RecorderProc], minio: Any
) -> None:
    ws = make_workspace(tmp_path)
    (ws / "code" / "train.py").write_text("print('train')\n")
    model = write_model(ws / "output" / "v1", os.urandom(7 << 20))  # multipart-sized weights
    rec = start_recorder(crun, tmp_path, recorders)

    minio.stop()
    try:
        thread, out = submit_in_background(rec, "output/v1")
        time.sleep(OUTAGE_S)
        assert thread.is_alive(), out
        assert crun.get_submission(1) is None, "no BenchSubmission before its snapshot is stored"
        spooled = list((tmp_path / "spool").glob("*.data"))
        assert sum(p.stat().st_size for p in spooled) >= 7 << 20, "the model waits in the spool"
    finally:
        outage_ended = time.time()
        minio.start()
    sub = crun.wait_submission(1, timeout=60)
    created = datetime.fromisoformat(sub["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    assert created.timestamp() >= outage_ended - 1  # (creationTimestamp has whole seconds)
    store, layout = crun.store(), crun.layout
    manifest = store.get_json(layout.submission_manifest(1))
    assert missing_blobs(store, layout, manifest["model"]) == []
    assert missing_blobs(store, layout, store.get_json(layout.revision(1))["tree"]) == []
    restore_tree(store, layout, TreeManifest.from_json(manifest["model"]), tmp_path / "restored")
    assert same_tree(tmp_path / "restored", model)
    crun.set_status(1, "Succeeded", score=55.0)
    thread.join(60)
    assert out["status"] == 200, out
    assert out["body"]["score"] == 55.0 and out["seconds"] >= OUTAGE_S
    assert not list((tmp_path / "spool").iterdir())
    assert rec.terminate() == 0


def test_agent_gets_a_clear_error_after_the_retry_timeout_and_the_submission_still_lands(
    crun: ClusterRun, tmp_path: Path, recorders: list[RecorderProc], minio: Any
) -> None:
    ws = make_workspace(tmp_path)
    model = write_model(ws / "output" / "v1", os.urandom(100_000))
    rec = start_recorder(crun, tmp_path, recorders, A2RL_STORE_RETRY_TIMEOUT="4")
    minio.stop()
    try:
        t0 = time.monotonic()
        status, body = rec.submit("output/v1")
        waited = time.monotonic() - t0
    finally:
        minio.start()
    assert status == 503, body
    assert body["submission_id"] == 1
    assert (
        "object store has been unreachable for 4 s" in body["error"] and "GET /submissions" in body["error"]
    )
    assert 4 <= waited < 30
    # Once MinIO is back the submission is stored and handed to the operator anyway.
    crun.wait_submission(1, timeout=60)
    store, layout = crun.store(), crun.layout
    manifest = store.get_json(layout.submission_manifest(1))
    assert manifest["model_digest"] == hash_tree(model).digest
    assert missing_blobs(store, layout, manifest["model"]) == []
    crun.set_status(1, "Succeeded", score=12.0)

    def scored() -> Any:
        code, listed = rec.get("/submissions")
        return code == 200 and listed and listed[0]["score"] == 12.0

    wait_for(scored, timeout=30, what="the late submission's score in GET /submissions")
    assert rec.terminate() == 0


def test_a_restarted_recorder_keeps_the_agents_clock(
    crun: ClusterRun, tmp_path: Path, recorders: list[RecorderProc]
) -> None:
    """The sidecar with the pod's environment (no `A2RL_RUN_START`) killed and restarted, as the
    kubelet restarts a native sidecar: the clock (`/time`, the deadline) is the first start's,
    read back from `clock.json` in MinIO, not a new one."""
    make_workspace(tmp_path)
    first = start_recorder(crun, tmp_path, recorders)
    status, before = first.get("/time")
    assert status == 200
    first.proc.kill()
    first.proc.wait(10)
    time.sleep(2)
    status, after = start_recorder(crun, tmp_path, recorders).get("/time")
    assert status == 200
    assert after["start_time"] == before["start_time"] and after["deadline"] == before["deadline"]
    assert after["elapsed"] >= 2 and after["remaining"] <= 3600 - 2
    assert crun.store().get_json(crun.layout.run_clock)["start_time"] == before["start_time"]
