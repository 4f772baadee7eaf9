"""`write_store_index`: one HTML page at the store's root (`index.html`) listing every run, newest
first — task, agent, state, baseline → best, improvement, driver cost, a link to its report — and
every campaign with a link to its report. Links are relative to the store's root, so the page
works opened from a directory store (or served from a bucket)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime

from a2rl.campaign.store_outcomes import list_campaigns
from a2rl.runs_admin.listing import RunFilter, list_summaries
from a2rl.runs_admin.summary import RunSummary
from a2rl.runs_admin.table import format_cost, format_delta, format_local_time, format_score
from a2rl.store.base import ObjectStore
from a2rl.store.layout import CampaignLayout
from a2rl_grader.campaign_report.render import headline
from a2rl_grader.campaign_report.write import REPORT_HTML, read_campaign_report, report_key

INDEX_HTML = "index.html"
RUN_HEADER = [
    "run",
    "task",
    "agent",
    "state",
    "campaign",
    "started",
    "baseline → best",
    "improvement",
    "cost",
]
CAMPAIGN_HEADER = ["campaign", "namespace", "runs", "best cell", "report"]
_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:14px}"
    "th{background:#f3f3f3}.note{color:#555;font-size:13px}"
    "td.good{color:#2e7d32}td.bad{color:#c62828}"
)


def _link(href: str | None, text: str) -> str:
    if not href:
        return html.escape(text)
    return f"<a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>"


def _td(content: str, css: str = "") -> str:
    return f"<td class='{css}'>{content}</td>" if css else f"<td>{content}</td>"


def _table(header: Sequence[str], rows: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _run_row(store: ObjectStore, run: RunSummary) -> str:
    report = f"{run.info.layout.report_dir}/{REPORT_HTML}"
    href = report if store.exists(report) else None
    gain = run.improvement
    css = "good" if gain is not None and gain > 0 else ("bad" if gain is not None and gain < 0 else "")
    campaign = run.campaign
    campaign_href = (
        report_key(CampaignLayout(run.info.layout.namespace, campaign), REPORT_HTML) if campaign else None
    )
    cells = [
        _td(_link(href, run.info.prefix)),
        _td(html.escape(run.info.task or "-")),
        _td(html.escape(run.agent)),
        _td(html.escape(run.state)),
        _td(_link(campaign_href if campaign_href and store.exists(campaign_href) else None, campaign or "-")),
        _td(html.escape(format_local_time(run.info.started_at))),
        _td(html.escape(f"{format_score(run.baseline_score)} → {format_score(run.best_score)}")),
        _td(html.escape(format_delta(gain)), css),
        _td(html.escape(format_cost(run.driver_cost_usd))),
    ]
    return "<tr>" + "".join(cells) + "</tr>"


def _campaign_row(store: ObjectStore, layout: CampaignLayout) -> str:
    report = read_campaign_report(store, layout)
    href = report_key(layout, REPORT_HTML)
    if report is None:
        runs, best, link = "-", "-", html.escape(f"none yet (a2rl campaign report {layout.name})")
    else:
        runs = headline(report).split(";", 1)[0]
        best = str(report.summary.get("bestCell") or "-")
        link = _link(href if store.exists(href) else None, "report")
    cells = [
        _td(_link(href if report is not None else None, layout.name)),
        _td(html.escape(layout.namespace)),
        _td(html.escape(runs)),
        _td(html.escape(best)),
        _td(link),
    ]
    return "<tr>" + "".join(cells) + "</tr>"


def render_store_index(store: ObjectStore, now: datetime | None = None) -> str:
    """The index page of `store` (`now`: the moment states are judged at, default the clock's)."""
    now = now or datetime.now(UTC)
    runs = list_summaries(store, RunFilter(), now)
    campaigns = list_campaigns(store)
    title = html.escape(f"a2rl store {store.uri}")
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>",
        f"<style>{_CSS}</style></head><body><h1>{title}</h1>",
        f"<p class='note'>{len(runs)} runs, {len(campaigns)} campaigns; written "
        f"{html.escape(format_local_time(now))}. Scores: baseline → best valid score; state as "
        "<code>a2rl runs list</code> shows it.</p>",
        "<h2>Campaigns</h2>",
        _table(CAMPAIGN_HEADER, [_campaign_row(store, c) for c in campaigns])
        if campaigns
        else "<p>No campaigns.</p>",
        "<h2>Runs</h2>",
        _table(RUN_HEADER, [_run_row(store, r) for r in runs]) if runs else "<p>No runs.</p>",
        "</body></html>\n",
    ]
    return "\n".join(parts)


def write_store_index(store: ObjectStore, now: datetime | None = None) -> str:
    """Write `index.html` at the store's root; returns its URL (`store.url_for`)."""
    store.put_bytes(INDEX_HTML, render_store_index(store, now).encode())
    return store.url_for(INDEX_HTML)
