"""`a2rl report [RUN]`: show a run's report, building it if needed: for the terminal (default),
as Markdown (--md), report.json (--json), or the HTML page (--html prints its path, --open opens it)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.errors import NotFoundError
from a2rl_cli.run_arg import add_run_args, chosen_run

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
    add_run_args(parser)
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--md", action="store_true", help="print report.md instead of the terminal view")
    form.add_argument("--json", action="store_true", help="print report.json instead of the terminal view")
    form.add_argument("--html", action="store_true", help="print the path of the HTML page (report.html)")
    form.add_argument(
        "--open", action="store_true", help="open the HTML page (platform opener), else print its path"
    )
    parser.add_argument("--regenerate", action="store_true", help="rebuild the report even if one is stored")
    parser.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from a2rl.runs import read_run_info

    store, layout = chosen_run(args, "a2rl report")
    info = read_run_info(store, layout)
    ended_at = info.ended_at.isoformat() if info.ended_at else None
    report = _current_report(store, layout, ended_at, args.regenerate)
    if args.json:
        from a2rl_grader.report.metrics import report_json_bytes

        sys.stdout.write(report_json_bytes(report).decode())  # report.json as stored
    elif args.md:
        from a2rl_grader.report.render import render_markdown

        sys.stdout.write(render_markdown(report))
    elif args.html or args.open:
        page = html_path(store, layout)
        if args.open and open_page(page):
            print(f"opened {page}")
        else:
            print(page if args.html else f"no opener found (xdg-open, open); the page: {page}")
    else:
        from a2rl_grader.report.text import render_text

        sys.stdout.write(render_text(report))
    return 0


def html_path(store: ObjectStore, layout: RunLayout) -> Path:
    """The stored report.html as a local file: in place for a local store, else with its plot and
    transcript copied into a new temporary folder."""
    from a2rl_grader.report.transcript import TRANSCRIPT_HTML
    from a2rl_grader.report.write import REPORT_HTML, TRAJECTORY_PNG, report_key

    from a2rl.store.local import LocalStore

    if isinstance(store, LocalStore):
        return store.root.joinpath(*report_key(layout, REPORT_HTML).split("/"))
    folder = Path(tempfile.mkdtemp(prefix=f"a2rl-report-{layout.name}-"))
    for name in (REPORT_HTML, TRAJECTORY_PNG):
        store.get_file(report_key(layout, name), folder / name)
    with contextlib.suppress(NotFoundError):  # only a run with a driver has one
        store.get_file(report_key(layout, TRANSCRIPT_HTML), folder / TRANSCRIPT_HTML)
    return folder / REPORT_HTML


def opener() -> list[str] | None:
    """The platform's command that opens a file in its default application, None without one."""
    if sys.platform == "darwin":
        return ["open"]
    if sys.platform == "win32":
        return ["cmd", "/c", "start", ""]
    found = shutil.which("xdg-open")
    return [found] if found else None


def open_page(page: Path) -> bool:
    """Open `page` with the platform's opener, detached; False when there is none or it fails."""
    command = opener()
    if command is None:
        return False
    try:
        subprocess.Popen(
            [*command, str(page)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=os.name == "posix",
        )
    except OSError:
        return False
    return True


def _current_report(
    store: ObjectStore, layout: RunLayout, ended_at: str | None, regenerate: bool
) -> ReportRecord:
    """The stored report when it describes the finished run as it is now; else a freshly written one."""
    from a2rl_grader.report.write import read_report, write_report

    if not regenerate and ended_at is not None:
        stored = read_report(store, layout)
        # A report written while the run was still going (ended_at differs) is stale, and so is
        # one written before the headline existed.
        if stored is not None and stored.run.ended_at == ended_at and stored.headline is not None:
            return stored
    return write_report(store, layout)
