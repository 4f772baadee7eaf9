"""`write_campaign_report`: build a campaign's report from the store and write its files under
`campaigns/<namespace>/<campaign>/report/` (report.json, report.md, report.html, improvement.png)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from a2rl.api.benchcampaign import BenchCampaign
from a2rl.campaign.matrix import expand
from a2rl.campaign.store_outcomes import collect_outcomes
from a2rl.errors import NotFoundError
from a2rl.records.base import RecordError, load_record
from a2rl.records.campaign_report import CAMPAIGN_REPORT_SCHEMA_VERSION, CampaignReportRecord
from a2rl.store.base import ObjectStore
from a2rl.store.layout import CampaignLayout
from a2rl_grader.campaign_report.build import build_campaign_report
from a2rl_grader.campaign_report.render import (
    IMPROVEMENT_PNG,
    render_html,
    render_improvement_png,
    render_markdown,
)

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"


def report_key(layout: CampaignLayout, name: str) -> str:
    return f"{layout.report_dir}/{name}"


def report_json_bytes(report: CampaignReportRecord) -> bytes:
    """report.json as stored: sorted keys, two-space indent, a final newline."""
    return (
        json.dumps(report.to_json(), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    ).encode()


def write_campaign_report(
    store: ObjectStore, campaign: BenchCampaign, namespace: str
) -> CampaignReportRecord:
    """Expand `campaign`, find its runs in `namespace` of `store`, and write the report's four
    files (the plot and pages first, report.json last: a reader that finds report.json finds the
    rest of the same generation). `CampaignError` when the campaign cannot be expanded."""
    layout = CampaignLayout(namespace, campaign.metadata.name)
    planned = expand(campaign.metadata.name, campaign.spec)
    stored = collect_outcomes(store, namespace, campaign.metadata.name, planned)
    report = build_campaign_report(
        campaign, namespace, planned, stored, store.url_for(report_key(layout, REPORT_HTML))
    )
    with tempfile.TemporaryDirectory(prefix="a2rl-campaign-report-") as tmp:
        png = Path(tmp) / IMPROVEMENT_PNG
        render_improvement_png(report, png)
        store.put_file(report_key(layout, IMPROVEMENT_PNG), png)
    store.put_bytes(report_key(layout, REPORT_MD), render_markdown(report).encode())
    store.put_bytes(report_key(layout, REPORT_HTML), render_html(report).encode())
    store.put_bytes(report_key(layout, REPORT_JSON), report_json_bytes(report))
    return report


def read_campaign_report(store: ObjectStore, layout: CampaignLayout) -> CampaignReportRecord | None:
    """The stored report.json (None: absent, unreadable or of another schema version)."""
    try:
        report = load_record(store, report_key(layout, REPORT_JSON), CampaignReportRecord)
    except (NotFoundError, RecordError):
        return None
    return report if report.schema_version == CAMPAIGN_REPORT_SCHEMA_VERSION else None
