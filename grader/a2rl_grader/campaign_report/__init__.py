"""The campaign report (docs/report.md, "Campaign report"): a campaign's runs from the store →
roll-up → report.{json,md,html} + improvement.png; and the store's HTML index of every run and
campaign (`write_store_index`)."""

from a2rl_grader.campaign_report.build import build_campaign_report
from a2rl_grader.campaign_report.index import INDEX_HTML, render_store_index, write_store_index
from a2rl_grader.campaign_report.render import render_html, render_markdown, render_text
from a2rl_grader.campaign_report.write import read_campaign_report, report_json_bytes, write_campaign_report

__all__ = [
    "INDEX_HTML",
    "build_campaign_report",
    "read_campaign_report",
    "render_html",
    "render_markdown",
    "render_store_index",
    "render_text",
    "report_json_bytes",
    "write_campaign_report",
    "write_store_index",
]
