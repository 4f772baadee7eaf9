"""What the local runner prints: progress lines and the end-of-run summary (pure functions)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from a2rl.scores import Scored, ScoreSummary
from a2rl.scores import summarize as summarize_scores


def summarize(entries: Iterable[Mapping[str, Any]], baseline_score: float | None = None) -> ScoreSummary:
    """Scores of `entries` (items of GET /submissions or result.json documents): each has an index
    under `submission_id` or `index` and a `score` (null when invalid or not evaluated yet)."""
    scored = []
    for entry in entries:
        idx = entry.get("submission_id", entry.get("index"))
        if isinstance(idx, int):
            score = entry.get("score")
            scored.append(Scored(idx, float(score) if isinstance(score, int | float) else None))
    return summarize_scores(scored, baseline_score)


def fmt_score(score: float | None) -> str:
    return "—" if score is None else f"{score:.1f}"


def fmt_duration(seconds: float) -> str:
    s = max(round(seconds), 0)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def progress_line(phase: str, elapsed: float, remaining: float, summary: ScoreSummary | None) -> str:
    line = f"[a2rl] {phase:<14} {fmt_duration(elapsed)} elapsed, {fmt_duration(remaining)} left"
    if summary is None:
        return line + "  (grading server not answering)"
    return (
        f"{line}  submissions {summary.submissions}  last {fmt_score(summary.last_score)}"
        f"  best {fmt_score(summary.best_score)}"
    )


def summary_lines(
    *,
    prefix: str,
    summary: ScoreSummary,
    end_reason: str,
    exit_code: int | None,
    duration_s: float,
    report_uri: str | None,
    workspace: str,
    store_uri: str,
) -> list[str]:
    imp = summary.improvement
    best = fmt_score(summary.best_score)
    if summary.best_submission is not None:
        best += f" (submission {summary.best_submission})"
    return [
        f"run         {prefix}",
        f"agent       {end_reason} (exit code {exit_code}) after {fmt_duration(duration_s)}",
        f"baseline    {fmt_score(summary.baseline_score)}",
        f"best        {best}",
        f"improvement {'—' if imp is None else f'{imp:+.1f}'}",
        f"submissions {summary.submissions} ({summary.valid_submissions} scored)",
        f"report      {report_uri or '— (not written)'}",
        f"workspace   {workspace}",
        f"store       {store_uri}",
    ]
