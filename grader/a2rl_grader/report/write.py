"""`write_report`: build the report of one run and store its files under `report/` (report.json,
report.md, report.html, trajectory.png, and transcript.html for a run with a driver)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from a2rl.constants import COMPONENT_REPORT
from a2rl.errors import NotFoundError
from a2rl.records.base import RecordError, load_record
from a2rl.records.report import ReportRecord
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.tracing import Tracing, merge_traces
from a2rl.tracing import flush as flush_traces
from a2rl_grader.report.history import load_history
from a2rl_grader.report.metrics import REPORT_SCHEMA_VERSION, build_report, report_json_bytes
from a2rl_grader.report.render import render_html, render_markdown, render_trajectory_png
from a2rl_grader.report.times import origin
from a2rl_grader.report.transcript import TRANSCRIPT_HTML, load_transcript, render_transcript_html

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
TRAJECTORY_PNG = "trajectory.png"


def report_key(layout: RunLayout, name: str) -> str:
    return f"{layout.report_dir}/{name}"


def write_report(store: ObjectStore, layout: RunLayout, *, run_key: bytes | None = None) -> ReportRecord:
    """Load the run's history, build the report, write report.{json,md,html}, trajectory.png and,
    for a run with a driver, transcript.html (`a2rl_grader.report.transcript`).

    With the run's integrity key (`run_key`, local mode's runner) every result is checked against
    its seal; a tampered one is reported as such and not scored. Without it (cluster mode; a
    report rebuilt later by `a2rl report`) results are taken as stored.

    The PNG and pages are written before report.json, so a reader that finds report.json finds
    the rest of the same generation. The run's spans are merged into `traces.jsonl` first (the
    timeline) and again at the end, so that file also holds the report's own span.
    """
    flush_traces()  # spans this process already finished (the local runner's) belong in the timeline
    tracing = Tracing(COMPONENT_REPORT, store=store, run_prefix=layout.prefix)
    try:
        with tracing.span("report"):
            spans = merge_traces(store, layout)
            history = load_history(store, layout, run_key=run_key)
            report = build_report(history, spans)
            with tempfile.TemporaryDirectory(prefix="a2rl-report-") as tmp:
                png = Path(tmp) / TRAJECTORY_PNG
                render_trajectory_png(history, png)
                store.put_file(report_key(layout, TRAJECTORY_PNG), png)
            if report.driver is not None:
                steps = load_transcript(store, layout)
                page = render_transcript_html(
                    steps, f"{report.run.name} ({report.run.prefix})", origin(history)
                )
                store.put_bytes(report_key(layout, TRANSCRIPT_HTML), page.encode())
            store.put_bytes(report_key(layout, REPORT_MD), render_markdown(report).encode())
            store.put_bytes(report_key(layout, REPORT_HTML), render_html(report, TRAJECTORY_PNG).encode())
            store.put_bytes(report_key(layout, REPORT_JSON), report_json_bytes(report))
    finally:
        tracing.shutdown()
    if tracing.written_keys:
        merge_traces(store, layout)
    return report


def read_report(store: ObjectStore, layout: RunLayout) -> ReportRecord | None:
    """The stored report.json, or None when absent, unreadable or of another schema version."""
    return read_report_at(store, report_key(layout, REPORT_JSON))


def read_report_at(store: ObjectStore, key: str) -> ReportRecord | None:
    """The report.json at `key` (None: absent, unreadable, not a report, or another schema version)."""
    try:
        report = load_record(store, key, ReportRecord)
    except (NotFoundError, RecordError):
        return None
    return report if report.schema_version == REPORT_SCHEMA_VERSION else None


def report_summary(report: ReportRecord, uri: str) -> dict[str, Any]:
    """The fields of `BenchRun.status.report` (`a2rl.api.benchrun.ReportRef`), snake_case."""
    return {
        "uri": uri,
        "schema_version": report.schema_version,
        "baseline_score": report.baseline_score,
        "best_score": report.best_score,
        "improvement": report.improvement,
        "valid_submissions": report.valid_submissions,
        "route": report.route,
    }
