"""The store's document models (`a2rl.records`): each writes the bytes the hand-written dicts
wrote, reads back to the same document, and reads older or minimal documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.baseline import baseline_submission_manifest
from a2rl_grader.report.metrics import report_json_bytes

from a2rl.api.benchrun import BenchRun
from a2rl.records.base import Record, RecordError, load_record, read_record, write_record
from a2rl.records.baseline import BaselineEntry
from a2rl.records.benchrun import FinalRunRecord
from a2rl.records.dispatch import DispatchRecord
from a2rl.records.report import ReportRecord
from a2rl.records.result import ResultRecord
from a2rl.records.revision import CodeRevision
from a2rl.records.run import RunRecord, run_record
from a2rl.records.submission import SubmissionManifest
from a2rl.records.times import iso_utc as iso
from a2rl.records.tree import TreeRecord
from a2rl.runs import RunInfo
from a2rl.store.base import ObjectStore
from a2rl.store.cas import hash_tree
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore

LAYOUT = RunLayout(namespace="local", name="demo", uid="0123456789ab")
D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64
TREE_FILES: list[dict[str, Any]] = [
    {"path": "config.json", "sha256": D1, "size": 12, "mode": 0o644},
    {"path": "model.safetensors", "sha256": D2, "size": 4096, "mode": 0o600},
]
TREE: dict[str, Any] = {  # TreeManifest.to_json
    "digest": TreeRecord.from_json({"files": TREE_FILES}).manifest().digest,
    "files": TREE_FILES,
}

# --- documents exactly as the writers before the models produced them ------------------------

REVISION: dict[str, Any] = {  # a2rl_recorder.snapshots.CodeSnapshotter.snapshot
    "index": 2, "created_at": "2026-03-01T12:00:00.5Z", "reason": "change", "tree": TREE, "digest": D3,
    "files_uploaded": 1, "bytes_uploaded": 12, "skipped": ["big.bin"],
}  # fmt: skip
MANIFEST: dict[str, Any] = {  # a2rl_recorder.service (POST /submit)
    "index": 1, "submitted_at": "2026-03-01T12:05:00Z", "model_path": "output/v1", "model": TREE,
    "model_digest": D3, "base_model_digest": D1, "identical_to_base": False, "code_revision": None,
    "code_digest": None, "request": {"model_path": "output/v1", "note": ["any", 1]},
    "snapshot": {"files_uploaded": 2, "bytes_uploaded": 4108, "seconds": 0.25},
}  # fmt: skip
RESULT: dict[str, Any] = {  # a2rl_grader.evaluate.evaluate_submission
    "index": 1, "task": "arith", "score": 41.5, "error": None, "evaluator_version": "arith-1",
    "backend": "transformers", "n": 200, "correct": 83, "metrics": {"accuracy": 41.5},
    "started_at": "2026-03-01T12:05:01Z", "finished_at": "2026-03-01T12:06:01Z", "duration_s": 60.012,
    "model_digest": D3,
}  # fmt: skip
CLUSTER_RESULT: dict[str, Any] = {  # a2rl_recorder.cluster_dispatch.result_from_status
    "index": 2, "task": "arith", "score": None, "error": "boom", "state": "Failed",
    "submission": "demo-00002", "reason": "EvalJobFailed", "duration_seconds": 3.5, "result_uri": "s3://b/r.json",
}  # fmt: skip
DISPATCH: dict[str, Any] = {  # a2rl.records.dispatch.DispatchRecord.failed
    "index": 3, "status": "failed", "error": "evaluation timed out after 10 s", "exit_code": -9,
    "log": "local/demo-0123456789ab/logs/eval-00003.log", "finished_at": "2026-03-01T12:07:00Z",
}  # fmt: skip


def old_run_json(run: BenchRun, layout: RunLayout, *, base_model_digest: str, evaluator_version: str,
                 started_at: float | None = None) -> dict[str, Any]:  # fmt: skip
    """run.json before `RunRecord` (the hand-written dict), for comparison."""
    spec = run.spec
    return {
        "name": layout.name,
        "namespace": layout.namespace,
        "uid": layout.uid,
        "task": spec.task,
        "base_model": {
            "name": spec.base_model.name,
            "source": spec.base_model.source,
            "digest": base_model_digest,
        },
        "agent": {"command": [*spec.agent.command, *spec.agent.args], "image": spec.agent.image_ref},
        "driver": spec.driver.to_wire() if spec.driver else None,
        "budget": {
            "wall_time_seconds": spec.budget.wall_time_seconds,
            "max_submissions": spec.budget.max_submissions,
        },
        "spec": spec.to_wire(),
        "started_at": iso(started_at),
        "deadline": iso(None if started_at is None else started_at + spec.budget.wall_time_seconds),
        "ended_at": None,
        "end_reason": None,
        "agent_exit_code": None,
        "evaluator_version": evaluator_version,
        "protocol": spec.evaluation.protocol,  # new in run.json: the evaluation protocol
        "mode": "local",
        "sandbox": None,  # new in run.json: what isolated the agent
    }


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return LocalStore(tmp_path / "store")


def same_bytes(store: ObjectStore, record: Record, doc: dict[str, Any]) -> None:
    """`write_record(record)` writes exactly what `put_json(doc)` wrote."""
    write_record(store, "a/record.json", record)
    store.put_json("a/dict.json", doc)
    assert store.get_bytes("a/record.json") == store.get_bytes("a/dict.json")


def _run() -> BenchRun:
    return BenchRun.model_validate(
        {
            "metadata": {"name": "demo"},
            "spec": {
                "task": "arith",
                "baseModel": {"name": "tiny", "source": "builtin:tiny"},
                "agent": {"command": ["python", "-m", "a2rl_agents.sft_baseline"], "args": ["--lr", "3"]},
                "budget": {"wallTimeSeconds": 300, "maxSubmissions": 4},
            },
        }
    )


def test_run_record_writes_the_old_run_json(store: ObjectStore) -> None:
    kwargs: dict[str, Any] = {"base_model_digest": D1, "evaluator_version": "arith-1", "started_at": 1.7e9}
    old = old_run_json(_run(), LAYOUT, **kwargs)
    record = run_record(_run(), LAYOUT, **kwargs)
    same_bytes(store, record, old)
    assert record.to_json() == old
    assert RunRecord.from_json(old).to_json() == old
    assert record.budget is not None and record.budget.wall_time_seconds == 300
    assert isinstance(record.to_json()["budget"]["wall_time_seconds"], int)  # not 300.0


def test_run_record_reads_minimal_and_cluster_documents() -> None:
    assert RunRecord.from_json({}).to_json() == {}
    cluster = {"name": "r", "mode": "cluster", "base_model": {"digest": ""}, "extra": {"kept": True}}
    record = RunRecord.from_json(cluster)
    assert record.mode == "cluster" and record.to_json() == cluster
    info = RunInfo.from_json("team-a/r-5f1c7b6e-3a2d-4c8e-9b1a-0d2e4f6a8c0b", {"task": "arith"})
    assert info.task == "arith" and info.started_at is None and info.record.budget is None


def test_tree_record_is_the_tree_manifest(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    tree = hash_tree(tmp_path / "m")
    assert TreeRecord.of(tree).to_json() == tree.to_json()
    assert TreeRecord.from_json(tree.to_json()).manifest() == tree
    with pytest.raises(ValueError, match="digest does not match"):
        TreeRecord.from_json({**tree.to_json(), "digest": D1}).manifest()
    no_mode = TreeRecord.from_json({"files": [{"path": "a", "sha256": D1, "size": 1}]})
    assert no_mode.manifest().entries[0].mode == 0o644 and "mode" not in no_mode.to_json()["files"][0]


@pytest.mark.parametrize(
    ("model", "doc"),
    [
        (CodeRevision, REVISION),
        (SubmissionManifest, MANIFEST),
        (ResultRecord, RESULT),
        (ResultRecord, CLUSTER_RESULT),
        (ResultRecord, {**RESULT, "index": 0, "cached": True}),
        (ResultRecord, {**RESULT, "index": 4, "copied_from_baseline": True, "first_items": [{"x": 1}]}),
        (DispatchRecord, DISPATCH),
        (BaselineEntry, {**RESULT, "index": 0, "details": [{"item": 1, "correct": True}]}),
    ],
)
def test_documents_round_trip_byte_for_byte(
    store: ObjectStore, model: type[Record], doc: dict[str, Any]
) -> None:
    record = model.from_json(doc)
    assert record.to_json() == doc
    same_bytes(store, record, doc)
    store.put_json("b/doc.json", doc)
    assert load_record(store, "b/doc.json", model) == record


@pytest.mark.parametrize(
    "model", [CodeRevision, SubmissionManifest, ResultRecord, DispatchRecord, BaselineEntry]
)
def test_minimal_documents_load(model: type[Record]) -> None:
    assert model.from_json({}).to_json() == {}


def test_older_documents_load() -> None:
    manifest = SubmissionManifest.from_json(
        {"index": 2, "model_digest": D3, "submitted_at": "2026-03-01T12:00:00Z"}
    )
    assert manifest.identical_to_base is False and manifest.model is None and manifest.snapshot is None
    result = ResultRecord.from_json({"index": 5, "score": 60, "error": None})
    assert result.score == 60.0 and result.metrics is None
    revision = CodeRevision.from_json({"index": 1, "digest": D3})
    assert revision.tree is None and revision.skipped == []
    assert BaselineEntry.from_json({"score": 1.0}).details == []


def test_result_helpers_match_the_old_dicts() -> None:
    failure = ResultRecord.failure(3, "arith", "boom").to_json()
    assert failure == {"index": 3, "task": "arith", "score": None, "error": "boom"}
    record = DispatchRecord.failed(3, "boom", None, None).to_json()
    assert set(record) == set(DISPATCH) and record["status"] == "failed" and record["exit_code"] is None
    assert LAYOUT.submission_dispatch(3) == "local/demo-0123456789ab/submissions/00003/dispatch.json"


def test_baseline_entry_and_cached_result() -> None:
    result = ResultRecord.from_json({**RESULT, "index": 0, "cached": False})
    entry = BaselineEntry.of(result, [{"item": 1}])
    assert entry.to_json() == {**RESULT, "index": 0}  # no "cached", no per-item details (gold answers)
    assert entry.result(D2).to_json() == {**RESULT, "index": 0, "model_digest": D2, "cached": True}


def test_baseline_manifest_is_the_old_dict() -> None:
    doc = baseline_submission_manifest(TreeRecord.from_json(TREE), D3, "tiny").to_json()
    assert doc == {
        "index": 0, "submitted_at": doc["submitted_at"], "model_path": "models/tiny", "model": TREE,
        "model_digest": D3, "base_model_digest": D3, "identical_to_base": True, "code_revision": None,
        "code_digest": None, "request": {},
    }  # fmt: skip


def old_final_record(run: dict[str, Any]) -> dict[str, Any]:
    """a2rl_operator.retention.final_record before `FinalRunRecord` (the hand-written dict)."""
    keys = ("name", "namespace", "uid", "generation", "labels", "creationTimestamp", "deletionTimestamp")
    meta = run.get("metadata") or {}
    return {
        "apiVersion": run.get("apiVersion"),
        "kind": run.get("kind"),
        "metadata": {k: meta[k] for k in keys if k in meta},
        "spec": run.get("spec") or {},
        "status": run.get("status") or {},
    }


@pytest.mark.parametrize(
    "body",
    [
        {
            "apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchRun",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1", "generation": 2,
                         "labels": {"a": "b"}, "creationTimestamp": "2026-03-01T12:00:00Z",
                         "managedFields": [{"manager": "kubectl"}], "finalizers": ["a2rl.dev/retain"],
                         "deletionTimestamp": "2026-03-01T13:00:00Z"},
            "spec": {"task": "arith", "budget": {"wallTimeSeconds": 300}},
            "status": {"phase": "Succeeded", "submissionCount": 2, "bestScore": 41.5, "conditions": []},
        },
        {"metadata": {"name": "bare"}},  # no apiVersion/kind (null), no spec, no status ({})
    ],
)  # fmt: skip
def test_final_run_record_writes_the_old_benchrun_json(store: ObjectStore, body: dict[str, Any]) -> None:
    old = old_final_record(body)
    record = FinalRunRecord.of(body)
    same_bytes(store, record, old)
    assert FinalRunRecord.from_json(old).to_json() == old
    assert load_record(store, "a/record.json", FinalRunRecord).to_json() == old


def test_read_record_treats_unreadable_documents_as_absent(store: ObjectStore) -> None:
    assert read_record(store, "c/missing.json", ResultRecord) is None
    store.put_bytes("c/bad.json", b"{not json")
    store.put_bytes("c/list.json", b"[]")
    store.put_json("c/wrong.json", {"score": "high"})
    for key in ("c/bad.json", "c/list.json", "c/wrong.json"):
        assert read_record(store, key, ResultRecord) is None
        with pytest.raises(RecordError):
            load_record(store, key, ResultRecord)


def test_store_json_is_unchanged(store: ObjectStore) -> None:
    write_record(store, "d/r.json", ResultRecord.from_json(RESULT))
    assert store.get_bytes("d/r.json") == json.dumps(RESULT, indent=2, sort_keys=True).encode() + b"\n"


# --- report/report.json: a document as build_report wrote it before ReportRecord ----------------
REPORT_V1: dict[str, Any] = {
    "schema_version": "1",
    "run": {
        "prefix": "local/demo-0123456789ab", "namespace": "local", "name": "demo", "uid": "0123456789ab",
        "task": "arith", "mode": "local",
        "base_model": {"digest": D1, "name": "tiny", "source": "builtin:tiny"},
        "agent": {"command": ["python", "agent.py"], "image": None},
        "driver": None,
        "budget": {"max_submissions": None, "wall_time_seconds": 1800.0},
        "evaluator_version": "arith-1", "started_at": "2026-03-01T12:00:00+00:00",
        "deadline": "2026-03-01T12:30:00Z", "ended_at": "2026-03-01T12:30:00+00:00",
        "end_reason": "completed", "agent_exit_code": 0,
    },
    "baseline_score": 5.0, "best_score": 42.5, "best_submission": 3, "improvement": 37.5,
    "total_submissions": 2, "valid_submissions": 1, "route": None,
    "baseline": {
        "score": 5.0, "error": None, "model_path": "models/tiny", "model_digest": D1,
        "evaluator_version": "arith-1", "backend": "transformers", "n": 200, "correct": 10,
    },
    "metrics": {
        "baseline_score": 5.0, "best_score": 42.5, "best_submission": 3, "code_revisions": 2,
        "copy_of_base_count": 1, "distinct_models": 2, "duration_s": 1800.0, "eval_seconds_total": 20.0,
        "first_improvement_index": 3, "first_submit_delay_s": 120.0, "first_valid_delay_s": 150.0,
        "first_valid_index": 3, "improvement": 37.5, "invalid_reasons": {"model could not be loaded": 1},
        "invalid_submissions": 1, "last_submit_gap_s": 300.0, "last_valid_score": 42.5,
        "monotonic_ratio": None, "revisions_before_first_submission": 1, "score_trajectory": [None, 42.5],
        "time_to_best_s": 200.0, "time_to_first_improvement_s": 200.0, "time_used_ratio": 1.0,
        "total_submissions": 2, "valid_submission_rate": 0.5, "valid_submissions": 1,
    },
    "submissions": [
        {
            "index": 1, "submitted_at": "2026-03-01T12:02:00+00:00", "elapsed_s": 120.0, "score": None,
            "valid": False, "error": "model could not be loaded", "best_so_far": None,
            "model_path": "output/v1", "model_digest": D2, "model_files": 2, "model_bytes": 9,
            "copy_of_base": False, "code_revision": None, "code_digest": None, "n": 200, "correct": 0,
            "eval_duration_s": 5.0, "backend": "transformers",
        },
        {
            "index": 3, "submitted_at": "2026-03-01T12:03:20+00:00", "elapsed_s": 200.0, "score": 42.5,
            "valid": True, "error": None, "best_so_far": 42.5, "model_path": "models/tiny",
            "model_digest": D1, "model_files": 2, "model_bytes": 9, "copy_of_base": True,
            "code_revision": 2, "code_digest": D3, "n": 200, "correct": 85, "eval_duration_s": 15.0,
            "backend": "transformers",
        },
    ],
    "revisions": [
        {
            "index": 2, "created_at": "2026-03-01T12:03:20+00:00", "elapsed_s": 200.0, "reason": "submit",
            "digest": D3, "files": 2, "bytes": 15, "added": 1, "changed": 1, "removed": 0,
            "paths": ["+sft.py", "~train.py"], "files_uploaded": 2, "bytes_uploaded": 100,
        },
    ],
    "timeline": {
        "trace_id": "t1", "started_at": "2026-03-01T12:00:00Z", "duration_s": 5.0, "spans": 3,
        "steps": [
            {"name": "eval", "service": "grader", "start_offset_s": 1.0, "duration_s": 2.0, "status": "ok",
             "submission": 3, "child_spans": 1},
        ],
    },
}  # fmt: skip


def canonical_report_bytes(doc: dict[str, Any]) -> bytes:
    """report.json's bytes as report_json_bytes wrote them from the dict, before ReportRecord."""
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()


