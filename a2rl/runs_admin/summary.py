"""One row per run: what `a2rl runs list` shows and `--json` prints (docs/cli.md, "a2rl runs list").

The scores come from the run's report (`report/report.json`) when it is current — written after
the run's end as run.json records it — and are otherwise derived from the records themselves
(`submissions/<n>/result.json`), taken as stored: a run still going, or one interrupted before its
report. What the run is and how it ended always comes from run.json.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from a2rl.constants import BASELINE_INDEX, LABEL_CAMPAIGN
from a2rl.records.base import read_record
from a2rl.records.report import ReportRecord
from a2rl.records.result import ResultRecord
from a2rl.records.run import AgentRef, RunRecord
from a2rl.runs import RunInfo, current_report, parse_time
from a2rl.runs_admin.local_files import local_activity
from a2rl.runs_admin.state import is_live, run_state
from a2rl.scores import Scored, improvement, summarize
from a2rl.store.base import ObjectStore

_SUBMISSION_KEY = re.compile(r"/submissions/(\d+)/(manifest|result)\.json$")

SubmissionStatus = Literal["valid", "invalid", "pending"]


@dataclass(frozen=True)
class SubmissionScore:
    """One agent submission: its score when valid; `invalid` (evaluated, no score) or `pending`
    (no result yet)."""

    index: int
    score: float | None
    status: SubmissionStatus

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "score": self.score, "status": self.status}


@dataclass(frozen=True)
class RunSummary:
    info: RunInfo
    state: str
    agent: str
    baseline_score: float | None
    best_score: float | None
    best_submission: int | None
    valid_submissions: int
    total_submissions: int
    driver_cost_usd: float | None
    #: `report` (a current report.json) or `records` (run.json and the results).
    source: Literal["report", "records"]
    submissions: list[SubmissionScore] = field(default_factory=list)

    @property
    def record(self) -> RunRecord:
        return self.info.record

    @property
    def ref(self) -> str:
        return self.info.ref

    @property
    def improvement(self) -> float | None:
        return improvement(self.best_score, self.baseline_score)

    @property
    def live(self) -> bool:
        return is_live(self.state)

    @property
    def labels(self) -> dict[str, str]:
        return run_labels(self.record)

    @property
    def campaign(self) -> str | None:
        return self.labels.get(LABEL_CAMPAIGN)

    def duration_s(self, now: datetime) -> float | None:
        """Seconds from the agent's start to the run's end (to `now` while it is live)."""
        if self.info.started_at is None:
            return None
        end = self.info.ended_at or (now if self.live else None)
        return None if end is None else max((end - self.info.started_at).total_seconds(), 0.0)

    def to_json(self, now: datetime) -> dict[str, Any]:
        """`a2rl runs list --json`'s object of this run (docs/cli.md lists the fields)."""
        record = self.record
        return {
            "ref": self.ref,
            "prefix": self.info.prefix,
            "name": self.info.layout.name,
            "uid": self.info.layout.uid,
            "task": self.info.task,
            "agent": self.agent,
            "state": self.state,
            "live": self.live,
            "end_reason": self.info.end_reason,
            "started_at": record.started_at,
            "ended_at": record.ended_at,
            "duration_s": self.duration_s(now),
            "baseline_score": self.baseline_score,
            "best_score": self.best_score,
            "best_submission": self.best_submission,
            "improvement": self.improvement,
            "valid_submissions": self.valid_submissions,
            "total_submissions": self.total_submissions,
            "driver_cost_usd": self.driver_cost_usd,
            "campaign": self.campaign,
            "labels": self.labels,
            "source": self.source,
        }


def run_labels(record: RunRecord) -> dict[str, str]:
    """run.json's `labels` (a campaign's runs carry `a2rl.dev/campaign`), {} without any."""
    return dict(record.labels or {})


def agent_label(agent: AgentRef | None) -> str:
    """The agent in a word: the stack (with its mode when not `free`), else the command's module
    (`python -m a2rl_agents.sft_baseline` → `a2rl_agents.sft_baseline`), else its script or program."""
    if agent is None:
        return "-"
    if agent.stack:
        return agent.stack if agent.mode in (None, "free") else f"{agent.stack} ({agent.mode})"
    command = list(agent.command)
    if "-m" in command[:-1]:
        return command[command.index("-m") + 1]
    for word in command:
        base = word.rsplit("/", 1)[-1]
        if not base.startswith("-") and not re.fullmatch(r"python[0-9.]*|uv|bash|sh|env", base):
            return word
    return " ".join(command) or (agent.image or "-")


def summary_from_report(info: RunInfo, state: str, report: ReportRecord) -> RunSummary:
    """A run's row from its current report (pure)."""
    subs = [
        SubmissionScore(
            index=s.index,
            score=float(s.score) if s.valid and s.score is not None else None,
            status="valid" if s.valid else ("invalid" if s.error else "pending"),
        )
        for s in report.submissions
        if s.index is not None
    ]
    cost = report.driver.cost_usd if report.driver is not None else None
    return RunSummary(
        info=info,
        state=state,
        agent=agent_label(info.record.agent),
        baseline_score=_float(report.baseline_score),
        best_score=_float(report.best_score),
        best_submission=report.best_submission,
        valid_submissions=report.valid_submissions or 0,
        total_submissions=report.total_submissions or 0,
        driver_cost_usd=_float(cost if cost is not None else info.record.driver_cost_usd),
        source="report",
        submissions=subs,
    )


def summary_from_results(
    info: RunInfo, state: str, submitted: list[int], results: dict[int, ResultRecord]
) -> RunSummary:
    """A run's row from its records (pure): `submitted` the indices with a manifest (or a result),
    `results` their result.json documents."""
    scored = [Scored(i, results[i].score if i in results else None) for i in submitted]
    baseline = results.get(BASELINE_INDEX)
    summary = summarize(scored, baseline.score if baseline is not None else None)
    subs = [
        SubmissionScore(
            index=i,
            score=results[i].score if i in results else None,
            status="pending"
            if i not in results
            else ("valid" if results[i].score is not None else "invalid"),
        )
        for i in sorted(submitted)
        if i != BASELINE_INDEX
    ]
    return RunSummary(
        info=info,
        state=state,
        agent=agent_label(info.record.agent),
        baseline_score=summary.baseline_score,
        best_score=summary.best_score,
        best_submission=summary.best_submission,
        valid_submissions=summary.valid_submissions,
        total_submissions=summary.submissions,
        driver_cost_usd=_float(info.record.driver_cost_usd),
        source="records",
        submissions=subs,
    )


def read_state(store: ObjectStore, info: RunInfo, now: datetime) -> str:
    """`state.run_state` with what this machine and the store know of the run's activity."""
    record = info.record
    if parse_time(record.ended_at) is not None:
        return run_state(record, now)
    return run_state(
        record,
        now,
        local_activity=local_activity(info.ref),
        run_json_written=store.modified_at(info.layout.run_json),
    )


def read_summary(store: ObjectStore, info: RunInfo, now: datetime) -> RunSummary:
    """The run's row: from its current report, else from its results."""
    state = read_state(store, info, now)
    report = current_report(store, info)
    if report is not None:
        return summary_from_report(info, state, report)
    submitted: set[int] = set()
    for key in store.list(info.layout.submissions):
        match = _SUBMISSION_KEY.search(key)
        if match is not None:
            submitted.add(int(match.group(1)))
    results: dict[int, ResultRecord] = {}
    for index in sorted(submitted):
        result = read_record(store, info.layout.submission_result(index), ResultRecord)
        if result is not None:
            results[index] = result
    return summary_from_results(info, state, sorted(submitted), results)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)
