"""Human-readable forms of a campaign report: Markdown, a self-contained HTML page, the terminal
view, and the plot of each cell's improvement with its 95 % interval (`improvement.png`)."""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl.records.campaign_report import CampaignCell, CampaignReportRecord, CampaignRun, Spread
from a2rl_grader.campaign_report.build import ROW_JOIN
from a2rl_grader.report.headline import task_metric

IMPROVEMENT_PNG = "improvement.png"
NO_VALUE = "—"
TABLE_NOTE = (
    "Each entry: mean ± half-width of the 95 % confidence interval (Student's t over the cell's "
    "seeds and repeats) of the improvement, best score - baseline, and n, the finished runs it is "
    "computed on. A finished run without a valid submission counts as the base model (improvement 0)."
)


def digits_for(task: str | None) -> int:
    """Decimals of a task's scores: 1 for a metric over 0-100, 3 for one over 0-1, else 2."""
    _metric, span = task_metric(task)
    if span is None:
        return 2
    return 1 if span[1] - span[0] >= 10 else 3


def fmt_number(value: float | None, digits: int, *, signed: bool = False) -> str:
    if value is None:
        return NO_VALUE
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def fmt_spread(spread: Spread, digits: int, *, signed: bool = False, with_n: bool = True) -> str:
    """`+1.2 ± 0.5 (n=3)`, `+1.2 (n=1)`, or `—` when no run has a value."""
    if spread.mean is None:
        return NO_VALUE
    text = fmt_number(spread.mean, digits, signed=signed)
    if spread.ci_high is not None:
        text += f" ± {spread.ci_high - spread.mean:.{digits}f}"
    return f"{text} (n={spread.n})" if with_n else text


def fmt_rate(value: float | None) -> str:
    return NO_VALUE if value is None else f"{100 * value:.0f} %"


def fmt_usd(value: float | None) -> str:
    return NO_VALUE if value is None else f"${value:.4f}"


def _counts(report: CampaignReportRecord) -> dict[str, Any]:
    runs = report.summary.get("runs")
    return runs if isinstance(runs, dict) else {}


def headline(report: CampaignReportRecord) -> str:
    """`4 runs: 3 finished (2 succeeded, 1 failed), 1 running, 0 not started; best cell: …`."""
    counts = _counts(report)
    total, succeeded, failed = counts.get("total", 0), counts.get("succeeded", 0), counts.get("failed", 0)
    running = sum(counts.get(k, 0) for k in ("pending", "queued", "running", "grading"))
    text = (
        f"{total} runs: {succeeded + failed} finished ({succeeded} succeeded, {failed} failed), "
        f"{running} running, {counts.get('notCreated', 0)} not started"
    )
    best = report.summary.get("bestCell")
    text += f"; best cell: {best}" if best else "; no cell has a result yet"
    cost = report.summary.get("driverCostUSD")
    return text + (f"; driver cost {fmt_usd(cost)}" if cost is not None else "")


def table_header(report: CampaignReportRecord) -> list[str]:
    corner = ROW_JOIN.join(report.table.row_axes) or "cell"
    return [corner, *(column or "task" for column in report.table.columns)]


def table_rows(report: CampaignReportRecord) -> list[list[str]]:
    """The paper's table: per row (the non-task axes) and task, the improvement's spread."""
    by_key = {c.key: c for c in report.cells}
    rows = []
    for label, keys in zip(report.table.rows, report.table.cells, strict=True):
        row = [label]
        for column, key in zip(report.table.columns, keys, strict=True):
            cell = by_key.get(key) if key is not None else None
            row.append(fmt_spread(cell.improvement, digits_for(column), signed=True) if cell else "")
        rows.append(row)
    return rows


CELL_HEADER = [
    "cell",
    "task",
    "runs",
    "finished",
    "failed",
    "best score",
    "improvement",
    "success rate",
    "driver cost",
]


def cell_rows(report: CampaignReportRecord) -> list[list[str]]:
    rows = []
    for c in report.cells:
        digits = digits_for(c.task)
        rows.append(
            [
                c.row or "",
                c.task or "",
                str(c.runs),
                str(c.finished),
                str(c.failed),
                fmt_spread(c.best_score, digits),
                fmt_spread(c.improvement, digits, signed=True),
                fmt_rate(c.success_rate),
                fmt_usd(c.driver_cost_usd),
            ]
        )
    return rows


RUN_HEADER = ["run", "cell", "seed", "phase", "end reason", "baseline", "best", "improvement", "cost"]