def test_report_record_round_trips_the_old_report_json(store: ObjectStore) -> None:
    old = canonical_report_bytes(REPORT_V1)
    record = ReportRecord.from_json(json.loads(old))
    assert report_json_bytes(record) == old  # null values and 1800.0-style floats kept
    assert record.run.base_model is not None and record.run.base_model.digest == D1
    assert record.metrics.monotonic_ratio is None and record.submissions[1].code_digest == D3
    assert record.timeline is not None and record.timeline.steps[0].submission == 3
    key = f"{LAYOUT.report_dir}/report.json"
    store.put_bytes(key, old)
    loaded = load_record(store, key, ReportRecord)
    assert loaded == record and report_json_bytes(loaded) == old


def test_report_record_keeps_an_older_reports_keys_and_number_forms() -> None:
    doc = {k: v for k, v in REPORT_V1.items() if k != "timeline"}  # before the timeline existed
    doc = {**doc, "run": {**doc["run"], "budget": {"wall_time_seconds": 1800}}, "future_key": {"x": 1}}
    record = ReportRecord.from_json(doc)
    assert record.timeline is None and record.run.budget.wall_time_seconds == 1800
    assert report_json_bytes(record) == canonical_report_bytes(doc)  # 1800 stays an int, nothing added
    assert ReportRecord.from_json(record.to_json()) == record
