"""`RunHistory`: everything the store holds about one run, as plain immutable values.

`load_history` is the only I/O here: it reads the store's documents as `a2rl.records` models
(`RunRecord`, `SubmissionManifest`, `ResultRecord`, `CodeRevision`, the driver gateway's
`DriverSummary` and `DriverCallRecord`s) and the agent stack's event stream. It tolerates what an
interrupted run leaves behind: a submission without result.json (evaluation in flight or crashed)
is kept and counts as invalid with the error "no result"; unreadable documents (not JSON, not an
object, not fitting their model) are treated as absent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from a2rl.constants import BASELINE_INDEX
from a2rl.errors import NotFoundError
from a2rl.records.base import read_record
from a2rl.records.driver import DriverCallRecord, DriverSummary, DriverUsage
from a2rl.records.driver_calls import iter_driver_calls
from a2rl.records.result import ResultRecord, checked_result
from a2rl.records.revision import CodeRevision
from a2rl.records.submission import SubmissionManifest
from a2rl.records.tree import TreeRecord
from a2rl.runs import RunInfo, parse_time, read_run_info
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.trajectory import AnswerCalls, answer_tool_calls, stream_events

NO_RESULT_ERROR = "no result"

_SUBMISSION_KEY = re.compile(r"/submissions/(\d+)/(manifest|result|seal)\.json$")
_REVISION_KEY = re.compile(r"/revisions/(\d+)\.json$")


@dataclass(frozen=True)
class EvalResult:
    """`submissions/<n>/result.json`, written by the grader's eval process."""

    score: float | None
    error: str | None
    evaluator_version: str | None = None
    backend: str | None = None
    n: int | None = None
    correct: int | None = None
    model_digest: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_record(cls, data: ResultRecord) -> EvalResult:
        return cls(
            score=_float(data.score),
            error=_str(data.error),
            evaluator_version=_str(data.evaluator_version),
            backend=_str(data.backend),
            n=data.n,
            correct=data.correct,
            model_digest=_str(data.model_digest),
            started_at=parse_time(data.started_at),
            finished_at=parse_time(data.finished_at),
            duration_s=_float(data.duration_s),
            metrics={k: v for k, v in (data.metrics or {}).items() if _float(v) is not None},
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalResult:
        """From result.json's JSON values (`pydantic.ValidationError` when they do not fit)."""
        return cls.from_record(ResultRecord.from_json(data))


@dataclass(frozen=True)
class Submission:
    """One submission: the recorder's manifest (may be missing) and the grader's result (may be missing)."""

    index: int
    submitted_at: datetime | None = None
    model_path: str | None = None
    model_digest: str | None = None
    base_model_digest: str | None = None
    identical_to_base: bool = False
    code_revision: int | None = None
    code_digest: str | None = None
    model_files: int | None = None
    model_bytes: int | None = None
    result: EvalResult | None = None

    @property
    def error(self) -> str | None:
        """Why this submission has no score (None for a valid one)."""
        if self.result is None:
            return NO_RESULT_ERROR
        if self.result.error:
            return self.result.error
        if self.result.score is None:
            return "no score"
        return None

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def score(self) -> float | None:
        """The score of a valid submission; None for an invalid one."""
        return self.result.score if self.valid and self.result is not None else None

    @classmethod
    def from_records(
        cls, index: int, manifest: SubmissionManifest | None, result: ResultRecord | None
    ) -> Submission:
        m = manifest or SubmissionManifest()
        parsed = EvalResult.from_record(result) if result is not None else None
        return cls(
            index=index,
            submitted_at=parse_time(m.submitted_at),
            model_path=_str(m.model_path),
            model_digest=_str(m.model_digest) or (parsed.model_digest if parsed else None),
            base_model_digest=_str(m.base_model_digest),
            identical_to_base=m.identical_to_base,
            code_revision=m.code_revision,
            code_digest=_str(m.code_digest),
            model_files=len(m.model.files) if m.model is not None else None,
            model_bytes=m.model.total_bytes if m.model is not None else None,
            result=parsed,
        )


@dataclass(frozen=True)
class Revision:
    """`revisions/<n>.json`: one snapshot of the agent's `code/` tree."""

    index: int
    created_at: datetime | None
    reason: str | None
    digest: str | None
    files: dict[str, tuple[str, int]]  # relative path -> (sha256, size)
    files_uploaded: int | None = None
    bytes_uploaded: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(size for _sha, size in self.files.values())

    @classmethod
    def from_record(cls, index: int, data: CodeRevision) -> Revision:
        tree = data.tree or TreeRecord()
        return cls(
            index=index,
            created_at=parse_time(data.created_at),
            reason=_str(data.reason),
            digest=_str(data.digest) or _str(tree.digest),
            files={f.path: (f.sha256, f.size) for f in tree.files},
            files_uploaded=data.files_uploaded,
            bytes_uploaded=data.bytes_uploaded,
        )


@dataclass(frozen=True)
class DriverCall:
    """A call record (`driver/calls/<n>.jsonl`) without its bodies and headers: what the report counts."""

    index: int
    started_at: datetime | None
    finished_at: datetime | None
    first_byte_s: float | None
    latency_s: float | None
    model: str | None  # the model the provider reported, else the one requested (as the gateway)
    status: int | None
    refused: str | None
    usage: DriverUsage | None
    cost_usd: float
    #: Tools the answer asked the agent's stack to call (`a2rl.trajectory.answer_tool_calls`).
    tool_calls: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, data: DriverCallRecord) -> DriverCall:
        return cls(
            index=data.index,
            started_at=parse_time(data.started_at),
            finished_at=parse_time(data.finished_at),
            first_byte_s=_float(data.first_byte_s),
            latency_s=_float(data.latency_s),
            model=_str(data.response_model) or _str(data.request_model),
            status=data.status,
            refused=_str(data.refused),
            usage=data.usage,
            cost_usd=_float(data.cost_usd) or 0.0,
            tool_calls=tuple(answer_tool_calls(data.protocol, data.response_body)),
        )

    @property
    def answer(self) -> AnswerCalls:
        return AnswerCalls(finished_at=self.finished_at, tools=self.tool_calls)


