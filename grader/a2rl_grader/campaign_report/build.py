"""`build_campaign_report`: a campaign's report.json from its planned runs and what the store
holds of them (pure: the same store contents give the same document, byte for byte)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from a2rl.api.benchcampaign import BenchCampaign
from a2rl.campaign.matrix import Cell, PlannedRun
from a2rl.campaign.rollup import CellRollup, Rollup, rollup, status_figures
from a2rl.campaign.stats import Interval
from a2rl.campaign.store_outcomes import StoredOutcome
from a2rl.records.campaign_report import (
    CAMPAIGN_REPORT_SCHEMA_VERSION,
    CampaignCell,
    CampaignInfo,
    CampaignReportRecord,
    CampaignRun,
    CampaignTable,
    Spread,
)
from a2rl.scores import round_score

#: The axis that makes the table's columns.
TASK_AXIS = "task"
#: The row of a matrix whose only axis is the task (or that has none).
ALL_RUNS = "all runs"
#: From a campaign's report folder (`campaigns/<ns>/<name>/report/`) to the store's root.
TO_STORE_ROOT = "../../../../"


#: Between the values of a row's axes (`codex / gpt-5`) and their names in the table's corner.
ROW_JOIN = " / "


def row_label(cell: Cell) -> str:
    """The cell's table row: its axis values but the task's, in matrix order (`codex / gpt-5`; the
    table's corner names the axes: `stack / driverModel`)."""
    return ROW_JOIN.join(value for axis, value in cell.axes if axis != TASK_AXIS) or ALL_RUNS


def _spread(interval: Interval) -> Spread:
    return Spread(
        n=interval.n,
        mean=round_score(interval.mean),
        ci_low=round_score(interval.low),
        ci_high=round_score(interval.high),
    )


def _cell_row(c: CellRollup, default_task: str) -> CampaignCell:
    return CampaignCell(
        key=c.cell.key,
        label=c.cell.label,
        axes=c.cell.as_dict(),
        row=row_label(c.cell),
        task=c.cell.as_dict().get(TASK_AXIS, default_task),
        runs=c.runs,
        finished=c.finished,
        succeeded=c.finished - c.failed,
        failed=c.failed,
        best_score=_spread(c.best_score),
        improvement=_spread(c.improvement),
        success_rate=None if c.success_rate is None else round(c.success_rate, 4),
        driver_cost_usd=None if c.driver_cost_usd is None else round(c.driver_cost_usd, 6),
        run_names=list(c.run_names),
    )


def _table(cells: Sequence[CampaignCell], row_axes: list[str]) -> CampaignTable:
    rows = list(dict.fromkeys(c.row or ALL_RUNS for c in cells))
    columns = list(dict.fromkeys(c.task or "" for c in cells))
    where = {(c.row, c.task): c.key for c in cells}
    grid = [[where.get((row, column)) for column in columns] for row in rows]
    return CampaignTable(row_axes=row_axes, rows=rows, columns=columns, cells=grid)


def _run_row(run: PlannedRun, stored: StoredOutcome | None) -> CampaignRun:
    """Every key written (null ones too): a record dumps only the fields it was given."""
    known: dict[str, object] = dict.fromkeys(CampaignRun.model_fields)
    known.update(name=run.name, cell=run.cell.key, seed=run.seed, repeat=run.repeat, attempts=0)
    if stored is not None:
        record, outcome = stored.info.record, stored.outcome
        known.update(
            phase=outcome.phase,
            end_reason=record.end_reason,
            prefix=stored.info.prefix,
            started_at=record.started_at,
            ended_at=record.ended_at,
            source=stored.source,
            attempts=stored.attempts,
            baseline_score=outcome.baseline_score,
            best_score=outcome.best_score,
            improvement=outcome.improvement,
            driver_cost_usd=outcome.driver_cost_usd,
            report=TO_STORE_ROOT + stored.report_html if stored.report_html else None,
        )
    return CampaignRun.model_validate(known)


def campaign_rollup(planned: Sequence[PlannedRun], stored: Mapping[str, StoredOutcome]) -> Rollup:
    return rollup(planned, {name: s.outcome for name, s in stored.items()})


def build_campaign_report(
    campaign: BenchCampaign,
    namespace: str,
    planned: Sequence[PlannedRun],
    stored: Mapping[str, StoredOutcome],
    report_uri: str | None,
) -> CampaignReportRecord:
    """The report of `campaign` (expanded into `planned`) from the runs the store has (`stored`,
    by planned name: `a2rl.campaign.store_outcomes.collect_outcomes`)."""
    result = campaign_rollup(planned, stored)
    status = status_figures(result)
    status.report_uri = report_uri
    summary = status.to_wire()
    summary.pop("conditions", None)  # the operator's, not the report's
    axes = [axis for axis, _value in planned[0].cell.axes] if planned else []
    cells = [_cell_row(c, campaign.spec.template.task) for c in result.cells]
    return CampaignReportRecord(
        schema_version=CAMPAIGN_REPORT_SCHEMA_VERSION,
        campaign=CampaignInfo(
            name=campaign.metadata.name,
            namespace=namespace,
            spec=campaign.spec.to_wire(),
            axes=axes,
        ),
        summary=summary,
        table=_table(cells, [axis for axis in axes if axis != TASK_AXIS]),
        cells=cells,
        runs=[_run_row(run, stored.get(run.name)) for run in planned],
    )
