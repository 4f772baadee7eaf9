"""What the operator decides for a BenchCampaign, as pure functions (`campaign.py` does the I/O).

- `next_runs`: the planned runs to create now — in plan order, those not created yet, while the
  campaign's created-and-unfinished runs stay under `spec.maxConcurrentRuns`;
- `run_manifest`: one planned run as a BenchRun (deterministic name, the campaign's labels, owned
  by the campaign: deleting the campaign deletes its runs);
- `verdict` / `invalid_verdict`: the campaign's phase and its GitOps-readable conditions'
  outcome, reason and message;
- `campaign_status`: the new status from the old one, the roll-up's figures and the verdict
  (conditions through `status.lifecycle`, so a campaign reads as BenchRuns do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2rl.api.benchcampaign import BenchCampaignStatus, CampaignPhase
from a2rl.campaign.matrix import PlannedRun, run_labels
from a2rl.campaign.rollup import FAILED, FINISHED_PHASES, Rollup, RunOutcome
from a2rl.constants import (
    API_GROUP_VERSION,
    BENCHCAMPAIGN_KIND,
    BENCHRUN_KIND,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    RESERVED_LABEL_PREFIX,
)
from a2rl.runs import parse_time
from a2rl_operator import status as st

Body = dict[str, Any]

R_PENDING = "Pending"
R_RUNNING = "Running"
R_ALL_SUCCEEDED = "AllRunsSucceeded"
R_RUNS_FAILED = "RunsFailed"
R_INVALID_SPEC = st.R_INVALID_SPEC
#: Failed runs named in the campaign's message (the rest counted).
NAMED_FAILURES = 10


def owner_reference(campaign: Body) -> Body:
    """Controller owner reference to the campaign: its runs (and report Job) go when it goes."""
    meta = campaign["metadata"]
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHCAMPAIGN_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_owned(obj: Body, uid: str) -> bool:
    return any(o.get("uid") == uid for o in (obj.get("metadata") or {}).get("ownerReferences") or [])


def run_phase(run: Body) -> str | None:
    return (run.get("status") or {}).get("phase")


def is_finished(run: Body) -> bool:
    return run_phase(run) in FINISHED_PHASES


def run_outcome(run: Body) -> RunOutcome:
    """What the roll-up needs of one BenchRun: its phase and scores from its status."""
    status = run.get("status") or {}

    def number(key: str) -> float | None:
        value = status.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    return RunOutcome(
        phase=status.get("phase"),
        baseline_score=number("baselineScore"),
        best_score=number("bestScore"),
        improvement=number("improvement"),
        driver_cost_usd=number("driverCostUSD"),
    )


def next_runs(
    planned: Sequence[PlannedRun], existing: Mapping[str, Body], max_concurrent: int
) -> list[PlannedRun]:
    """The planned runs to create now: in plan order, those not in `existing` (the campaign's runs
    by name, as listed from the API server), as many as `max_concurrent` leaves room for next to
    the created-and-unfinished ones."""
    in_flight = sum(1 for run in existing.values() if not is_finished(run))
    room = max(0, max_concurrent - in_flight)
    return [run for run in planned if run.name not in existing][:room]


def user_labels(campaign: Body) -> dict[str, str]:
    """The campaign's own labels its runs inherit (not the reserved `a2rl.dev/`, Kueue or
    `app.kubernetes.io/` ones)."""
    ours = (LABEL_NAME, LABEL_INSTANCE, LABEL_COMPONENT, LABEL_PART_OF, LABEL_MANAGED_BY)
    return {
        k: v
        for k, v in ((campaign.get("metadata") or {}).get("labels") or {}).items()
        if not k.startswith((RESERVED_LABEL_PREFIX, "kueue.x-k8s.io/")) and k not in ours
    }


def run_manifest(campaign: Body, run: PlannedRun) -> Body:
    """The BenchRun of one planned run: its planned name and spec, the campaign's labels (the
    campaign's name and the cell's key, `a2rl.campaign.matrix.run_labels`), owned by the campaign."""
    meta = campaign["metadata"]
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHRUN_KIND,
        "metadata": {
            "name": run.name,
            "namespace": meta["namespace"],
            "labels": {**user_labels(campaign), **run_labels(meta["name"], run.cell)},
            "ownerReferences": [owner_reference(campaign)],
        },
        "spec": run.spec.to_wire(),
    }


@dataclass(frozen=True)
class Verdict:
    """Where the campaign stands: its phase and the GitOps conditions' outcome, reason, message."""

    phase: CampaignPhase
    outcome: st.Outcome
    reason: str
    message: str

    @property
    def over(self) -> bool:
        return self.outcome is not st.Outcome.IN_FLIGHT


