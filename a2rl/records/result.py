"""`submissions/<n>/result.json`: a submission's evaluation, written only by the grader's eval
process (and, for a copy of the base model, by the recorder from the baseline's result).

Integrity (local mode): the side that produced a result — the recorder for an evaluation it ran,
the runner for the baseline — writes `submissions/<n>/seal.json`, the result's MAC under the
run's key bound to the run prefix and the index (`seal_result`). Every reader that holds the key
(`checked_result`) treats a result whose seal is missing or wrong as tampered: never scored
(`TAMPERED_ERROR`). Without a key (cluster mode: the store is out of the agent's reach) results
are read as they are.

The same shape is what the recorder hands back for a submission without a result.json
(`ResultRecord.failure`) and what it derives from a BenchSubmission's status in cluster mode
(`state`, `submission`, `reason`, `duration_seconds`, `result_uri`).
"""

from __future__ import annotations

from a2rl import integrity
from a2rl.records.base import Record, read_record
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout

#: The error of a result whose seal is missing or wrong (shown as "submission <n>: <error>").
TAMPERED_ERROR = "result.json failed its integrity check; not scored"


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
    #: Why the baseline cache entry was not used (its integrity check failed), when it was not.
    cache_problem: str | None = None

    @classmethod
    def failure(cls, index: int, task: str, error: str) -> ResultRecord:
        """What the agent sees for a submission whose evaluation produced no result."""
        return cls(index=index, task=task, score=None, error=error)

    @property
    def tampered(self) -> bool:
        return self.error == TAMPERED_ERROR


class Seal(Record):
    """`submissions/<n>/seal.json`: the MAC of the submission's result.json."""

    algorithm: str | None = None
    mac: str | None = None


def _context(layout: RunLayout, index: int) -> tuple[str, ...]:
    return ("result", layout.prefix, str(index))


def seal_result(store: ObjectStore, layout: RunLayout, index: int, result: ResultRecord, key: bytes) -> None:
    """Write the seal of `result` (what the trusted side produced) as submission `index`'s."""
    mac = integrity.sign(key, _context(layout, index), result.to_json())
    store.put_json(layout.submission_seal(index), Seal(algorithm=integrity.ALGORITHM, mac=mac).to_json())


def is_sealed(store: ObjectStore, layout: RunLayout, index: int, result: ResultRecord, key: bytes) -> bool:
    """True when submission `index`'s seal is `result`'s MAC under `key`."""
    seal = read_record(store, layout.submission_seal(index), Seal)
    if seal is None or seal.algorithm != integrity.ALGORITHM:
        return False
    return integrity.verify(key, seal.mac, _context(layout, index), result.to_json())


def checked_result(
    store: ObjectStore, layout: RunLayout, index: int, key: bytes | None
) -> ResultRecord | None:
    """Submission `index`'s result.json (None when absent or unreadable). With `key`, a result
    without a valid seal comes back as a failure with `TAMPERED_ERROR` (never a score)."""
    result = read_record(store, layout.submission_result(index), ResultRecord)
    if result is None or key is None or is_sealed(store, layout, index, result, key):
        return result
    return ResultRecord.failure(index, result.task or "", TAMPERED_ERROR)


def tampered_line(index: int) -> str:
    """The line summaries and reports show for a tampered result."""
    return f"submission {index}: {TAMPERED_ERROR}"
