"""Human-readable forms of a report: Markdown, a self-contained HTML page, the trajectory plot."""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path
from typing import Any

from a2rl.constants import BASELINE_INDEX
from a2rl.records.report import ReportDriver, ReportHeadline, ReportRecord, ReportTimeline, ReportTrajectory
from a2rl.records.result import TAMPERED_ERROR, tampered_line
from a2rl.runs import parse_time
from a2rl.trajectory.events import TRAINING
from a2rl_grader.report.headline import IMPROVED, NO_CHANGE, WORSE, task_metric
from a2rl_grader.report.history import RunHistory
from a2rl_grader.report.metrics import baseline_score, best_submission
from a2rl_grader.report.times import clock, origin, seconds_since
from a2rl_grader.report.tool_calls import TIMING_DRIVER, TIMING_STREAM, agent_tool_calls
from a2rl_grader.report.transcript import TRANSCRIPT_HTML

SHORT_DIGEST = 12
#: Tool calls listed in the "Agent trajectory" table and on the timeline (all are in report.json).
MAX_TOOL_CALL_ROWS = 200

#: The unit of a metric that is a moment of the run: shown on the page's one time base (`clock`).
CLOCK = "clock"
#: The one time base of every page, said once under the headline.
TIME_BASE_NOTE = (
    "Times are m:ss since the run's start (run.json started_at, the agent's clock; negative: before it)."
)

# (metric key, label, unit) in the order of the metrics table. The headline's facts (baseline,
# best, improvement, submissions, budget used) are not repeated here.
METRIC_ROWS: tuple[tuple[str, str, str], ...] = (
    ("last_valid_score", "Last valid score", ""),
    ("invalid_submissions", "Invalid submissions", ""),
    ("valid_submission_rate", "Valid-submission rate", ""),
    ("first_valid_index", "First valid submission", ""),
    ("first_valid_delay_s", "First valid at", CLOCK),
    ("first_improvement_index", "First improving submission", ""),
    ("time_to_first_improvement_s", "First improvement at", CLOCK),
    ("time_to_best_s", "Best at", CLOCK),
    ("monotonic_ratio", "Monotonic ratio", ""),
    ("copy_of_base_count", "Copies of the base model", ""),
    ("distinct_models", "Distinct models submitted", ""),
    ("first_submit_delay_s", "First submission at", CLOCK),
    ("last_submit_gap_s", "End - last submission", "s"),
    ("eval_seconds_total", "Evaluation time (sum)", "s"),
    ("code_revisions", "Code revisions", ""),
    ("revisions_before_first_submission", "Revisions before first submission", ""),
)


def fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == CLOCK:
        return clock(float(value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:.4f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:.1f}"
    else:
        text = str(value)
    return f"{text} {unit}".rstrip() if unit else text


def short(digest: str | None) -> str:
    return digest[:SHORT_DIGEST] if digest else "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def summary_rows(report: ReportRecord) -> list[list[str]]:
    run = report.run
    base = run.base_model
    agent = run.agent
    # An agent without a recorded command shows its image (an empty command shows as empty).
    command = agent.command if agent is not None and "command" in agent.model_fields_set else None
    image = agent.image if agent is not None else None
    if agent is not None and agent.stack:  # an LLM agent stack: a2rl built its command line
        shown = f"{agent.stack} {fmt(agent.stack_version)} ({fmt(agent.mode)} mode)"
    else:
        shown = " ".join(map(str, command)) if command is not None else fmt(image)
    # Rows only runs recorded after these fields existed have. The headline's facts (scores,
    # submissions, budget, end reason, protocol, sandbox) are not repeated here.
    limits = [["Agent limits", run.agent_limits]] if run.agent_limits else []
    legacy = [] if report.headline is not None else legacy_summary_rows(report)
    return [
        ["Run", str(run.prefix)],
        ["Task", fmt(run.task)],
        ["Base model", f"{fmt(base.name if base else None)} ({short(base.digest if base else None)})"],
        ["Agent", shown],
        ["Mode", fmt(run.mode)],
        *limits,
        ["Started", fmt(run.started_at)],
        ["Ended", fmt(run.ended_at)],
        ["Agent exit code", fmt(run.agent_exit_code)],
        *legacy,
        ["Route", fmt(report.route)],
    ]


def legacy_summary_rows(report: ReportRecord) -> list[list[str]]:
    """What a report written before the headline existed shows in its place."""
    run = report.run
    protocol = [["Evaluation protocol", run.protocol]] if run.protocol else []
    return [
        *protocol,
        ["Sandbox", fmt(run.sandbox)],
        ["End reason", fmt(run.end_reason)],
        ["Budget", fmt(run.budget.wall_time_seconds, "s")],
        ["Baseline score", fmt(report.baseline_score)],
        ["Best score", f"{fmt(report.best_score)} (submission {fmt(report.best_submission)})"],
        ["Improvement", fmt(report.improvement)],
        ["Valid submissions", f"{report.valid_submissions} of {report.total_submissions}"],
    ]


VERDICT_MARKS = {IMPROVED: "▲", NO_CHANGE: "=", WORSE: "▼"}


def verdict_line(headline: ReportHeadline) -> str:
    """E.g. "▼ WORSE: best 0.0 (#2) is 1.0 below the baseline 1.0 …; run ended: time_limit"."""
    mark = VERDICT_MARKS.get(str(headline.verdict), "✗")
    return f"{mark} {str(headline.verdict).upper()}: {fmt(headline.reason)}"


def num(value: float | None) -> str:
    """A number without a needless ".0" (1800.0 → "1800", 105.4 → "105.4"); "-" for None."""
    return "-" if value is None else f"{value:g}"


def fmt_delta(delta: float | None) -> str:
    if delta is None:
        return "-"
    return ("+" if delta > 0 else "-" if delta < 0 else "±") + fmt(abs(delta))


def eval_size_text(headline: ReportHeadline) -> str:
    """E.g. "100 held-out items (evaluation.limit 100: a subset, not the whole held-out set)"."""
    items = f"{headline.eval_items} held-out items" if headline.eval_items is not None else "unknown size"
    if headline.eval_limit is not None:
        return f"{items} (evaluation.limit {headline.eval_limit}: a subset, not the whole held-out set)"
    return f"{items} (the whole held-out set)" if headline.eval_items is not None else items


def budget_text(headline: ReportHeadline) -> str:
    """E.g. "105.4 % of 400 s (wall-clock: 421.6 s from the agent's start to the run's end)"."""
    if headline.budget_used_pct is None or headline.budget_s is None:
        return f"- (no wall-clock budget; {fmt(headline.used_s, 's')} used)"
    return (
        f"{num(headline.budget_used_pct)} % of {num(headline.budget_s)} s "
        f"(wall-clock: {num(round(headline.used_s, 1) if headline.used_s is not None else None)} s "
        "from the agent's start to the run's end)"
    )


NOT_SANDBOXED = "NOT sandboxed (--no-sandbox)"
NOT_CHECKED = "not verified here (no run key: cluster mode, or a report rebuilt later)"


def integrity_text(headline: ReportHeadline) -> str:
    """The sandbox and the results' seals; ✓ only when both are known good."""
    if headline.sandboxed is None:
        isolation = "sandbox not recorded"
    else:
        isolation = f"sandboxed ({headline.sandbox})" if headline.sandboxed else NOT_SANDBOXED
    if not headline.results_checked:
        sealed = f"{headline.results_sealed} results sealed, " if headline.results_sealed else ""
        seals = sealed + NOT_CHECKED
    elif headline.results_tampered:
        seals = f"{headline.results_tampered} result(s) FAILED their integrity check (not scored)"
    else:
        seals = f"{headline.results_verified} results sealed and verified"
    good = headline.sandboxed is not False and not headline.results_tampered
    mark = ("✓" if headline.results_checked and headline.sandboxed else "?") if good else "✗"
    return f"{mark} {isolation}; {seals}"


def queue_text(headline: ReportHeadline) -> str | None:
    """E.g. "waited 95 s for Kueue's admission (not charged to the budget); evicted 1 time";
    None for a run that was not queued."""
    if headline.queue_wait_s is None and headline.evictions is None:
        return None
    parts = []
    if headline.queue_wait_s is not None:
        parts.append(
            f"waited {num(headline.queue_wait_s)} s for Kueue's admission (not charged to the budget)"
        )
    if headline.evictions is not None:
        times = "time" if headline.evictions == 1 else "times"
        parts.append(f"evicted {headline.evictions} {times}" if headline.evictions else "never evicted")
    return "; ".join(parts)


def headline_rows(headline: ReportHeadline) -> list[list[str]]:
    """The headline card's rows (after its verdict line)."""
    metric = headline.metric or "score"
    if headline.metric_range:
        metric += f", {num(headline.metric_range[0])} to {num(headline.metric_range[1])}"
    best = f"{fmt(headline.best_score)}" + (
        f" (#{headline.best_submission})" if headline.best_submission is not None else ""
    )
    protocol = [["Evaluation protocol", headline.protocol]] if headline.protocol else []
    words = headline.agent_last_words
    last_words = [["Agent's last words", " ⏎ ".join(words)]] if words else []
    queued = queue_text(headline)
    queue = [["Queue", queued]] if queued else []
    return [
        ["Score", f"baseline {fmt(headline.baseline_score)} → best {best}, Δ {fmt_delta(headline.delta)}"],
        ["Metric", metric],
        ["Evaluated on", eval_size_text(headline)],
        ["Valid submissions", f"{fmt(headline.valid_submissions)} of {fmt(headline.total_submissions)}"],
        ["Budget used", budget_text(headline)],
        ["End reason", fmt(headline.end_reason)],
        *queue,
        *last_words,
        *protocol,
        ["Integrity", integrity_text(headline)],
    ]


def submission_table_rows(report: ReportRecord) -> list[list[str]]:
    return [
        [
            str(row.index),
            fmt(row.elapsed_s, CLOCK),
            fmt(row.score),
            fmt(row.valid) if row.valid else f"no: {row.error}",
            fmt(row.best_so_far),
            short(row.model_digest) + (" (base)" if row.copy_of_base else ""),
            fmt(row.code_revision),
        ]
        for row in report.submissions
    ]


def revision_table_rows(report: ReportRecord) -> list[list[str]]:
    rows = []
    for rev in report.revisions:
        paths = rev.paths[:5]
        more = (rev.added or 0) + (rev.changed or 0) + (rev.removed or 0) - len(paths)
        rows.append(
            [
                str(rev.index),
                fmt(rev.elapsed_s, CLOCK),
                fmt(rev.reason),
                str(rev.files),
                f"+{rev.added} ~{rev.changed} -{rev.removed}",
                str(rev.bytes),
                ", ".join(paths) + (f", … {more} more" if more > 0 else ""),
            ]
        )
    return rows


def metric_table_rows(report: ReportRecord) -> list[list[str]]:
    metrics = report.metrics
    return [[label, fmt(getattr(metrics, key, None), unit)] for key, label, unit in METRIC_ROWS]


def run_start(report: ReportRecord) -> str | None:
    """The page's time zero: run.json `started_at`, else the trace's start."""
    return report.run.started_at or (report.timeline.started_at if report.timeline is not None else None)


def trace_shift(report: ReportRecord) -> float:
    """Seconds from the run's start to the trace's (its steps' offsets are from the latter)."""
    start = parse_time(run_start(report))
    trace = parse_time(report.timeline.started_at) if report.timeline is not None else None
    return 0.0 if start is None or trace is None else (trace - start).total_seconds()


def timeline_failed(report: ReportRecord) -> bool:
    """Some step of the trace ended in ERROR (else the status column is left out: OpenTelemetry
    leaves a span's status UNSET unless something sets it, so "UNSET" says nothing)."""
    steps = report.timeline.steps if report.timeline is not None else []
    return any(str(step.status).upper() == "ERROR" for step in steps)


def timeline_header(report: ReportRecord) -> list[str]:
    failed = timeline_failed(report)
    return [h for h in TIMELINE_HEADER if failed or h != "status"]


def timeline_rows(report: ReportRecord) -> list[list[str]]:
    """Top-level steps of the run's trace (`report.timeline`; absent in older reports), with the
    agent's timed tool calls (`report.trajectory`) among them by start; times since the run's start."""
    steps = report.timeline.steps if report.timeline is not None else []
    shift, failed = trace_shift(report), timeline_failed(report)
    rows = []
    for step in steps:
        at = round(shift + step.start_offset_s, 3) if step.start_offset_s is not None else None
        status = ["ERROR" if str(step.status).upper() == "ERROR" else "OK"] if failed else []
        rows.append(
            (
                at if at is not None else shift,
                [
                    str(step.name) + (f" #{step.submission}" if step.submission is not None else ""),
                    fmt(step.service),
                    fmt(at, CLOCK),
                    fmt(step.duration_s),
                    *status,
                    fmt(step.child_spans),
                ],
            )
        )
    calls = tool_call_timeline_rows(report.trajectory, run_start(report), failed) if rows else []
    if not calls:
        return [row for _start, row in rows]
    return [row for _start, row in sorted(rows + calls, key=lambda r: r[0])]


def tool_call_timeline_rows(
    trajectory: ReportTrajectory | None, started_at: str | None, status: bool = False
) -> list[tuple[float, list[str]]]:
    """(seconds from `started_at`, row) of each timed tool call, the first MAX_TOOL_CALL_ROWS."""
    start = parse_time(started_at)
    if trajectory is None or start is None:
        return []
    rows = []
    for call in trajectory.calls[:MAX_TOOL_CALL_ROWS]:
        at = parse_time(call.at)
        if at is not None:
            offset = round((at - start).total_seconds(), 3)
            rows.append(
                (
                    offset,
                    [
                        f"tool call {call.index}: {call.kind}",
                        f"agent ({call.tool})",
                        fmt(offset, CLOCK),
                        "-",
                        *(["-"] if status else []),
                        "-",
                    ],
                )
            )
    return rows


def timeline_note(report: ReportRecord) -> str:
    tl = report.timeline if report.timeline is not None else ReportTimeline()
    failed = "" if timeline_failed(report) else " No step failed (the status column is left out)."
    return (
        f"Trace {tl.trace_id} ({tl.spans} spans, traces.jsonl): top-level steps, "
        f"started m:ss since the run's start; durations in seconds.{failed}"
    )


def driver_rows(driver: ReportDriver) -> list[list[str]]:
    refused = ", ".join(f"{reason} {n}" for reason, n in driver.refused.items())
    budget = driver.budget
    limits = [
        f"{budget.driver_tokens} tokens ({fmt(budget.tokens_used_ratio)} used)"
        if budget.driver_tokens
        else "",
        f"${budget.driver_cost_usd} ({fmt(budget.cost_used_ratio)} used)" if budget.driver_cost_usd else "",
    ]
    exhausted = (
        f"yes, at {fmt(budget.exhausted_s, CLOCK)} ({budget.reason}); {budget.refused_calls} calls refused"
        if budget.exhausted
        else "no"
    )
    return [
        ["Driver", f"{fmt(driver.provider)} {fmt(driver.model)}"],
        [
            "Calls",
            f"{driver.calls} ({driver.errors} errors, {driver.refused_calls} refused"
            + (f": {refused})" if refused else ")"),
        ],
        [
            "Tokens in / out / cached",
            f"{driver.input_tokens} / {driver.output_tokens} / {driver.cached_tokens}",
        ],
        ["Cache writes, reasoning tokens", f"{driver.cache_write_tokens}, {driver.reasoning_tokens}"],
        [
            "Cost",
            f"${fmt_usd(driver.cost_usd)}"
            + (f" (no price: {', '.join(driver.unpriced_models)})" if driver.unpriced_models else ""),
        ],
        ["Latency p50 / p95", f"{fmt(driver.latency_p50_s, 's')} / {fmt(driver.latency_p95_s, 's')}"],
        [
            "First byte p50 / p95",
            f"{fmt(driver.first_byte_p50_s, 's')} / {fmt(driver.first_byte_p95_s, 's')}",
        ],
        ["First / last call", f"{fmt(driver.first_call_s, CLOCK)} / {fmt(driver.last_call_s, CLOCK)}"],
        ["Budget", " and ".join(x for x in limits if x) or "no limit"],
        ["Budget exhausted", exhausted],
    ]


def fmt_usd(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def driver_model_rows(driver: ReportDriver) -> list[list[str]]:
    return [
        [
            fmt(row.model),
            fmt(row.calls),
            fmt(row.errors),
            fmt(row.input_tokens),
            fmt(row.output_tokens),
            fmt(row.cached_tokens),
            f"${fmt_usd(row.cost_usd)}",
            fmt(row.latency_p50_s),
            fmt(row.latency_p95_s),
        ]
        for row in driver.per_model
    ]


TIMING_NOTES = {
    TIMING_STREAM: "times from the stream",
    TIMING_DRIVER: "the stream has no times: each call is placed at the end of the driver call asking for it",
}


def trajectory_note(trajectory: ReportTrajectory) -> str:
    tools = ", ".join(f"{name} {n}" for name, n in trajectory.tools.items()) or "none"
    timing = TIMING_NOTES.get(str(trajectory.timing), "no times")
    shown = len(trajectory.calls)
    more = f"; the first {MAX_TOOL_CALL_ROWS} are listed" if shown > MAX_TOOL_CALL_ROWS else ""
    return (
        f"{trajectory.stack}: {trajectory.tool_calls} tool calls in {trajectory.events} stream events "
        f"(agent/trajectory.jsonl); tools: {tools}; {timing}{more}.{backgrounded_note(trajectory)}"
    )


def backgrounded_note(trajectory: ReportTrajectory) -> str:
    """What the stack moved to the background, naming the kinds (the agent went on while e.g. its
    training still ran: a submission right after it may precede the model it meant to submit)."""
    if not trajectory.backgrounded:
        return ""
    kinds = Counter(str(c.kind) for c in trajectory.calls if c.backgrounded)
    which = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
    return (
        f" {trajectory.backgrounded} still-running command(s) moved to the background by the stack "
        f"({which}): the agent went on while they ran (marked {BACKGROUNDED_MARK.strip()} below)."
    )


def kind_rows(trajectory: ReportTrajectory) -> list[list[str]]:
    return [[kind, str(n)] for kind, n in trajectory.kinds.items()]


def tool_call_rows(trajectory: ReportTrajectory) -> list[list[str]]:
    return [
        [
            str(c.index),
            fmt(c.elapsed_s, CLOCK),
            fmt(c.kind),
            fmt(c.tool),
            (BACKGROUNDED_MARK if c.backgrounded else "") + fmt(c.detail),
        ]
        for c in trajectory.calls[:MAX_TOOL_CALL_ROWS]
    ]


SUBMISSION_HEADER = ["#", "time", "score", "valid", "best so far", "model", "code rev"]
TIMELINE_HEADER = ["step", "service", "start", "duration s", "status", "spans under it"]
REVISION_HEADER = ["rev", "time", "reason", "files", "vs previous", "bytes", "paths"]
DRIVER_MODEL_HEADER = ["model", "calls", "errors", "in", "out", "cached", "cost", "p50 s", "p95 s"]
TOOL_CALL_HEADER = ["#", "time", "kind", "tool", "detail"]
#: Before the detail of a call whose command the stack moved to the background.
BACKGROUNDED_MARK = "⧗ "


NO_SANDBOX_LINE = (
    "The agent ran without the local sandbox (--no-sandbox): it could read the held-out data, the "
    "store and the user's files. Do not compare this run's scores with sandboxed runs."
)


def integrity_lines(report: ReportRecord) -> list[str]:
    """What may make the scores untrustworthy: an agent run unisolated, and one line per result
    that failed its integrity check (`a2rl.records.result`: not scored)."""
    lines = [NO_SANDBOX_LINE] if report.run.sandbox == "none" else []
    if report.baseline is not None and report.baseline.error == TAMPERED_ERROR:
        lines.append(tampered_line(BASELINE_INDEX))
    for sub in report.submissions:
        if sub.error == TAMPERED_ERROR and sub.index is not None:
            lines.append(tampered_line(sub.index))
    return lines


def render_markdown(report: ReportRecord) -> str:
    run = report.run
    lines = [f"# Run report: {run.name} ({run.prefix})", ""]
    if report.headline is not None:
        lines += ["## Headline", "", f"**{verdict_line(report.headline)}**", ""]
        lines += [*_table(["", ""], headline_rows(report.headline)), "", TIME_BASE_NOTE, ""]
    lines += ["## Summary", "", *_table(["", ""], summary_rows(report)), ""]
    if integrity_lines(report):
        lines += ["## Integrity", "", *(f"- {line}" for line in integrity_lines(report)), ""]
    lines += ["## Submissions", ""]
    if report.submissions:
        lines += _table(SUBMISSION_HEADER, submission_table_rows(report))
    else:
        lines.append("No submissions.")
    lines += ["", "## Code revisions", ""]
    if report.revisions:
        lines += _table(REVISION_HEADER, revision_table_rows(report))
    else:
        lines.append("No code revisions recorded.")
    lines += ["", "## Metrics", "", *_table(["metric", "value"], metric_table_rows(report)), ""]
    lines += driver_markdown(report.driver) + trajectory_markdown(report.trajectory)
    lines += ["## Timeline", ""]
    if timeline_rows(report):
        lines += [timeline_note(report), "", *_table(timeline_header(report), timeline_rows(report)), ""]
    else:
        lines += ["No trace recorded.", ""]
    reasons = report.metrics.invalid_reasons
    if reasons:
        lines += ["## Invalid submissions by error", ""]
        lines += _table(["error", "count"], [[k, str(v)] for k, v in reasons.items()])
        lines.append("")
    lines += ["![score trajectory](trajectory.png)", ""]
    return "\n".join(lines)


#: The transcript page `write_report` writes next to the report for a run with a driver.
TRANSCRIPT_FILE = TRANSCRIPT_HTML
TRANSCRIPT_LINK_TEXT = "Transcript: what the model was sent and said, call by call"


def driver_markdown(driver: ReportDriver | None) -> list[str]:
    if driver is None:
        return []
    lines = ["## Driver", "", *_table(["", ""], driver_rows(driver)), ""]
    lines += [f"[{TRANSCRIPT_LINK_TEXT}]({TRANSCRIPT_FILE})", ""]
    if driver.per_model:
        lines += [*_table(DRIVER_MODEL_HEADER, driver_model_rows(driver)), ""]
    return lines


def trajectory_markdown(trajectory: ReportTrajectory | None) -> list[str]:
    if trajectory is None:
        return []
    lines = ["## Agent trajectory", "", trajectory_note(trajectory), ""]
    lines += [*_table(["kind", "tool calls"], kind_rows(trajectory)), ""]
    if trajectory.calls:
        lines += [*_table(TOOL_CALL_HEADER, tool_call_rows(trajectory)), ""]
    return lines


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:14px}"
    "th{background:#f3f3f3}img{max-width:100%}"
    ".headline{border:2px solid #999;border-radius:8px;padding:0.5em 1em;margin:1em 0}"
    ".headline.good{border-color:#2e7d32}.headline.flat{border-color:#777}.headline.bad{border-color:#c62828}"
    ".verdict{font-size:20px;font-weight:bold;margin:0.3em 0}.note{color:#555;font-size:13px}"
)


