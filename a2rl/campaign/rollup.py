"""A campaign's roll-up from its runs' outcomes: runs per phase, per cell the mean ± 95 % CI of
best score and improvement, success rate and driver cost, and the best cell.

A finished run without a valid submission keeps the base model as its result: its best score is
the baseline and its improvement 0 (when the baseline is known). That is what the agent achieved,
so leaving such runs out would flatter a cell. Runs not finished yet count in the phases only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from a2rl.api.benchcampaign import BenchCampaignStatus, CellStatus, PhaseCounts, ScoreSpread
from a2rl.campaign.matrix import Cell, PlannedRun, cells_of
from a2rl.campaign.stats import Interval, mean_ci

#: Phases of a BenchRun (`a2rl.api.benchrun.Phase` values) a run may report.
SUCCEEDED, FAILED = "Succeeded", "Failed"
FINISHED_PHASES = frozenset({SUCCEEDED, FAILED})


@dataclass(frozen=True)
class RunOutcome:
    """What a campaign needs of one of its runs (the BenchRun's status, or a local run's record)."""

    phase: str | None = None
    baseline_score: float | None = None
    best_score: float | None = None
    improvement: float | None = None
    driver_cost_usd: float | None = None

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    def result(self) -> tuple[float | None, float | None]:
        """(best score, improvement) as the run's result: the base model's when it has none."""
        best, gain = self.best_score, self.improvement
        if best is None and self.baseline_score is not None:
            best = self.baseline_score
        if gain is None and best is not None and self.baseline_score is not None:
            gain = best - self.baseline_score
        return best, gain


@dataclass(frozen=True)
class CellRollup:
    cell: Cell
    runs: int
    finished: int
    failed: int
    best_score: Interval
    improvement: Interval
    success_rate: float | None
    driver_cost_usd: float | None
    run_names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Rollup:
    counts: PhaseCounts
    cells: list[CellRollup]
    driver_cost_usd: float | None

    @property
    def finished(self) -> int:
        return self.counts.succeeded + self.counts.failed

    @property
    def done(self) -> bool:
        return self.finished == self.counts.total

    @property
    def best(self) -> CellRollup | None:
        """The cell with the highest mean improvement (ties: the first in matrix order)."""
        scored = [c for c in self.cells if c.improvement.mean is not None]
        return max(scored, key=lambda c: c.improvement.mean or 0.0) if scored else None


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) if known else None


_COUNTED = {"Pending": "pending", "Queued": "queued", "Running": "running", "Grading": "grading"}


def count_phases(planned: Sequence[PlannedRun], outcomes: Mapping[str, RunOutcome]) -> PhaseCounts:
    counts = PhaseCounts(total=len(planned))
    for run in planned:
        outcome = outcomes.get(run.name)
        phase = outcome.phase if outcome is not None else None
        if outcome is None:
            counts.not_created += 1
        elif phase == SUCCEEDED:
            counts.succeeded += 1
        elif phase == FAILED:
            counts.failed += 1
        else:
            attr = _COUNTED.get(phase or "Pending", "pending")
            setattr(counts, attr, getattr(counts, attr) + 1)
    return counts


def rollup(planned: Sequence[PlannedRun], outcomes: Mapping[str, RunOutcome]) -> Rollup:
    """The campaign's roll-up; `outcomes` maps run names to what is known of them (a run missing
    from it has not been created)."""
    cells: list[CellRollup] = []
    for cell in cells_of(list(planned)):
        names = [run.name for run in planned if run.cell.key == cell.key]
        mine = [outcomes[name] for name in names if name in outcomes]
        finished = [o for o in mine if o.finished]
        results = [o.result() for o in finished]
        bests = [best for best, _ in results if best is not None]
        gains = [gain for _, gain in results if gain is not None]
        cells.append(
            CellRollup(
                cell=cell,
                runs=len(names),
                finished=len(finished),
                failed=sum(1 for o in finished if o.phase == FAILED),
                best_score=mean_ci(bests),
                improvement=mean_ci(gains),
                success_rate=(sum(1 for g in gains if g > 0) / len(finished)) if finished else None,
                driver_cost_usd=_sum([o.driver_cost_usd for o in mine]),
                run_names=names,
            )
        )
    total_cost = _sum([c.driver_cost_usd for c in cells])
    return Rollup(counts=count_phases(planned, outcomes), cells=cells, driver_cost_usd=total_cost)


def _spread(interval: Interval) -> ScoreSpread:
    return ScoreSpread(n=interval.n, mean=interval.mean, ci_low=interval.low, ci_high=interval.high)


def format_spread(interval: Interval, digits: int = 1) -> str:
    """`12.3 ± 4.5 (n=3)`, `12.3 (n=1)` or `—`."""
    if interval.mean is None:
        return "—"
    half = interval.half_width
    body = (
        f"{interval.mean:.{digits}f}" if half is None else f"{interval.mean:.{digits}f} ± {half:.{digits}f}"
    )
    return f"{body} (n={interval.n})"


def best_cell_line(result: Rollup) -> str | None:
    """One line naming the best cell and its mean improvement, for `kubectl get`."""
    best = result.best
    if best is None:
        return None
    return f"{best.cell.label}: +{format_spread(best.improvement)}".replace("+-", "-")


def cell_statuses(result: Rollup) -> list[CellStatus]:
    return [
        CellStatus(
            key=c.cell.key,
            axes=c.cell.as_dict(),
            runs=c.runs,
            finished=c.finished,
            failed=c.failed,
            best_score=_spread(c.best_score),
            improvement=_spread(c.improvement),
            success_rate=c.success_rate,
            driver_cost_usd=c.driver_cost_usd,
        )
        for c in result.cells
    ]


def status_figures(result: Rollup) -> BenchCampaignStatus:
    """The roll-up's part of a BenchCampaign status (conditions and phase are the caller's)."""
    return BenchCampaignStatus(
        progress=f"{result.finished}/{result.counts.total}",
        runs=result.counts,
        cells=cell_statuses(result),
        best_cell=best_cell_line(result),
        driver_cost_usd=result.driver_cost_usd,
    )
