"""`a2rl runs list`: every run of a store as a `RunSummary`, newest first, filtered."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from a2rl.constants import LABEL_CAMPAIGN
from a2rl.runs import RunInfo, list_runs
from a2rl.runs_admin.summary import RunSummary, agent_label, read_summary, run_labels
from a2rl.runs_admin.table import format_cost, format_delta, format_local_time, format_score
from a2rl.store.base import ObjectStore


@dataclass(frozen=True)
class RunFilter:
    """`--task`, `--stack`, `--campaign`: None matches every run."""

    task: str | None = None
    #: The agent's stack (`claude-code`, …) or, for a command agent, its label (`agent_label`).
    stack: str | None = None
    #: run.json's `labels["a2rl.dev/campaign"]`.
    campaign: str | None = None

    def matches(self, info: RunInfo) -> bool:
        record = info.record
        if self.task is not None and info.task != self.task:
            return False
        if self.stack is not None:
            agent = record.agent
            stack = agent.stack if agent is not None else None
            if self.stack not in (stack, agent_label(agent)):
                return False
        return self.campaign is None or run_labels(record).get(LABEL_CAMPAIGN) == self.campaign


def newest_first(runs: Iterable[RunInfo], written: dict[str, datetime | None]) -> list[RunInfo]:
    """`runs` newest first: by the agent's start, or, for a run not started yet, by when its
    run.json was written (`written`, by prefix); ties by prefix, newest-looking last prefix first."""
    floor = datetime.min.replace(tzinfo=UTC)

    def key(run: RunInfo) -> tuple[datetime, str]:
        return (run.started_at or written.get(run.prefix) or floor, run.prefix)

    return sorted(runs, key=key, reverse=True)


def list_summaries(store: ObjectStore, run_filter: RunFilter, now: datetime) -> list[RunSummary]:
    """The summaries of the store's runs that `run_filter` matches, newest first."""
    runs = [info for info in list_runs(store) if run_filter.matches(info)]
    written = {
        info.prefix: store.modified_at(info.layout.run_json) for info in runs if info.started_at is None
    }
    return [read_summary(store, info, now) for info in newest_first(runs, written)]


LIST_HEADERS = (
    "RUN",
    "TASK",
    "AGENT",
    "STATE",
    "STARTED",
    "BEST",
    "BASELINE",
    "IMPROVEMENT",
    "VALID/SUBS",
    "COST",
)


def list_rows(summaries: list[RunSummary]) -> list[list[str]]:
    """`a2rl runs list`'s table rows, in `LIST_HEADERS` order."""
    return [
        [
            s.ref,
            s.info.task or "-",
            s.agent,
            s.state,
            format_local_time(s.info.started_at),
            format_score(s.best_score),
            format_score(s.baseline_score),
            format_delta(s.improvement),
            f"{s.valid_submissions}/{s.total_submissions}",
            format_cost(s.driver_cost_usd),
        ]
        for s in summaries
    ]
