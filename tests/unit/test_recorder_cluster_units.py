"""Pure parts of cluster mode: the BenchSubmission the recorder creates, results from its status,
and the recorder's configuration from the environment (no cluster needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from a2rl_recorder.cluster_dispatch import benchsubmission_body, result_from_status
from a2rl_recorder.config import RecorderConfig

from a2rl.api.benchsubmission import BenchSubmission, submission_name
from a2rl.constants import LABEL_RUN_NAME, LABEL_RUN_UID, LABEL_SUBMISSION_INDEX
from a2rl.errors import A2rlError

UID = "5f1c7b6e-3a2d-4c8e-9b1a-0d2e4f6a8c0b"
MANIFEST: dict[str, Any] = {
    "index": 3,
    "submitted_at": "2026-05-01T12:00:00.123456Z",
    "model_path": "output/v3",
    "model_digest": "a" * 64,
    "code_revision": 7,
    "code_digest": "b" * 64,
    "identical_to_base": False,
}


def body(manifest: dict[str, Any] = MANIFEST) -> dict[str, Any]:
    return benchsubmission_body(
        run_name="arith-sft",
        namespace="team-a",
        run_uid=UID,
        index=3,
        manifest=manifest,
        manifest_uri="s3://runs/x/team-a/arith-sft-uid/submissions/00003/manifest.json",
    )


def test_body_is_a_valid_benchsubmission_owned_by_the_run() -> None:
    obj = body()
    model = BenchSubmission.model_validate(obj)  # the API model is the CRD's source of truth
    assert model.spec.model_digest == "a" * 64 and model.spec.code_revision == 7
    meta = obj["metadata"]
    assert meta["name"] == submission_name("arith-sft", 3) == "arith-sft-00003"
    assert meta["labels"][LABEL_RUN_NAME] == "arith-sft" and meta["labels"][LABEL_RUN_UID] == UID
    assert meta["labels"][LABEL_SUBMISSION_INDEX] == "3"
    (owner,) = meta["ownerReferences"]
    assert owner == {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchRun", "name": "arith-sft",
                     "uid": UID, "controller": True}  # fmt: skip
    # No code revision yet (empty code/): the optional fields are left out, not null.
    bare = body({**MANIFEST, "code_revision": None, "code_digest": None})
    assert "codeRevision" not in bare["spec"] and "codeDigest" not in bare["spec"]
    BenchSubmission.model_validate(bare)
    # The wire body as the hand-written dict was: no empty annotations, no status.
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(meta) == {"name", "namespace", "labels", "ownerReferences"}
    assert obj["spec"] == {
        "runName": "arith-sft", "index": 3, "modelPath": "output/v3", "modelDigest": "a" * 64,
        "codeRevision": 7, "codeDigest": "b" * 64, "identicalToBase": False,
        "manifestUri": "s3://runs/x/team-a/arith-sft-uid/submissions/00003/manifest.json",
        "submittedAt": "2026-05-01T12:00:00.123456Z",
    }  # fmt: skip


def test_result_from_status_copies_the_optional_fields() -> None:
    status = {"state": "Succeeded", "score": 50, "reason": "Evaluated", "evaluatorVersion": "arith-1",
              "resultUri": "s3://b/r.json", "startedAt": "2026-05-01T12:00:00Z",
              "finishedAt": "2026-05-01T12:01:00Z", "durationSeconds": 60.0, "evalJob": "j",
              "conditions": [{"type": "Evaluated"}], "fieldOfANewerOperator": 1}  # fmt: skip
    result = result_from_status(2, "arith", {"metadata": {"name": "r-00002"}, "status": status})
    assert result is not None and result.to_json() == {
        "index": 2, "task": "arith", "score": 50.0, "error": None, "state": "Succeeded",
        "submission": "r-00002", "reason": "Evaluated", "evaluator_version": "arith-1",
        "result_uri": "s3://b/r.json", "started_at": "2026-05-01T12:00:00Z",
        "finished_at": "2026-05-01T12:01:00Z", "duration_seconds": 60.0,
    }  # fmt: skip
    unreadable = result_from_status(2, "arith", {"status": {"state": "Failed", "score": "x"}})
    assert unreadable is not None and unreadable.score is None and "not readable" in (unreadable.error or "")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, None),
        ({"state": "Pending"}, None),
        ({"state": "Evaluating"}, None),
        ({"state": "Succeeded", "score": 41.5}, (41.5, None)),
        ({"state": "Succeeded", "score": 0}, (0.0, None)),
        ({"state": "Succeeded"}, (None, "the evaluation finished without a score")),
        ({"state": "Failed", "error": "model does not load"}, (None, "model does not load")),
        ({"state": "Failed", "score": 12.0}, (None, "submission failed by the operator")),
        ({"state": "Rejected", "error": "over the cap"}, (None, "over the cap")),
    ],
)
def test_result_from_status(status: dict[str, Any], expected: tuple[float | None, str | None] | None) -> None:
    result = result_from_status(3, "arith", {"metadata": {"name": "r-00003"}, "status": status})
    if expected is None:
        assert result is None
        return
    assert result is not None
    assert (result.score, result.error) == expected
    assert result.index == 3 and result.task == "arith" and result.submission == "r-00003"
    assert result.state == status["state"]


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "A2RL_RUN_PREFIX": f"team-a/arith-sft-{UID}",
        "WORKSPACE": str(tmp_path),
        "TASK": "arith",
        "A2RL_RUN_TIMEOUT": "600",
        **extra,
    }


def test_dispatch_mode_from_the_environment(tmp_path: Path) -> None:
    local = RecorderConfig.from_env(env(tmp_path, A2RL_HELDOUT_PATH=str(tmp_path)))
    assert local.dispatch == "local"
    cluster = RecorderConfig.from_env(
        env(tmp_path, A2RL_RUN_NAME="arith-sft", A2RL_RUN_NAMESPACE="team-a", A2RL_RUN_UID=UID,
            A2RL_SPOOL_DIR=str(tmp_path / "spool"), A2RL_STORE_RETRY_TIMEOUT="30")
    )  # fmt: skip
    assert cluster.dispatch == "cluster" and cluster.run_uid == UID
    assert cluster.spool_dir == tmp_path / "spool" and cluster.store_retry_timeout_s == 30.0
    with pytest.raises(A2rlError, match="A2RL_RUN_NAME, A2RL_RUN_NAMESPACE, A2RL_RUN_UID"):
        RecorderConfig.from_env(env(tmp_path))
    with pytest.raises(A2rlError, match="A2RL_RECORDER_DISPATCH must be"):
        RecorderConfig.from_env(env(tmp_path, A2RL_RECORDER_DISPATCH="remote"))
    forced = RecorderConfig.from_env(
        env(tmp_path, A2RL_RECORDER_DISPATCH="LOCAL", A2RL_HELDOUT_PATH=str(tmp_path))
    )
    assert forced.dispatch == "local"