def invalid_verdict(message: str) -> Verdict:
    """The campaign cannot be expanded: nothing is created, and it is over."""
    return Verdict(CampaignPhase.FAILED, st.Outcome.FAILED, R_INVALID_SPEC, message)


def verdict(result: Rollup, planned: Sequence[PlannedRun], outcomes: Mapping[str, RunOutcome]) -> Verdict:
    """Succeeded once every run ended and none failed; Failed once every run ended and one or more
    failed (the message names them); else Running (a run exists) or Pending."""
    counts = result.counts
    finished, total = result.finished, counts.total
    if result.done:
        failed = [run.name for run in planned if (o := outcomes.get(run.name)) and o.phase == FAILED]
        if failed:
            named = ", ".join(failed[:NAMED_FAILURES]) + (
                f" and {len(failed) - NAMED_FAILURES} more" if len(failed) > NAMED_FAILURES else ""
            )
            message = f"{len(failed)} of {total} runs failed: {named}"
            return Verdict(CampaignPhase.FAILED, st.Outcome.FAILED, R_RUNS_FAILED, message)
        best = result.best
        tail = f"; best cell {best.cell.label}" if best is not None else ""
        message = f"all {total} runs succeeded{tail}"
        return Verdict(CampaignPhase.SUCCEEDED, st.Outcome.SUCCEEDED, R_ALL_SUCCEEDED, message)
    created = total - counts.not_created
    in_flight = created - finished
    message = f"{finished}/{total} runs finished, {in_flight} in flight, {counts.not_created} not created yet"
    if created == 0:
        return Verdict(CampaignPhase.PENDING, st.Outcome.IN_FLIGHT, R_PENDING, message)
    return Verdict(CampaignPhase.RUNNING, st.Outcome.IN_FLIGHT, R_RUNNING, message)


def last_completion(runs: Sequence[Body]) -> datetime | None:
    """When the last of `runs` ended (their `status.completionTime`)."""
    ends = [t for run in runs if (t := parse_time((run.get("status") or {}).get("completionTime")))]
    return max(ends) if ends else None


def campaign_status(
    old: BenchCampaignStatus,
    figures: BenchCampaignStatus | None,
    judged: Verdict,
    generation: int | None,
    now: str,
    *,
    completion: datetime | None = None,
    report_uri: str | None = None,
) -> tuple[BenchCampaignStatus, list[st.Change]]:
    """The campaign's new status and the condition transitions (for Events).

    `figures`: the roll-up's part (`a2rl.campaign.rollup.status_figures`; None for a campaign that
    cannot be expanded); the conditions come from `status.lifecycle` of the verdict, each with
    `observedGeneration`; `completionTime` is set once the campaign is over (the last run's end,
    else now) and kept; `reportUri` is kept once set."""
    conds = [st.status_wire(c) for c in old.conditions]
    changes = st.lifecycle(judged.outcome, judged.reason, judged.message)
    new_conds, transitions = st.apply_changes(conds, changes, generation, now)
    base = figures if figures is not None else BenchCampaignStatus()
    completion_time = old.completion_time
    if judged.over and completion_time is None:
        completion_time = completion or parse_time(now)
    if not judged.over:
        completion_time = None
    status = BenchCampaignStatus(
        observed_generation=generation,
        phase=judged.phase,
        conditions=st.condition_models(new_conds),
        progress=base.progress,
        runs=base.runs,
        cells=base.cells,
        best_cell=base.best_cell,
        driver_cost_usd=base.driver_cost_usd,
        completion_time=completion_time,
        report_uri=report_uri or old.report_uri,
    )
    return status, transitions


def status_of(campaign: Body) -> BenchCampaignStatus:
    """`status` of a BenchCampaign body (empty when it has none)."""
    return BenchCampaignStatus.model_validate(dict(campaign.get("status") or {}))


def same_status(a: BenchCampaignStatus, b: BenchCampaignStatus) -> bool:
    """Equal as the API server would store them (defaults filled, None fields absent)."""
    return a.to_wire() == b.to_wire()
