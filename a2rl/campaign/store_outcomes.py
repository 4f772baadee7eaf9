"""A campaign's runs as an object store records them: which run.json belongs to which planned
run, how each ended, and its scores, as the `RunOutcome`s the roll-up takes.

Shared by `a2rl campaign run` (what is already done), `a2rl campaign report` (locally and as the
operator's report Job) and the store index. A campaign's run is found by its run.json: the
`a2rl.dev/campaign` label (`RunRecord.labels`) names the campaign and the run's name is the
planned name (`a2rl.campaign.matrix.run_name`); a planned run may have several records (a run
interrupted and run again), the newest finished one counts.

Phases come from run.json's `end_reason` (the one vocabulary of the local runner and the
operator, `a2rl.records.run.EndReason`): `completed`, `deadline_exceeded`,
`driver_budget_exhausted` and `no_submission` are `Succeeded` (the agent had its budget);
`failed`, the limits and `interrupted` are `Failed`; a run without `ended_at` is `Running`.
Scores come from the run's report (`report/report.json`) when it describes the run as it ended,
else from its results (`submissions/<n>/result.json`; of a local run only the sealed ones, those
with a `seal.json` — the key to verify them is gone with the runner).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from a2rl.api.benchcampaign import BenchCampaign
from a2rl.campaign.matrix import PlannedRun
from a2rl.campaign.rollup import FAILED, SUCCEEDED, RunOutcome
from a2rl.constants import LABEL_CAMPAIGN
from a2rl.errors import A2rlError, NotFoundError
from a2rl.records.base import read_record
from a2rl.records.report import ReportRecord
from a2rl.records.result import ResultRecord
from a2rl.records.run import (
    COMPLETED,
    DEADLINE_EXCEEDED,
    DRIVER_BUDGET_EXHAUSTED,
    INTERRUPTED,
    NO_SUBMISSION,
)
from a2rl.runs import RunInfo, current_report, list_runs
from a2rl.scores import Scored, round_score, summarize
from a2rl.store.base import ObjectStore
from a2rl.store.layout import CampaignLayout

#: End reasons of a run that had its budget: the campaign counts it `Succeeded`; every other end
#: reason (failed, a limit, interrupted, one this version does not know) is `Failed`.
SUCCEEDED_END_REASONS = frozenset({COMPLETED, DEADLINE_EXCEEDED, DRIVER_BUDGET_EXHAUSTED, NO_SUBMISSION})
#: The phase of a run whose run.json has no `ended_at` (going, or its runner died).
RUNNING = "Running"
REPORT_HTML = "report.html"
_RESULT_KEY = re.compile(r"/submissions/(\d+)/result\.json$")
_CAMPAIGN_JSON_KEY = re.compile(r"^campaigns/([^/]+)/([^/]+)/campaign\.json$")

Source = Literal["report", "results"]


def phase_of(info: RunInfo) -> str:
    """The run's campaign phase: `Running` until run.json has `ended_at`, then `Succeeded` or
    `Failed` by its `end_reason`."""
    if info.ended_at is None:
        return RUNNING
    return SUCCEEDED if info.end_reason in SUCCEEDED_END_REASONS else FAILED


def is_finished(info: RunInfo) -> bool:
    """The run ended and was not interrupted: `a2rl campaign run` does not run it again."""
    return info.ended_at is not None and info.end_reason != INTERRUPTED


def campaign_runs(store: ObjectStore, namespace: str, campaign: str) -> dict[str, list[RunInfo]]:
    """The campaign's run records in `namespace`, by run name, each list oldest first."""
    found: dict[str, list[RunInfo]] = {}
    for info in list_runs(store, namespace):
        if info.layout.namespace != namespace or (info.record.labels or {}).get(LABEL_CAMPAIGN) != campaign:
            continue
        found.setdefault(info.layout.name, []).append(info)
    return found


def chosen_record(records: Sequence[RunInfo]) -> RunInfo | None:
    """The record that stands for a planned run (`records` oldest first): the newest finished
    one, else the newest interrupted one, else the newest (still going, or its runner died)."""
    for keep in (is_finished, lambda info: info.ended_at is not None, lambda _info: True):
        chosen = [info for info in records if keep(info)]
        if chosen:
            return chosen[-1]
    return None


@dataclass(frozen=True)
class StoredOutcome:
    """One planned run as the store has it."""

    name: str
    #: The record that counts (`chosen_record`).
    info: RunInfo
    outcome: RunOutcome
    #: Where the scores came from: the run's current report, or its (sealed) results.
    source: Source
    #: How many records the planned run has (a run interrupted and run again has two).
    attempts: int
    #: The key of the run's report.html when the store has one.
    report_html: str | None


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def outcome_from_report(info: RunInfo, report: ReportRecord) -> RunOutcome:
    cost = report.driver.cost_usd if report.driver is not None else None
    return RunOutcome(
        phase=phase_of(info),
        baseline_score=_float(report.baseline_score),
        best_score=_float(report.best_score),
        improvement=_float(report.improvement),
        driver_cost_usd=_float(cost if cost is not None else info.record.driver_cost_usd),
    )