def render_html(report: ReportRecord, png_name: str = "trajectory.png") -> str:
    """A self-contained page (inline CSS, no scripts); the plot is linked by `png_name`."""
    run = report.run
    title = html.escape(f"Run report: {run.name} ({run.prefix})")
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>",
        f"<style>{_CSS}</style></head><body><h1>{title}</h1>",
        *headline_html(report.headline),
        "<h2>Summary</h2>",
        _html_table(["", ""], summary_rows(report)),
        "".join(f"<p class='integrity'>{html.escape(line)}</p>" for line in integrity_lines(report)),
        f"<img src='{html.escape(png_name, quote=True)}' alt='score trajectory'>",
        "<h2>Submissions</h2>",
        _html_table(SUBMISSION_HEADER, submission_table_rows(report))
        if report.submissions
        else "<p>No submissions.</p>",
        "<h2>Code revisions</h2>",
        _html_table(REVISION_HEADER, revision_table_rows(report))
        if report.revisions
        else "<p>No code revisions recorded.</p>",
        "<h2>Metrics</h2>",
        _html_table(["metric", "value"], metric_table_rows(report)),
        *driver_html(report.driver),
        *trajectory_html(report.trajectory),
        "<h2>Timeline</h2>",
        f"<p>{html.escape(timeline_note(report))}</p>"
        + _html_table(timeline_header(report), timeline_rows(report))
        if timeline_rows(report)
        else "<p>No trace recorded.</p>",
        "</body></html>\n",
    ]
    return "\n".join(parts)