def run_rows(report: CampaignReportRecord) -> list[list[str]]:
    cells = {c.key: c for c in report.cells}
    rows = []
    for r in report.runs:
        cell = cells.get(r.cell)
        digits = digits_for(cell.task if cell else None)
        rows.append(
            [
                r.name or "",
                cell.row if cell and cell.row else (r.cell or ""),
                "" if r.seed is None else str(r.seed) + (f" r{r.repeat}" if _repeats(report) > 1 else ""),
                r.phase or "not started",
                (r.end_reason or NO_VALUE) + (f" ({r.attempts} attempts)" if r.attempts > 1 else ""),
                fmt_number(r.baseline_score, digits),
                fmt_number(r.best_score, digits),
                fmt_number(r.improvement, digits, signed=True),
                fmt_usd(r.driver_cost_usd),
            ]
        )
    return rows


def _repeats(report: CampaignReportRecord) -> int:
    repeats = report.campaign.spec.get("repeats", 1)
    return repeats if isinstance(repeats, int) else 1


def spec_lines(report: CampaignReportRecord) -> list[str]:
    """The campaign's settings in words: the template's fields no axis replaces, the axes, seeds,
    repeats."""
    spec = report.campaign.spec
    template: Any = spec.get("template") or {}
    matrix: Any = spec.get("matrix") or {}
    axes = set(report.campaign.axes)
    agent = template.get("agent") or {}
    budget = template.get("budget") or {}
    fixed = []
    if "task" not in axes:
        fixed.append(f"task {template.get('task')}")
    if "baseModel" not in axes:
        fixed.append(f"base model {(template.get('baseModel') or {}).get('name')}")
    if not axes & {"agent", "stack"}:
        who = agent.get("stack") or " ".join([*agent.get("command", []), *agent.get("args", [])])
        fixed.append(f"agent {who or '-'}")
    driver = template.get("driver") or {}
    if driver and not axes & {"agent", "driverModel"}:
        fixed.append(f"driver {driver.get('provider')}/{driver.get('model')}")
    fixed.append(f"budget {budget.get('wallTimeSeconds')} s")
    return [
        "every run: " + ", ".join(fixed),
        f"axes: {', '.join(report.campaign.axes) or 'none'}; seeds {matrix.get('seeds', [0])}; "
        f"repeats {spec.get('repeats', 1)}",
    ]


# --- Markdown --------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]


def _title(report: CampaignReportRecord) -> str:
    return f"Campaign report: {report.campaign.name} ({report.campaign.namespace})"


def render_markdown(report: CampaignReportRecord, png_name: str = IMPROVEMENT_PNG) -> str:
    lines = [f"# {_title(report)}", "", headline(report), ""]
    lines += ["## Improvement over the baseline", "", TABLE_NOTE, ""]
    lines += [*_md_table(table_header(report), table_rows(report)), ""]
    lines += [f"![improvement per cell]({png_name})", ""]
    lines += ["## Cells", "", *_md_table(CELL_HEADER, cell_rows(report)), ""]
    runs = run_rows(report)
    for row, run in zip(runs, report.runs, strict=True):
        row.append(f"[report]({run.report})" if run.report else NO_VALUE)
    lines += ["## Runs", "", *_md_table([*RUN_HEADER, "report"], runs), ""]
    lines += ["## Campaign", "", *(f"- {line}" for line in spec_lines(report)), ""]
    return "\n".join(lines)


# --- HTML ------------------------------------------------------------------------------------------

