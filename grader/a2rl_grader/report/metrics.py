"""Process metrics and the report document, as pure functions of a `RunHistory`.

Definitions are in docs/report.md; the document is an `a2rl.records.report.ReportRecord`. Times
are seconds since the run's start (`run.json` `started_at`, the agent's clock start); the same
history always gives a byte-identical `report.json` (no wall-clock reads, sorted keys, rounded
floats).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from a2rl.records.report import (
    REPORT_SCHEMA_VERSION,
    ReportBaseline,
    ReportBudget,
    ReportMetrics,
    ReportRecord,
    ReportRevision,
    ReportRun,
    ReportSubmission,
    ReportTimeline,
)
from a2rl.scores import SCORE_DIGITS, Scored, summarize
from a2rl.tracing.spans import timeline
from a2rl_grader.report.driver import driver_section
from a2rl_grader.report.headline import compute_headline
from a2rl_grader.report.history import Revision, RunHistory, Submission
from a2rl_grader.report.times import RATIO_DIGITS, SECONDS_DIGITS, iso, origin, seconds_since
from a2rl_grader.report.tool_calls import trajectory_section

MAX_PATHS_PER_REVISION = 20
MAX_ERROR_CHARS = 120


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def last_activity(history: RunHistory) -> datetime | None:
    """The latest submission, result or revision time (the run's end when it has not ended yet)."""
    times: list[datetime] = []
    for sub in history.submissions:
        times += [t for t in (sub.submitted_at, sub.result.finished_at if sub.result else None) if t]
    times += [r.created_at for r in history.revisions if r.created_at is not None]
    return max(times) if times else None


def best_submission(subs: Sequence[Submission]) -> Submission | None:
    """The valid submission with the highest score; the earliest one wins ties (`a2rl.scores`)."""
    best = summarize(Scored(s.index, s.score) for s in subs).best_submission
    return next((s for s in subs if s.index == best), None)


def first_valid(subs: Sequence[Submission]) -> Submission | None:
    return next((s for s in subs if s.valid), None)


def first_improvement(subs: Sequence[Submission], baseline_score: float | None) -> Submission | None:
    """The first valid submission scoring strictly above the baseline."""
    if baseline_score is None:
        return None
    return next((s for s in subs if s.score is not None and s.score > baseline_score), None)


def monotonic_ratio(scores: Sequence[float]) -> float | None:
    """Fraction of consecutive pairs that strictly increase: #(s[i+1] > s[i]) / (n - 1); None if n < 2."""
    if len(scores) < 2:
        return None
    ups = sum(1 for a, b in itertools.pairwise(scores) if b > a)
    return round(ups / (len(scores) - 1), RATIO_DIGITS)


def is_copy_of_base(sub: Submission, base_digest: str | None) -> bool:
    """The submitted model tree is byte-identical to the base model (same tree digest)."""
    if sub.identical_to_base:
        return True
    return base_digest is not None and sub.model_digest is not None and sub.model_digest == base_digest


def baseline_score(history: RunHistory) -> float | None:
    return history.baseline.score if history.baseline is not None else None


def _budget(history: RunHistory) -> tuple[float | None, int | None]:
    budget = history.run.record.budget
    if budget is None:
        return None, None
    wall = budget.wall_time_seconds
    return (float(wall) if wall is not None and wall > 0 else None, budget.max_submissions)


def revisions_before(revisions: Sequence[Revision], moment: datetime | None) -> int | None:
    """Revisions created at or before `moment` (None when `moment` is None)."""
    if moment is None:
        return None
    return sum(1 for r in revisions if r.created_at is not None and r.created_at <= moment)


def invalid_reasons(subs: Sequence[Submission]) -> dict[str, int]:
    """Invalid submissions counted by error message (first line, cut to MAX_ERROR_CHARS)."""
    counts: Counter[str] = Counter()
    for sub in subs:
        if sub.error is not None:
            counts[_short_error(sub.error)] += 1
    return dict(sorted(counts.items()))


def _short_error(error: str) -> str:
    line = error.strip().splitlines()[0] if error.strip() else error
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 1] + "…"