def headline_html(headline: ReportHeadline | None) -> list[str]:
    """The headline card: the verdict, then its rows (a report without one shows none)."""
    if headline is None:
        return []
    css = VERDICT_CLASSES.get(str(headline.verdict), "bad")
    return [
        f"<div class='headline {css}'><p class='verdict'>{html.escape(verdict_line(headline))}</p>",
        _html_table(["", ""], headline_rows(headline)),
        f"<p class='note'>{html.escape(TIME_BASE_NOTE)}</p></div>",
    ]


VERDICT_CLASSES = {IMPROVED: "good", NO_CHANGE: "flat", WORSE: "bad"}


def driver_html(driver: ReportDriver | None) -> list[str]:
    if driver is None:
        return []
    parts = ["<h2>Driver</h2>", _html_table(["", ""], driver_rows(driver))]
    parts.append(f"<p><a href='{TRANSCRIPT_FILE}'>{html.escape(TRANSCRIPT_LINK_TEXT)}</a></p>")
    if driver.per_model:
        parts.append(_html_table(DRIVER_MODEL_HEADER, driver_model_rows(driver)))
    return parts


def trajectory_html(trajectory: ReportTrajectory | None) -> list[str]:
    if trajectory is None:
        return []
    parts = [
        "<h2>Agent trajectory</h2>",
        f"<p>{html.escape(trajectory_note(trajectory))}</p>",
        _html_table(["kind", "tool calls"], kind_rows(trajectory)),
    ]
    if trajectory.calls:
        parts.append(_html_table(TOOL_CALL_HEADER, tool_call_rows(trajectory)))
    return parts