_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:14px}"
    "th{background:#f3f3f3}img{max-width:100%}.note{color:#555;font-size:13px}"
    ".headline{border:2px solid #999;border-radius:8px;padding:0.5em 1em;margin:1em 0;font-size:16px}"
    "table.paper td{font-variant-numeric:tabular-nums}"
)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    """A table of escaped texts; a cell given as `("<a …>", True)`-style raw HTML is not used here:
    links are added by `_html_link_table`."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    klass = f" class='{css}'" if css else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _link(href: str | None, text: str) -> str:
    if not href:
        return html.escape(NO_VALUE)
    return f"<a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>"


def _runs_html(report: CampaignReportRecord) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in [*RUN_HEADER, "report"])
    body = []
    for row, run in zip(run_rows(report), report.runs, strict=True):
        cells = [f"<td>{html.escape(c)}</td>" for c in row]
        cells[0] = f"<td>{_link(run.report, row[0])}</td>" if run.report else cells[0]
        cells.append(f"<td>{_link(run.report, 'report')}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(report: CampaignReportRecord, png_name: str = IMPROVEMENT_PNG) -> str:
    """A self-contained page (inline CSS, no scripts); the plot is linked by `png_name`, each run's
    report by a path relative to the campaign's report folder (it works in a directory store)."""
    title = html.escape(_title(report))
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>",
        f"<style>{_CSS}</style></head><body><h1>{title}</h1>",
        f"<p class='headline'>{html.escape(headline(report))}</p>",
        "<h2>Improvement over the baseline</h2>",
        f"<p class='note'>{html.escape(TABLE_NOTE)}</p>",
        _html_table(table_header(report), table_rows(report), "paper"),
        f"<img src='{html.escape(png_name, quote=True)}' alt='improvement per cell'>",
        "<h2>Cells</h2>",
        _html_table(CELL_HEADER, cell_rows(report)),
        "<h2>Runs</h2>",
        _runs_html(report),
        "<h2>Campaign</h2>",
        "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in spec_lines(report)) + "</ul>",
        "</body></html>\n",
    ]
    return "\n".join(parts)


# --- terminal --------------------------------------------------------------------------------------


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*row).rstrip() for row in rows)]


def render_text(report: CampaignReportRecord) -> str:
    """The terminal view: the headline, the paper's table and the cells' figures."""
    lines = [_title(report), headline(report), "", "improvement over the baseline, mean ± 95 % CI (n):"]
    lines += text_table(table_header(report), table_rows(report))
    lines += ["", *text_table(CELL_HEADER, cell_rows(report))]
    return "\n".join(lines) + "\n"


# --- the plot --------------------------------------------------------------------------------------


def _run_gains(cell: CampaignCell, runs: Sequence[CampaignRun]) -> list[float]:
    """The finished runs' improvements as the cell counts them (no valid submission: 0)."""
    gains = []
    for run in runs:
        if run.cell != cell.key or run.phase not in ("Succeeded", "Failed"):
            continue
        if run.improvement is not None:
            gains.append(run.improvement)
        elif run.baseline_score is not None:
            gains.append(0.0)
    return gains


def improvement_figure(report: CampaignReportRecord) -> Any:
    """Each cell's mean improvement with its 95 % interval as an error bar, its runs as dots."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    cells = report.cells
    width = max(6.0, min(16.0, 1.2 * len(cells) + 2))
    fig = Figure(figsize=(width, 4.8), dpi=100)
    ax = fig.add_subplot()
    xs = list(range(len(cells)))
    for x, cell in zip(xs, cells, strict=True):
        gains = _run_gains(cell, report.runs)
        if gains:
            offsets = [x + 0.12 * (i - (len(gains) - 1) / 2) / max(len(gains), 1) for i in range(len(gains))]
            ax.plot(offsets, gains, "o", color="tab:gray", alpha=0.5, markersize=4)
        mean = cell.improvement.mean
        if mean is None:
            continue
        half = cell.improvement.ci_high - mean if cell.improvement.ci_high is not None else None
        ax.errorbar(
            [x],
            [mean],
            yerr=[[half], [half]] if half is not None else None,
            fmt="s",
            color="tab:blue",
            capsize=6,
            markersize=7,
        )
        ax.annotate(
            f"n={cell.improvement.n}", (x, mean), textcoords="offset points", xytext=(8, 4), fontsize=8
        )
    ax.axhline(0.0, color="gray", linestyle="--", linewidth=1)
    labels = [
        "\n".join(textwrap.wrap(f"{c.row}" + (f" / {c.task}" if len(report.table.columns) > 1 else ""), 22))
        for c in cells
    ]
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_xlim(-0.6, max(len(cells) - 0.4, 0.6))
    tasks = {c.task for c in cells}
    metric, _span = task_metric(next(iter(tasks)) if len(tasks) == 1 else None)
    ax.set_ylabel(f"improvement ({metric})" if metric else "improvement (best - baseline)")
    ax.set_title(f"{report.campaign.name}: improvement per cell (mean, 95 % CI; dots: runs)")
    ax.grid(True, axis="y", alpha=0.3)
    if not any(c.improvement.mean is not None for c in cells):
        ax.text(
            0.5, 0.5, "no finished runs yet", transform=ax.transAxes, ha="center", va="center", color="gray"
        )
    fig.tight_layout()
    return fig


def render_improvement_png(report: CampaignReportRecord, path: Path) -> None:
    improvement_figure(report).savefig(path, format="png", metadata={"Software": None})