def compute_metrics(history: RunHistory) -> ReportMetrics:
    subs = history.submissions
    t0 = origin(history)
    base = baseline_score(history)
    base_digest = history.base_model_digest
    wall, _cap = _budget(history)
    valid = [s for s in subs if s.valid]
    scores = [s.score for s in valid if s.score is not None]
    best = best_submission(subs)
    first = first_valid(subs)
    improved = first_improvement(subs, base)
    submit_times = [s.submitted_at for s in subs if s.submitted_at is not None]
    first_submit = min(submit_times) if submit_times else None
    last_submit = max(submit_times) if submit_times else None
    ended = history.run.ended_at
    end_or_last = ended or last_activity(history)
    used = seconds_since(t0, end_or_last)
    eval_durations = [s.result.duration_s for s in subs if s.result and s.result.duration_s is not None]
    return ReportMetrics(
        baseline_score=_round(base, SCORE_DIGITS),
        best_score=_round(best.score if best else None, SCORE_DIGITS),
        best_submission=best.index if best else None,
        improvement=_round(best.score - base, SCORE_DIGITS)
        if best is not None and best.score is not None and base is not None
        else None,
        last_valid_score=_round(valid[-1].score if valid else None, SCORE_DIGITS),
        total_submissions=len(subs),
        valid_submissions=len(valid),
        invalid_submissions=len(subs) - len(valid),
        valid_submission_rate=round(len(valid) / len(subs), RATIO_DIGITS) if subs else None,
        invalid_reasons=invalid_reasons(subs),
        first_valid_index=first.index if first else None,
        first_valid_delay_s=seconds_since(t0, first.submitted_at) if first else None,
        first_improvement_index=improved.index if improved else None,
        time_to_first_improvement_s=seconds_since(t0, improved.submitted_at) if improved else None,
        time_to_best_s=seconds_since(t0, best.submitted_at) if best else None,
        monotonic_ratio=monotonic_ratio(scores),
        score_trajectory=[_round(s.score, SCORE_DIGITS) for s in subs],
        copy_of_base_count=sum(1 for s in subs if is_copy_of_base(s, base_digest)),
        distinct_models=len({s.model_digest for s in subs if s.model_digest}),
        duration_s=seconds_since(t0, ended),
        time_used_ratio=round(used / wall, RATIO_DIGITS) if used is not None and wall else None,
        first_submit_delay_s=seconds_since(t0, first_submit),
        last_submit_gap_s=seconds_since(last_submit, ended),
        eval_seconds_total=round(sum(eval_durations), SECONDS_DIGITS) if eval_durations else None,
        code_revisions=len(history.revisions),
        revisions_before_first_submission=revisions_before(history.revisions, first_submit),
    )


def submission_rows(history: RunHistory) -> list[ReportSubmission]:
    t0 = origin(history)
    base_digest = history.base_model_digest
    rows = []
    best_so_far: float | None = None
    for sub in history.submissions:
        if sub.score is not None and (best_so_far is None or sub.score > best_so_far):
            best_so_far = sub.score
        result = sub.result
        rows.append(
            ReportSubmission(
                index=sub.index,
                submitted_at=iso(sub.submitted_at),
                elapsed_s=seconds_since(t0, sub.submitted_at),
                score=_round(sub.score, SCORE_DIGITS),
                valid=sub.valid,
                error=sub.error,
                best_so_far=_round(best_so_far, SCORE_DIGITS),
                model_path=sub.model_path,
                model_digest=sub.model_digest,
                model_files=sub.model_files,
                model_bytes=sub.model_bytes,
                copy_of_base=is_copy_of_base(sub, base_digest),
                code_revision=sub.code_revision,
                code_digest=sub.code_digest,
                n=result.n if result else None,
                correct=result.correct if result else None,
                eval_duration_s=_round(result.duration_s, SECONDS_DIGITS) if result else None,
                backend=result.backend if result else None,
            )
        )
    return rows


def baseline_row(history: RunHistory) -> ReportBaseline | None:
    sub = history.baseline
    if sub is None:
        return None
    result = sub.result
    return ReportBaseline(
        score=_round(sub.score, SCORE_DIGITS),
        error=sub.error,
        model_path=sub.model_path,
        model_digest=sub.model_digest,
        evaluator_version=result.evaluator_version if result else None,
        backend=result.backend if result else None,
        n=result.n if result else None,
        correct=result.correct if result else None,
    )


