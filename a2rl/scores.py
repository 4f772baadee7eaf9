"""Best-of-budget, once: the one summary of a run's scores used by the recorder, the local runner,
the operator's BenchRun status and the report.

Submission 0 is the baseline; the agent's submissions are 1, 2, …. A submission is valid when it
has a score (an evaluation error leaves none). The best is the highest valid score, the earliest
submission on a tie (as in the reference). Improvement is best - baseline, rounded like every
score a2rl publishes (`SCORE_DIGITS`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from a2rl.constants import BASELINE_INDEX

#: Digits every published score, best score and improvement is rounded to.
SCORE_DIGITS = 6


def round_score(value: float | None) -> float | None:
    return None if value is None else round(float(value), SCORE_DIGITS)


def improvement(score: float | None, baseline: float | None) -> float | None:
    return None if score is None or baseline is None else round_score(score - baseline)


@dataclass(frozen=True)
class Scored:
    """One submission's index and score (None: invalid, failed or not evaluated yet)."""

    index: int
    score: float | None


@dataclass(frozen=True)
class ScoreSummary:
    baseline_score: float | None
    best_score: float | None
    best_submission: int | None
    last_score: float | None
    submissions: int  # agent submissions (the baseline not counted)
    valid_submissions: int

    @property
    def improvement(self) -> float | None:
        return improvement(self.best_score, self.baseline_score)


def summarize(scored: Iterable[Scored], baseline_score: float | None = None) -> ScoreSummary:
    """Best-of-budget over `scored`; index 0, when present, is the baseline (else `baseline_score`)."""
    agent: list[Scored] = []
    for item in scored:
        if item.index == BASELINE_INDEX:
            baseline_score = item.score if item.score is not None else baseline_score
        else:
            agent.append(item)
    agent.sort(key=lambda s: s.index)
    valid = [s for s in agent if s.score is not None]
    best = max(valid, key=lambda s: (s.score, -s.index)) if valid else None
    return ScoreSummary(
        baseline_score=baseline_score,
        best_score=best.score if best else None,
        best_submission=best.index if best else None,
        last_score=agent[-1].score if agent else None,
        submissions=len(agent),
        valid_submissions=len(valid),
    )
