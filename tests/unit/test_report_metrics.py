"""Report metrics on hand-built run histories (pure functions, no store)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from a2rl_grader.report.history import NO_RESULT_ERROR, EvalResult, Revision, RunHistory, Submission
from a2rl_grader.report.metrics import (
    REPORT_SCHEMA_VERSION,
    build_report,
    compute_metrics,
    monotonic_ratio,
    report_json_bytes,
)

from a2rl.records.report import ReportRecord
from a2rl.runs import RunInfo
from tests.support.report_runs import CLASSIC_KEYS

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
BASE_DIGEST = "b" * 64


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sub(
    index: int,
    t: float,
    score: float | None,
    *,
    error: str | None = None,
    digest: str | None = None,
    identical: bool = False,
    revision: int | None = None,
    missing_result: bool = False,
    duration: float = 2.0,
) -> Submission:
    result = None
    if not missing_result:
        result = EvalResult(
            score=score,
            error=error,
            n=100,
            correct=int(score or 0),
            duration_s=duration,
            finished_at=at(t + duration),
        )
    return Submission(
        index=index,
        submitted_at=at(t),
        model_path=f"output/v{index}",
        model_digest=digest or f"{index:064x}",
        base_model_digest=BASE_DIGEST,
        identical_to_base=identical,
        code_revision=revision,
        result=result,
    )


def history(
    subs: list[Submission],
    *,
    baseline: float | None = 10.0,
    revisions: tuple[Revision, ...] = (),
    ended: float | None = 3600.0,
    budget: int = 3600,
    started: bool = True,
) -> RunHistory:
    run_json: dict[str, Any] = {
        "name": "demo",
        "namespace": "local",
        "uid": "0123456789ab",
        "task": "arith",
        "base_model": {"name": "tiny", "source": "builtin:tiny", "digest": BASE_DIGEST},
        "budget": {"wall_time_seconds": budget, "max_submissions": None},
        "started_at": T0.isoformat() if started else None,
        "ended_at": at(ended).isoformat() if ended is not None else None,
        "end_reason": "completed" if ended is not None else None,
    }
    base = None
    if baseline is not None:
        base = Submission(
            index=0,
            submitted_at=at(-30),
            model_digest=BASE_DIGEST,
            identical_to_base=True,
            result=EvalResult(score=baseline, error=None),
        )
    return RunHistory(
        run=RunInfo.from_json("local/demo-0123456789ab", run_json),
        baseline=base,
        submissions=tuple(subs),
        revisions=revisions,
    )


def test_no_submissions() -> None:
    m = compute_metrics(history([], ended=900.0))
    assert m.total_submissions == 0
    assert m.valid_submissions == 0
    assert m.valid_submission_rate is None
    assert m.best_score is None and m.best_submission is None and m.improvement is None
    assert m.first_valid_index is None and m.time_to_best_s is None
    assert m.monotonic_ratio is None
    assert m.last_submit_gap_s is None
    assert m.baseline_score == 10.0
    assert m.time_used_ratio == 0.25
    assert m.duration_s == 900.0
    assert m.revisions_before_first_submission is None
    assert m.score_trajectory == []


def test_all_invalid() -> None:
    subs = [
        sub(1, 60, None, error="model could not be loaded: no config.json"),
        sub(2, 120, None, error="model could not be loaded: no config.json"),
        sub(3, 180, None, missing_result=True),
    ]
    m = compute_metrics(history(subs))
    assert (m.total_submissions, m.valid_submissions, m.invalid_submissions) == (3, 0, 3)
    assert m.valid_submission_rate == 0.0
    assert m.best_score is None and m.improvement is None
    assert m.first_valid_index is None and m.first_improvement_index is None
    assert m.invalid_reasons == {"model could not be loaded: no config.json": 2, NO_RESULT_ERROR: 1}
    assert m.score_trajectory == [None, None, None]
    assert m.last_submit_gap_s == 3600.0 - 180.0


def test_improvement_then_regression() -> None:
    subs = [sub(1, 60, 20.0), sub(2, 120, 50.0), sub(3, 300, 30.0)]
    report = build_report(history(subs))
    m = report.metrics
    assert (report.best_score, report.best_submission, report.improvement) == (50.0, 2, 40.0)
    assert m.first_valid_index == 1 and m.first_valid_delay_s == 60.0
    assert m.first_improvement_index == 1 and m.time_to_first_improvement_s == 60.0
    assert m.time_to_best_s == 120.0
    assert m.monotonic_ratio == 0.5
    assert m.last_valid_score == 30.0
    assert m.valid_submission_rate == 1.0
    assert m.eval_seconds_total == 6.0
    assert [r.best_so_far for r in report.submissions] == [20.0, 50.0, 50.0]
    assert [r.elapsed_s for r in report.submissions] == [60.0, 120.0, 300.0]


def test_first_improvement_skips_valid_scores_at_or_below_baseline() -> None:
    subs = [sub(1, 60, 5.0), sub(2, 90, 10.0), sub(3, 200, 12.5)]
    m = compute_metrics(history(subs))
    assert m.first_valid_index == 1
    assert m.first_improvement_index == 3 and m.time_to_first_improvement_s == 200.0
    assert m.improvement == 2.5


def test_copy_of_base_by_digest_and_flag() -> None:
    subs = [
        sub(1, 60, 10.0, digest=BASE_DIGEST),  # the recorder did not flag it: caught by digest
        sub(2, 90, 10.0, digest="c" * 64, identical=True),
        sub(3, 120, 40.0, digest="d" * 64),
        sub(4, 150, 40.0, digest="d" * 64),  # the same model submitted twice
    ]
    report = build_report(history(subs))
    assert report.metrics.copy_of_base_count == 2
    assert report.metrics.distinct_models == 3
    assert [r.copy_of_base for r in report.submissions] == [True, True, False, False]


def test_ties_earliest_best_and_no_strict_increase() -> None:
    subs = [sub(1, 60, 30.0), sub(2, 120, 30.0), sub(3, 180, 30.0)]
    m = compute_metrics(history(subs))
    assert m.best_submission == 1 and m.time_to_best_s == 60.0
    assert m.monotonic_ratio == 0.0


def test_zero_score_is_valid_unlike_the_reference() -> None:
    m = compute_metrics(history([sub(1, 60, 0.0), sub(2, 70, None, error="boom")], baseline=0.0))
    assert m.valid_submissions == 1 and m.valid_submission_rate == 0.5
    assert m.best_score == 0.0 and m.improvement == 0.0
    assert m.first_improvement_index is None


def test_missing_or_failed_baseline() -> None:
    subs = [sub(1, 60, 20.0)]
    assert compute_metrics(history(subs, baseline=None)).improvement is None
    h = history(subs)
    assert h.baseline is not None
    failed = Submission(index=0, model_digest=BASE_DIGEST, result=EvalResult(score=None, error="oom"))
    m = compute_metrics(RunHistory(run=h.run, baseline=failed, submissions=h.submissions, revisions=()))
    assert m.baseline_score is None and m.improvement is None and m.time_to_first_improvement_s is None
    assert m.best_score == 20.0


def test_monotonic_ratio_only_counts_valid_scores() -> None:
    subs = [
        sub(1, 10, 10.0),
        sub(2, 20, None, error="x"),
        sub(3, 30, 20.0),
        sub(4, 40, 15.0),
        sub(5, 50, 25.0),
    ]
    assert compute_metrics(history(subs)).monotonic_ratio == round(2 / 3, 4)
    assert monotonic_ratio([1.0]) is None
    assert monotonic_ratio([1.0, 2.0, 3.0]) == 1.0


def rev(index: int, t: float, files: dict[str, str], reason: str = "change") -> Revision:
    return Revision(
        index=index,
        created_at=at(t),
        reason=reason,
        digest=f"{index:064x}",
        files={p: (c * 64, len(c) * 10) for p, c in files.items()},
    )


def test_revision_timeline_and_counts() -> None:
    revisions = (
        rev(1, 30, {"train.py": "a", "util.py": "b"}),
        rev(2, 55, {"train.py": "c", "data.py": "d"}, reason="submit"),
        rev(3, 400, {"train.py": "c", "data.py": "e"}, reason="final"),
    )
    subs = [sub(1, 55, 20.0, revision=2)]
    report = build_report(history(subs, revisions=revisions))
    rows = report.revisions
    assert [(r.added, r.changed, r.removed) for r in rows] == [(2, 0, 0), (1, 1, 1), (0, 1, 0)]
    assert rows[1].paths == ["+data.py", "~train.py", "-util.py"]
    assert rows[0].bytes == 20 and rows[2].elapsed_s == 400.0
    assert report.metrics.code_revisions == 3
    assert report.metrics.revisions_before_first_submission == 2
    assert report.submissions[0].code_revision == 2


def test_time_used_ratio_of_a_run_in_progress_uses_last_activity() -> None:
    subs = [sub(1, 600, 20.0, duration=30.0)]
    m = compute_metrics(history(subs, ended=None, budget=1200))
    assert m.time_used_ratio == 0.525  # the result finished at 630 s
    assert m.duration_s is None and m.last_submit_gap_s is None


def test_origin_falls_back_to_first_event_without_start_time() -> None:
    m = compute_metrics(history([sub(1, 100, 20.0), sub(2, 160, 30.0)], started=False))
    assert m.first_valid_delay_s == 0.0 and m.time_to_best_s == 60.0


def test_report_shape_and_determinism() -> None:
    def make() -> RunHistory:
        return history(
            [sub(1, 60, 20.0, revision=1), sub(2, 90, None, error="bad")],
            revisions=(rev(1, 10, {"train.py": "a"}),),
        )

    a, b = build_report(make()), build_report(make())
    assert report_json_bytes(a) == report_json_bytes(b)
    doc = json.loads(report_json_bytes(a))
    assert set(doc) >= CLASSIC_KEYS
    assert doc["route"] is None and doc["metrics"]["best_score"] == 20.0  # null values are written
    assert ReportRecord.from_json(doc) == a
    assert a.schema_version == REPORT_SCHEMA_VERSION
    assert a.route is None
    assert a.run.prefix == "local/demo-0123456789ab"
    assert a.run.started_at == T0.isoformat()
    assert a.baseline is not None and a.baseline.score == 10.0
    assert [s.index for s in a.submissions] == [1, 2]
    assert a.submissions[1].error == "bad" and a.submissions[1].score is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_scores_are_invalid(bad: float) -> None:
    result = EvalResult.from_json({"score": bad, "error": None})
    assert result.score is None
    s = Submission(index=1, submitted_at=at(5), result=result)
    assert not s.valid and s.error == "no score"
    report_json_bytes(build_report(history([s])))  # serialisable (allow_nan=False)