def revision_rows(history: RunHistory) -> list[ReportRevision]:
    """The code-revision timeline: each revision compared with the one before (revision 1 with nothing)."""
    t0 = origin(history)
    rows = []
    previous: dict[str, tuple[str, int]] = {}
    for rev in history.revisions:
        added = sorted(set(rev.files) - set(previous))
        removed = sorted(set(previous) - set(rev.files))
        changed = sorted(p for p in set(rev.files) & set(previous) if rev.files[p] != previous[p])
        paths = [f"+{p}" for p in added] + [f"~{p}" for p in changed] + [f"-{p}" for p in removed]
        rows.append(
            ReportRevision(
                index=rev.index,
                created_at=iso(rev.created_at),
                elapsed_s=seconds_since(t0, rev.created_at),
                reason=rev.reason,
                digest=rev.digest,
                files=len(rev.files),
                bytes=rev.total_bytes,
                added=len(added),
                changed=len(changed),
                removed=len(removed),
                paths=paths[:MAX_PATHS_PER_REVISION],
                files_uploaded=rev.files_uploaded,
                bytes_uploaded=rev.bytes_uploaded,
            )
        )
        previous = rev.files
    return rows


def run_section(history: RunHistory) -> ReportRun:
    record = history.run.record
    layout = history.run.layout
    wall, cap = _budget(history)
    limits = {"agent_limits": record.agent_limits} if record.agent_limits is not None else {}
    queue = {
        k: getattr(record, k) for k in ("queue_wait_seconds", "evictions") if getattr(record, k) is not None
    }
    return ReportRun(
        prefix=layout.prefix,
        namespace=layout.namespace,
        name=layout.name,
        uid=layout.uid,
        task=history.run.task,
        mode=record.mode,
        sandbox=record.sandbox,
        base_model=record.base_model,
        agent=record.agent,
        driver=record.driver,
        budget=ReportBudget(wall_time_seconds=wall, max_submissions=cap),
        evaluator_version=record.evaluator_version,
        protocol=record.protocol,
        started_at=iso(history.run.started_at),
        deadline=record.deadline,
        ended_at=iso(history.run.ended_at),
        end_reason=history.run.end_reason,
        agent_exit_code=record.agent_exit_code,
        **limits,
        **queue,
    )


def build_report(history: RunHistory, spans: Sequence[Mapping[str, Any]] = ()) -> ReportRecord:
    """The report document (report.json). Headline numbers are repeated at the top level.

    `spans`: the run's trace (`traces.jsonl` records); its top-level steps become `timeline`.
    Every field is set (null ones included), so report.json has every key — but `driver` and
    `trajectory`, set only for a run with driver records / an agent stack's event stream, so that
    reports of other runs stay as they were.
    """
    metrics = compute_metrics(history)
    agent_sections = {
        key: section
        for key, section in (("driver", driver_section(history)), ("trajectory", trajectory_section(history)))
        if section is not None
    }
    return ReportRecord(
        schema_version=REPORT_SCHEMA_VERSION,
        run=run_section(history),
        baseline_score=metrics.baseline_score,
        best_score=metrics.best_score,
        best_submission=metrics.best_submission,
        improvement=metrics.improvement,
        total_submissions=metrics.total_submissions,
        valid_submissions=metrics.valid_submissions,
        route=None,  # route classification (SFT / RL / SFT→RL / copy-of-base) comes later
        headline=compute_headline(history, metrics),
        baseline=baseline_row(history),
        metrics=metrics,
        submissions=submission_rows(history),
        revisions=revision_rows(history),
        timeline=ReportTimeline.model_validate(timeline(spans)),
        **agent_sections,
    )


def report_json_bytes(report: ReportRecord) -> bytes:
    """Canonical serialisation of `report.to_json()` (the fields that were set, null ones included):
    sorted keys, 2-space indent, UTF-8, trailing newline; a NaN or infinity raises ValueError."""
    data = report.to_json()
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()
