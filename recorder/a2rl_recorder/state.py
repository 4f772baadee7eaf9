"""Scores as the server knows them: read from the store, never from the agent's workspace.

Submission 0 is the baseline; the agent's submissions are 1, 2, …. A submission's score comes
from `submissions/<n>/result.json` (written by the grader); `dispatch.json` explains a missing
result. Best-of-budget: the best is the highest valid score, the earliest one on a tie.
In cluster mode the operator's record of a result (the BenchSubmission status) comes first:
`results(index)` supplies it, and the store's result.json is the fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2rl.constants import BASELINE_INDEX
from a2rl.errors import NotFoundError
from a2rl.scores import Scored
from a2rl.scores import summarize as summarize_scores
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout


@dataclass(frozen=True)
class SubmissionRecord:
    index: int
    submitted_at: str | None
    score: float | None
    error: str | None
    model_digest: str | None
    code_revision: int | None
    evaluated: bool  # a result.json exists (or the dispatch failed for good)


@dataclass(frozen=True)
class Summary:
    baseline_score: float | None
    best: SubmissionRecord | None
    total_submissions: int


def summarize(records: list[SubmissionRecord]) -> Summary:
    """Best-of-budget (`a2rl.scores`); a record with an error has no valid score."""
    scores = summarize_scores(Scored(r.index, None if r.error is not None else r.score) for r in records)
    by_index = {r.index: r for r in records}
    return Summary(
        baseline_score=scores.baseline_score,
        best=None if scores.best_submission is None else by_index[scores.best_submission],
        total_submissions=scores.submissions,
    )


ResultSource = Callable[[int], dict[str, Any] | None]


class RunState:
    def __init__(self, store: ObjectStore, layout: RunLayout, results: ResultSource | None = None) -> None:
        self.store = store
        self.layout = layout
        self.results = results

    def _result(self, index: int) -> dict[str, Any] | None:
        if self.results is not None:
            found = self.results(index)
            if found is not None:
                return found
        return self._maybe_json(self.layout.submission_result(index))

    def indices(self) -> list[int]:
        """Indices with a recorded manifest (submission numbers in use)."""
        found = set()
        base = self.layout.submissions + "/"
        for key in self.store.list(self.layout.submissions):
            rest = key[len(base) :]
            number, _, name = rest.partition("/")
            if name == "manifest.json" and number.isdigit():
                found.add(int(number))
        return sorted(found)

    def _maybe_json(self, key: str) -> dict[str, Any] | None:
        try:
            value = self.store.get_json(key)
        except NotFoundError:
            return None
        return value if isinstance(value, dict) else None

    def record(self, index: int) -> SubmissionRecord:
        manifest = self._maybe_json(self.layout.submission_manifest(index)) or {}
        result = self._result(index)
        if result is None:
            failed = self._maybe_json(f"{self.layout.submission_dir(index)}/dispatch.json")
            score, error = None, (failed or {}).get("error")
            evaluated = failed is not None
        else:
            raw = result.get("score")
            score = float(raw) if isinstance(raw, int | float) else None
            error, evaluated = result.get("error"), True
        return SubmissionRecord(
            index=index,
            submitted_at=manifest.get("submitted_at"),
            score=score,
            error=error,
            model_digest=manifest.get("model_digest") or (result or {}).get("model_digest"),
            code_revision=manifest.get("code_revision"),
            evaluated=evaluated,
        )

    def records(self) -> list[SubmissionRecord]:
        indices = self.indices()
        if BASELINE_INDEX not in indices and self.baseline_result() is not None:
            indices = [BASELINE_INDEX, *indices]
        return [self.record(i) for i in indices]

    def summary(self) -> Summary:
        return summarize(self.records())

    def baseline_result(self) -> dict[str, Any] | None:
        return self._result(BASELINE_INDEX)
