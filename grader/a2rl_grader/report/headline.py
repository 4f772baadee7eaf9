"""The report's `headline`: the run's story at a glance (docs/report.md, "Headline").

`compute_headline` is a pure function of the `RunHistory` and the metrics built from it; every
format (Markdown, HTML, the terminal) renders the same `ReportHeadline` and never recomputes it.
"""

from __future__ import annotations

from typing import Any

from a2rl_tasks import task_class

from a2rl.records.report import ReportHeadline, ReportMetrics
from a2rl.records.result import TAMPERED_ERROR
from a2rl_grader.report.history import RunHistory
from a2rl_grader.report.times import origin, seconds_since

IMPROVED = "improved"
NO_CHANGE = "no change"
WORSE = "worse"
NO_VALID = "no valid submission"
NO_BASELINE = "no baseline"

PCT_DIGITS = 1


def task_metric(task: str | None) -> tuple[str | None, list[float] | None]:
    """The task's metric label and score range (`a2rl_tasks.base.Task.metric`, `.metric_range`);
    (None, None) for an unknown task or one whose module cannot be imported here."""
    if not task:
        return None, None
    try:
        cls = task_class(task)
    except Exception:  # an unknown task, or a module needing packages this process lacks
        return None, None
    low, high = cls.metric_range
    return cls.metric, [float(low), float(high)]


def eval_limit(history: RunHistory) -> int | None:
    """`spec.evaluation.limit` from run.json (None: the whole held-out set)."""
    evaluation: Any = (history.run.record.spec or {}).get("evaluation") or {}
    limit = evaluation.get("limit") if isinstance(evaluation, dict) else None
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def eval_items(history: RunHistory, best_index: int | None) -> int | None:
    """Held-out items a score is computed on: the best submission's `n`, else the baseline's,
    else any result's."""
    subs = [s for s in history.submissions if s.index == best_index]
    subs += [history.baseline] if history.baseline is not None else []
    subs += list(history.submissions)
    return next((s.result.n for s in subs if s.result is not None and s.result.n is not None), None)


def verdict(metrics: ReportMetrics, end_reason: str | None) -> tuple[str, str]:
    """(verdict, reason): the comparison of the best valid score with the baseline's, and why."""
    ended = f"run ended: {end_reason}" if end_reason else "run not ended"
    total, valid = metrics.total_submissions or 0, metrics.valid_submissions or 0
    base, best, delta = metrics.baseline_score, metrics.best_score, metrics.improvement
    if valid == 0 or best is None:
        if total == 0:
            return NO_VALID, f"the agent made no submission; {ended}"
        reasons = metrics.invalid_reasons
        top = max(reasons, key=lambda k: reasons[k]) if reasons else None
        why = f" (most often: {top})" if top else ""
        return NO_VALID, f"all {total} submissions were invalid{why}; {ended}"
    where = f"best {best} (#{metrics.best_submission})"
    if base is None or delta is None:
        return NO_BASELINE, f"{where} but no baseline score to compare with; {ended}"
    if delta > 0:
        return IMPROVED, f"{where} is {delta} above the baseline {base}; {ended}"
    if delta < 0:
        return WORSE, f"{where} is {-delta} below the baseline {base}: none beat the base model; {ended}"
    return NO_CHANGE, f"{where} equals the baseline {base}; {ended}"


def compute_headline(history: RunHistory, metrics: ReportMetrics) -> ReportHeadline:
    """The `headline` of the run (module docstring); `metrics` are `compute_metrics(history)`."""
    end_reason = history.run.end_reason
    kind, reason = verdict(metrics, end_reason)
    budget = history.run.record.budget
    wall = budget.wall_time_seconds if budget is not None else None
    budget_s = float(wall) if wall is not None and wall > 0 else None
    ratio = metrics.time_used_ratio
    used_s = seconds_since(origin(history), history.run.ended_at)
    if used_s is None and ratio is not None and budget_s is not None:
        used_s = round(ratio * budget_s, 3)  # a run still going: up to its last activity
    metric, metric_range = task_metric(history.run.task)
    results = [s for s in (history.baseline, *history.submissions) if s is not None and s.result is not None]
    tampered = sum(1 for s in results if s.error == TAMPERED_ERROR)
    sandbox = history.run.record.sandbox
    record = history.run.record
    queue = {"queue_wait_s": record.queue_wait_seconds} if record.queue_wait_seconds is not None else {}
    if record.evictions is not None:
        queue["evictions"] = record.evictions
    return ReportHeadline(
        verdict=kind,
        reason=reason,
        baseline_score=metrics.baseline_score,
        best_score=metrics.best_score,
        best_submission=metrics.best_submission,
        delta=metrics.improvement,
        valid_submissions=metrics.valid_submissions,
        total_submissions=metrics.total_submissions,
        used_s=used_s,
        budget_s=budget_s,
        budget_used_pct=round(ratio * 100, PCT_DIGITS) if ratio is not None else None,
        end_reason=end_reason,
        agent_last_words=history.run.record.agent_last_words if not metrics.total_submissions else None,
        eval_items=eval_items(history, metrics.best_submission),
        eval_limit=eval_limit(history),
        protocol=history.run.record.protocol,
        metric=metric,
        metric_range=metric_range,
        sandbox=sandbox,
        sandboxed=None if sandbox is None else sandbox != "none",
        results_checked=history.results_checked,
        results_sealed=history.results_sealed,
        results_verified=len(results) - tampered if history.results_checked else None,
        results_tampered=tampered,
        **queue,
    )