#: Tick spacings (seconds) the plot's time axis chooses from: at most MAX_TICKS ticks.
TICK_STEPS = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_TICKS = 12


def plot_x_range(history: RunHistory) -> tuple[float, float]:
    """The time axis, seconds since the run's start: from 0 (or the earliest submission) to the
    wall-clock budget (or the run's end / the last submission when it went past it)."""
    t0 = origin(history)
    wall = history.run.record.budget.wall_time_seconds if history.run.record.budget is not None else None
    times = [t for t in (seconds_since(t0, s.submitted_at) for s in history.submissions) if t is not None]
    end = seconds_since(t0, history.run.ended_at)
    left = min([0.0, *times])
    right = max([float(wall) if wall else 0.0, *times, *([end] if end is not None else [])])
    return left, right if right > left else left + 60.0


def plot_y_range(history: RunHistory, scores: list[float]) -> tuple[float, float] | None:
    """The score axis: the task's metric range (`Task.metric_range`, e.g. 0 to 100 for a
    percentage), widened only if a score lies outside it; None (autoscale) for an unknown task."""
    _metric, span = task_metric(history.run.task)
    if span is None:
        return None
    low, high = min([span[0], *scores]), max([span[1], *scores])
    margin = (high - low) * 0.03
    return low - margin, high + margin