def outcome_from_results(store: ObjectStore, info: RunInfo) -> RunOutcome:
    """Best-of-budget over the run's stored results; a local run's unsealed results are left out."""
    layout = info.layout
    sealed_only = info.record.mode != "cluster"
    scored: list[Scored] = []
    for key in store.list(layout.submissions):
        match = _RESULT_KEY.search(key)
        if match is None:
            continue
        index = int(match.group(1))
        if sealed_only and not store.exists(layout.submission_seal(index)):
            continue
        result = read_record(store, key, ResultRecord)
        if result is not None:
            scored.append(Scored(index, result.score))
    summary = summarize(scored)
    return RunOutcome(
        phase=phase_of(info),
        baseline_score=round_score(summary.baseline_score),
        best_score=round_score(summary.best_score),
        improvement=summary.improvement,
        driver_cost_usd=_float(info.record.driver_cost_usd),
    )


def stored_outcome(store: ObjectStore, name: str, records: Sequence[RunInfo]) -> StoredOutcome | None:
    info = chosen_record(records)
    if info is None:
        return None
    report = current_report(store, info)
    html_key = f"{info.layout.report_dir}/{REPORT_HTML}"
    return StoredOutcome(
        name=name,
        info=info,
        outcome=outcome_from_report(info, report)
        if report is not None
        else outcome_from_results(store, info),
        source="report" if report is not None else "results",
        attempts=len(records),
        report_html=html_key if store.exists(html_key) else None,
    )


def collect_outcomes(
    store: ObjectStore, namespace: str, campaign: str, planned: Sequence[PlannedRun]
) -> dict[str, StoredOutcome]:
    """The planned runs the store has a record of, by name (a planned run without one is absent)."""
    records = campaign_runs(store, namespace, campaign)
    found: dict[str, StoredOutcome] = {}
    for run in planned:
        stored = stored_outcome(store, run.name, records.get(run.name, []))
        if stored is not None:
            found[run.name] = stored
    return found


def finished_runs(store: ObjectStore, namespace: str, campaign: str) -> dict[str, RunInfo]:
    """Run name → its newest finished record (what `a2rl campaign run` skips)."""
    done: dict[str, RunInfo] = {}
    for name, records in campaign_runs(store, namespace, campaign).items():
        finished = [info for info in records if is_finished(info)]
        if finished:
            done[name] = finished[-1]
    return done


# --- campaign.json ---------------------------------------------------------------------------------


def campaign_document(campaign: BenchCampaign) -> dict[str, Any]:
    """campaign.json: the BenchCampaign as run, in wire form, without its status."""
    doc = campaign.to_wire()
    doc.pop("status", None)
    return doc


def write_campaign(store: ObjectStore, layout: CampaignLayout, campaign: BenchCampaign) -> None:
    store.put_json(layout.campaign_json, campaign_document(campaign))


def read_campaign(store: ObjectStore, layout: CampaignLayout) -> BenchCampaign:
    """The campaign.json of `layout` as a BenchCampaign (one-line `A2rlError` when it is missing
    or invalid)."""
    try:
        data = store.get_json(layout.campaign_json)
    except NotFoundError:
        raise A2rlError(
            f"no campaign {layout.name!r} in namespace {layout.namespace!r} of store {store.uri} "
            f"({layout.campaign_json} missing){_known_hint(store, layout)}"
        ) from None
    except ValueError as exc:
        raise A2rlError(f"{store.url_for(layout.campaign_json)} is not valid JSON: {exc}") from None
    try:
        return BenchCampaign.model_validate(data)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise A2rlError(
            f"{store.url_for(layout.campaign_json)} is not a valid BenchCampaign: "
            f"{' '.join(first[:3]) if first else exc}"
        ) from None


def list_campaigns(store: ObjectStore) -> list[CampaignLayout]:
    """Every campaign with a campaign.json in the store, by namespace and name."""
    found = []
    for key in store.list("campaigns"):
        match = _CAMPAIGN_JSON_KEY.match(key)
        if match is not None:
            found.append(CampaignLayout(match.group(1), match.group(2)))
    return sorted(found, key=lambda c: (c.namespace, c.name))


def _known_hint(store: ObjectStore, layout: CampaignLayout) -> str:
    known = list_campaigns(store)
    if not known:
        return "; the store has no campaigns"
    names = ", ".join(f"{c.namespace}/{c.name}" for c in known[:10])
    return f"; campaigns there: {names}"
