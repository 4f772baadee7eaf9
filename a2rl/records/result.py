"""`submissions/<n>/result.json`: a submission's evaluation, written only by the grader's eval
process (and, for a copy of the base model, by the recorder from the baseline's result).

The same shape is what the recorder hands back for a submission without a result.json
(`ResultRecord.failure`) and what it derives from a BenchSubmission's status in cluster mode
(`state`, `submission`, `reason`, `duration_seconds`, `result_uri`).
"""

from __future__ import annotations

from a2rl.records.base import Record


class ResultRecord(Record):
    """One evaluation result; `score` is None (and `error` says why) when there is no score."""

    index: int | None = None
    task: str | None = None
    score: float | None = None
    error: str | None = None
    evaluator_version: str | None = None
    backend: str | None = None
    n: int | None = None
    correct: int | None = None
    metrics: dict[str, float] | None = None
    model_digest: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    #: The baseline's result came from the store-wide baseline cache.
    cached: bool | None = None
    #: A submission identical to the base model: the baseline's result, copied.
    copied_from_baseline: bool | None = None
    # Cluster mode: what the BenchSubmission status said (a2rl_recorder.cluster_dispatch).
    state: str | None = None
    submission: str | None = None
    reason: str | None = None
    duration_seconds: float | None = None
    result_uri: str | None = None

    @classmethod
    def failure(cls, index: int, task: str, error: str) -> ResultRecord:
        """What the agent sees for a submission whose evaluation produced no result."""
        return cls(index=index, task=task, score=None, error=error)