@dataclass(frozen=True)
class RunHistory:
    run: RunInfo
    baseline: Submission | None
    submissions: tuple[Submission, ...]  # agent submissions, index order (1, 2, …)
    revisions: tuple[Revision, ...]  # index order (1, 2, …)
    #: The driver gateway's records (None / empty: the run had no driver, or it made no call).
    driver_summary: DriverSummary | None = None
    driver_calls: tuple[DriverCall, ...] = ()  # index order
    #: The agent stack's event stream (`agent/trajectory.jsonl`) as JSON objects; None when absent.
    agent_events: tuple[dict[str, Any], ...] | None = None
    #: The results were checked against their seals (`load_history` had the run's key).
    results_checked: bool = False
    #: Results that have a seal (`submissions/<n>/seal.json`), checked or not.
    results_sealed: int = 0

    @property
    def stack(self) -> str | None:
        """The run's agent stack (run.json `agent.stack`), None for a command agent."""
        agent = self.run.record.agent
        return agent.stack if agent is not None else None

    @property
    def base_model_digest(self) -> str | None:
        """The base model's tree digest: from run.json, else the baseline, else any manifest."""
        base = self.run.record.base_model
        if base is not None and base.digest:
            return base.digest
        if self.baseline is not None and self.baseline.model_digest:
            return self.baseline.model_digest
        for sub in self.submissions:
            if sub.base_model_digest:
                return sub.base_model_digest
        return None


def load_history(store: ObjectStore, layout: RunLayout, *, run_key: bytes | None = None) -> RunHistory:
    """Read run.json, every submission and every revision of the run at `layout`.

    With `run_key` (the run's integrity key), a result.json without a valid seal is tampered:
    its submission has the error `TAMPERED_ERROR` and no score (`result.checked_result`)."""
    run = read_run_info(store, layout)
    manifests: dict[int, SubmissionManifest | None] = {}
    results: dict[int, ResultRecord | None] = {}
    sealed: set[int] = set()
    for key in store.list(layout.submissions):
        match = _SUBMISSION_KEY.search(key)
        if match is None:
            continue
        index = int(match.group(1))
        if match.group(2) == "manifest":
            manifests[index] = read_record(store, key, SubmissionManifest)
        elif match.group(2) == "seal":
            sealed.add(index)
        else:
            results[index] = checked_result(store, layout, index, run_key)
    subs = [
        Submission.from_records(index, manifests.get(index), results.get(index))
        for index in sorted(manifests.keys() | results.keys())
    ]
    baseline = next((s for s in subs if s.index == BASELINE_INDEX), None)
    revisions = []
    for key in store.list(layout.revisions):
        match = _REVISION_KEY.search(key)
        data = read_record(store, key, CodeRevision) if match else None
        if match and data is not None:
            revisions.append(Revision.from_record(int(match.group(1)), data))
    return RunHistory(
        run=run,
        baseline=baseline,
        submissions=tuple(s for s in subs if s.index != BASELINE_INDEX),
        revisions=tuple(sorted(revisions, key=lambda r: r.index)),
        driver_summary=read_record(store, layout.driver_summary, DriverSummary),
        driver_calls=load_driver_calls(store, layout),
        agent_events=load_agent_events(store, layout),
        results_checked=run_key is not None,
        results_sealed=len(sealed & results.keys()),
    )


def load_driver_calls(store: ObjectStore, layout: RunLayout) -> tuple[DriverCall, ...]:
    """Every readable call record (`driver/calls/`), slimmed (bodies dropped after reading), by index."""
    return tuple(DriverCall.from_record(r) for r in iter_driver_calls(store, layout))


def load_agent_events(store: ObjectStore, layout: RunLayout) -> tuple[dict[str, Any], ...] | None:
    try:
        raw = store.get_bytes(layout.agent_trajectory)
    except NotFoundError:
        return None
    return tuple(stream_events(raw))


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _float(value: object) -> float | None:
    """A finite number as float; None for anything else (NaN and infinities included)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
