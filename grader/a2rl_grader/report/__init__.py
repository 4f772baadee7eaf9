"""The post-hoc run report: history from the store → metrics and headline → report.{json,md,html} +
trajectory.png, and the terminal view (`render_text`)."""

from a2rl_grader.report.headline import compute_headline
from a2rl_grader.report.history import EvalResult, Revision, RunHistory, Submission, load_history
from a2rl_grader.report.metrics import REPORT_SCHEMA_VERSION, build_report, compute_metrics, report_json_bytes
from a2rl_grader.report.render import render_html, render_markdown, render_trajectory_png
from a2rl_grader.report.text import render_text
from a2rl_grader.report.write import read_report, report_summary, write_report

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "EvalResult",
    "Revision",
    "RunHistory",
    "Submission",
    "build_report",
    "compute_headline",
    "compute_metrics",
    "load_history",
    "read_report",
    "render_html",
    "render_markdown",
    "render_text",
    "render_trajectory_png",
    "report_json_bytes",
    "report_summary",
    "write_report",
]
