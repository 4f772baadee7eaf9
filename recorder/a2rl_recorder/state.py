"""Scores as the server knows them: read from the store, never from the agent's workspace.

Submission 0 is the baseline; the agent's submissions are 1, 2, …. A submission's score comes
from `submissions/<n>/result.json` (written by the grader); `dispatch.json` explains a missing
result. Documents are read as `a2rl.records` models; an unreadable one counts as absent.
Best-of-budget: the best is the highest valid score, the earliest one on a tie.
In cluster mode the operator's record of a result (the BenchSubmission status) comes first:
`results(index)` supplies it, and the store's result.json is the fallback.

With the run's key (local mode) a result.json counts only with a valid seal
(`a2rl.records.result.checked_result`): one without is tampered, shown with its error and never
scored; while the recorder is still sealing a fresh result (`evaluating`) it counts as pending.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from a2rl.constants import BASELINE_INDEX
from a2rl.records.base import read_record
from a2rl.records.dispatch import DispatchRecord
from a2rl.records.result import ResultRecord, checked_result
from a2rl.records.submission import SubmissionManifest
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


ResultSource = Callable[[int], ResultRecord | None]


class RunState:
    def __init__(
        self,
        store: ObjectStore,
        layout: RunLayout,
        results: ResultSource | None = None,
        *,
        key: bytes | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.results = results
        self.key = key
        #: Submissions being evaluated now: their result.json may not be sealed yet.
        self.evaluating: set[int] = set()

    def result(self, index: int) -> ResultRecord | None:
        """Submission `index`'s result: from `results` first (cluster mode), else result.json
        (checked against its seal when the run has a key)."""
        if self.results is not None:
            found = self.results(index)
            if found is not None:
                return found
        result = checked_result(self.store, self.layout, index, self.key)
        if result is not None and result.tampered and index in self.evaluating:
            return None  # written, not sealed yet
        return result

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

    def record(self, index: int) -> SubmissionRecord:
        manifest = (
            read_record(self.store, self.layout.submission_manifest(index), SubmissionManifest)
            or SubmissionManifest()
        )
        result = self.result(index)
        if result is None:
            failed = read_record(self.store, self.layout.submission_dispatch(index), DispatchRecord)
            score, error = None, failed.error if failed is not None else None
            evaluated = failed is not None
        else:
            score, error, evaluated = result.score, result.error, True
        return SubmissionRecord(
            index=index,
            submitted_at=manifest.submitted_at,
            score=score,
            error=error,
            model_digest=manifest.model_digest or (result.model_digest if result is not None else None),
            code_revision=manifest.code_revision,
            evaluated=evaluated,
        )

    def records(self) -> list[SubmissionRecord]:
        indices = self.indices()
        if BASELINE_INDEX not in indices and self.baseline_record() is not None:
            indices = [BASELINE_INDEX, *indices]
        return [self.record(i) for i in indices]

    def summary(self) -> Summary:
        return summarize(self.records())

    def baseline_record(self) -> ResultRecord | None:
        return self.result(BASELINE_INDEX)
