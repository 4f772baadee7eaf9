"""The report for a terminal (`a2rl report`): the headline and the key tables as plain, aligned
text, readable without a Markdown viewer. The same rows as report.md (`render`), fewer sections."""

from __future__ import annotations

from a2rl.records.report import ReportRecord
from a2rl_grader.report.render import (
    SUBMISSION_HEADER,
    TIME_BASE_NOTE,
    headline_rows,
    integrity_lines,
    legacy_summary_rows,
    submission_table_rows,
    verdict_line,
)

#: Widest a cell is shown (longer ones are cut with "…"); keeps rows on one terminal line.
MAX_CELL = 60
INDENT = "  "


def cut(text: str, width: int = MAX_CELL) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def aligned(header: list[str] | None, rows: list[list[str]], width: int = MAX_CELL) -> list[str]:
    """Rows as left-aligned columns (two spaces apart), under an optional header and rule."""
    table = ([header] if header else []) + [[cut(c, width) for c in row] for row in rows]
    if not table:
        return []
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    pad = [[c.ljust(w) for c, w in zip(row, widths, strict=True)] for row in table]
    lines = [INDENT + "  ".join(row).rstrip() for row in pad]
    if header:
        lines.insert(1, INDENT + "  ".join("-" * w for w in widths))
    return lines


def render_text(report: ReportRecord, *, html_path: str | None = None) -> str:
    """The terminal page: title, the headline card, integrity warnings, the submissions and the
    invalid ones' errors; `html_path` (where the full page is) is named at the end."""
    run = report.run
    lines = [f"Run report: {run.name} ({run.prefix}), task {run.task or '-'}", ""]
    if report.headline is not None:
        lines += [verdict_line(report.headline), ""]
        lines += [*aligned(None, headline_rows(report.headline), width=200), "", TIME_BASE_NOTE, ""]
    else:  # a report written before the headline existed
        lines += [*aligned(None, legacy_summary_rows(report)), ""]
    warnings = integrity_lines(report)
    if warnings:
        lines += ["Integrity", *(f"{INDENT}! {w}" for w in warnings), ""]
    lines.append("Submissions")
    if report.submissions:
        lines += aligned(SUBMISSION_HEADER, submission_table_rows(report))
    else:
        lines.append(f"{INDENT}No submissions.")
    reasons = report.metrics.invalid_reasons
    if reasons:
        counts = [[str(n), k] for k, n in reasons.items()]
        lines += ["", "Invalid submissions by error", *aligned(None, counts)]
    more = f"; the page: {html_path}" if html_path else ""
    lines += ["", f"More (revisions, metrics, driver, timeline): a2rl report --md, --html, --open{more}", ""]
    return "\n".join(lines)
