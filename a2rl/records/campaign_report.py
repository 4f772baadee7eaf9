"""`campaigns/<namespace>/<campaign>/report/report.json`: a campaign's report (schema version "1"),
built by `a2rl_grader.campaign_report` from the campaign's runs and read by the CLI and the
operator. docs/report.md ("Campaign report") defines every key.

`summary` holds the figures of a BenchCampaign status in its wire form (camelCase: `progress`,
`runs`, `cells`, `bestCell`, `driverCostUSD`, `reportUri`), so the operator's report Job prints it
(`a2rl campaign report NAME --json`) and the operator copies it into the status as it is.
"""

from __future__ import annotations

from typing import Any

from a2rl.records.base import Record

CAMPAIGN_REPORT_SCHEMA_VERSION = "1"


class Spread(Record):
    """Mean and 95 % t-interval of one figure over a cell's finished runs (`ci_*` null for n < 2)."""

    n: int = 0
    mean: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


class CampaignInfo(Record):
    """`campaign`: what was run."""

    name: str | None = None
    namespace: str | None = None
    #: The BenchCampaign's spec in wire form (template, matrix, repeats, maxConcurrentRuns).
    spec: dict[str, Any] = {}
    #: The matrix's axes that vary, in matrix order (`task`, `agent`, `stack`, …; seeds aside).
    axes: list[str] = []


class CampaignCell(Record):
    """A `cells` row: one cell's roll-up."""

    key: str | None = None
    #: `agent=sft, protocol=a2rl` (`all runs` for a matrix without axes).
    label: str | None = None
    axes: dict[str, str] = {}
    #: The cell's table row (its non-task axis values, `codex / gpt-5`) and column (its task).
    row: str | None = None
    task: str | None = None
    runs: int = 0
    finished: int = 0
    succeeded: int = 0
    failed: int = 0
    best_score: Spread = Spread()
    improvement: Spread = Spread()
    success_rate: float | None = None
    driver_cost_usd: float | None = None
    run_names: list[str] = []


class CampaignRun(Record):
    """A `runs` row: one planned run and the record that counts for it."""

    name: str | None = None
    cell: str | None = None
    seed: int | None = None
    repeat: int | None = None
    #: `Succeeded`, `Failed`, `Running`, or null when the store has no record of it yet.
    phase: str | None = None
    end_reason: str | None = None
    prefix: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    #: `report` (the run's current report.json) or `results` (its sealed results); null: no record.
    source: str | None = None
    attempts: int = 0
    baseline_score: float | None = None
    best_score: float | None = None
    improvement: float | None = None
    driver_cost_usd: float | None = None
    #: The run's report.html relative to the campaign's report folder (null: none).
    report: str | None = None


class CampaignTable(Record):
    """`table`: the paper's table. Rows are the cells' non-task axes, columns the tasks; `cells`
    holds, per row, the key of the cell in each column (null where no cell is)."""

    row_axes: list[str] = []
    rows: list[str] = []
    columns: list[str] = []
    cells: list[list[str | None]] = []


class CampaignReportRecord(Record):
    schema_version: str | None = None
    campaign: CampaignInfo = CampaignInfo()
    #: The BenchCampaign status figures, wire form (module docstring).
    summary: dict[str, Any] = {}
    table: CampaignTable = CampaignTable()
    cells: list[CampaignCell] = []
    runs: list[CampaignRun] = []