def trajectory_figure(history: RunHistory) -> Any:
    """The score trajectory as a matplotlib `Figure` (`render_trajectory_png` saves it): score vs
    time since the run's start (m:ss, the page's time base); valid scores, best-so-far steps,
    baseline, invalid marks, training launches. Axes: `plot_x_range`, `plot_y_range`."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    t0 = origin(history)
    base = baseline_score(history)
    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.add_subplot()
    points = [(seconds_since(t0, s.submitted_at), s) for s in history.submissions]
    timed = [(sec if sec is not None else 0.0, s) for sec, s in points]
    valid = [(m, s.score) for m, s in timed if s.score is not None]
    invalid = [m for m, s in timed if s.score is None]
    left, right = plot_x_range(history)
    if valid:
        xs, ys = zip(*valid, strict=True)
        ax.plot(xs, ys, "o-", color="tab:blue", alpha=0.6, label="valid submission")
        steps_x, steps_y, best = [], [], float("-inf")
        for x, y in valid:
            best = max(best, y)
            steps_x.append(x)
            steps_y.append(best)
        # Hold the best-so-far line to the end of the run (or the last submission).
        end = seconds_since(t0, history.run.ended_at)
        held = max([m for m, _s in timed] + ([end] if end is not None else []))
        ax.step([*steps_x, held], [*steps_y, best], where="post", color="tab:green", label="best so far")
        top = best_submission(history.submissions)
        if top is not None and top.score is not None:
            ax.annotate(
                f"best {top.score:.4g} (#{top.index})",
                (steps_x[steps_y.index(best)], best),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=8,
            )
    if invalid:
        ax.plot(
            invalid,
            [base or 0.0] * len(invalid),
            "x",
            color="tab:red",
            markersize=9,
            label="invalid submission",
        )
    launches = [seconds_since(t0, c.at) for c in agent_tool_calls(history)[0] if c.kind == TRAINING]
    launch_times = [s for s in launches if s is not None]
    if launch_times:  # at the bottom of the axes, whatever the scores' range
        ax.plot(
            launch_times,
            [0.02] * len(launch_times),
            "^",
            color="tab:orange",
            transform=ax.get_xaxis_transform(),
            label="training launch",
        )
    if base is not None:
        ax.axhline(base, color="gray", linestyle="--", label=f"baseline {base:.4g}")
    if not history.submissions:
        ax.text(0.5, 0.5, "no submissions", transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_xlim(left, right)
    step = next((t for t in TICK_STEPS if (right - left) / t <= MAX_TICKS), TICK_STEPS[-1])
    ax.xaxis.set_major_locator(MultipleLocator(step))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: clock(x)))
    scores = [y for _m, y in valid] + ([base] if base is not None else [])
    y_range = plot_y_range(history, [float(y) for y in scores if y is not None])
    if y_range is not None:
        ax.set_ylim(*y_range)
    metric, _span = task_metric(history.run.task)
    ax.set_xlabel("time since the run's start (m:ss); right edge: the wall-clock budget")
    ax.set_ylabel(metric or "score")
    ax.set_title(f"{history.run.layout.name}: score trajectory ({history.run.task or 'unknown task'})")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def render_trajectory_png(history: RunHistory, path: Path) -> None:
    """`trajectory_figure(history)` as a PNG at `path`."""
    trajectory_figure(history).savefig(path, format="png", metadata={"Software": None})
