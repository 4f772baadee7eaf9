"""`a2rl report [RUN]`: print a run's report (Markdown, or JSON with --json), building it if needed."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from a2rl.errors import A2rlError

if TYPE_CHECKING:
    from a2rl.records.report import ReportRecord
    from a2rl.store.base import ObjectStore
    from a2rl.store.layout import RunLayout


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "report",
        help="show a run's report (scores, submissions, code revisions, process metrics)",
        description=(
            "Print the report of a run. RUN is a store prefix (local/name-uid), name-uid, a uid, or a "
            "run name (the newest run with that name); without RUN, the newest run. A finished run's "
            "stored report is reused; otherwise (or with --regenerate) it is built and stored."
        ),
    )
    parser.add_argument("run", nargs="?", metavar="RUN", help="the run (default: the newest run)")
    parser.add_argument("--latest", action="store_true", help="the run with the newest start time")
    parser.add_argument("--json", action="store_true", help="print report.json instead of Markdown")
    parser.add_argument("--store", metavar="URI", default=None, help="object store (default: ~/.a2rl/store)")
    parser.add_argument("--regenerate", action="store_true", help="rebuild the report even if one is stored")
    parser.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from a2rl.runs import find_run, latest_run, read_run_info
    from a2rl.store.open import open_store

    if args.run and args.latest:
        raise A2rlError("give either RUN or --latest, not both")
    store = open_store(args.store)
    layout = find_run(store, args.run) if args.run else latest_run(store)
    info = read_run_info(store, layout)
    ended_at = info.ended_at.isoformat() if info.ended_at else None
    report = _current_report(store, layout, ended_at, args.regenerate)
    if args.json:
        from a2rl_grader.report.metrics import report_json_bytes

        sys.stdout.write(report_json_bytes(report).decode())  # report.json as stored
    else:
        from a2rl_grader.report.render import render_markdown

        sys.stdout.write(render_markdown(report))
    return 0


def _current_report(
    store: ObjectStore, layout: RunLayout, ended_at: str | None, regenerate: bool
) -> ReportRecord:
    """The stored report when it describes the finished run as it is now; else a freshly written one."""
    from a2rl_grader.report.write import read_report, write_report

    if not regenerate and ended_at is not None:
        stored = read_report(store, layout)
        # A report written while the run was still going (ended_at differs) is stale.
        if stored is not None and stored.run.ended_at == ended_at:
            return stored
    return write_report(store, layout)
