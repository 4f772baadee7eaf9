"""`a2rl campaign run|report|index`: run a BenchCampaign locally, render a campaign's report (also
the operator's report Job), write the store's HTML index (docs/campaigns.md)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.constants import LOCAL_NAMESPACE
from a2rl.errors import A2rlError

if TYPE_CHECKING:
    from a2rl.store.base import ObjectStore
    from a2rl.store.layout import CampaignLayout


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "campaign",
        help="run a BenchCampaign locally (a matrix of runs) and report it as a table",
        description=(
            "Campaigns: a BenchRun template over a matrix of tasks, agents, stacks, driver models, "
            "modes, base models, protocols and seeds. See docs/campaigns.md."
        ),
    )
    commands = parser.add_subparsers(dest="campaign_command", metavar="SUBCOMMAND")
    commands.required = True

    run = commands.add_parser(
        "run",
        help="run every run of a campaign on this machine (resumes: finished runs are skipped)",
        description=(
            "Run every planned run of the BenchCampaign in FILE as a local `a2rl run` (a child process "
            "each, its output in a log file), then write the campaign's report. Runs that already "
            "finished in the store are skipped, so running it again resumes an interrupted campaign."
        ),
    )
    run.add_argument("file", metavar="FILE", help="BenchCampaign YAML file")
    run.add_argument(
        "--store",
        metavar="URI",
        default=None,
        help="store of the runs and the report (default: spec.template.store.uri, else ~/.a2rl/store)",
    )
    run.add_argument(
        "--parallel",
        metavar="N",
        type=_positive,
        default=1,
        help="runs at once (default 1: one after the other); spec.maxConcurrentRuns is the cluster's",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (runs by cell, which are skipped, the wall time) and exit; nothing starts",
    )
    run.set_defaults(func=_run)

    report = commands.add_parser(
        "report",
        help="build a campaign's report (the table of cells x tasks) from its runs in the store",
        description=(
            "Read campaigns/<namespace>/NAME/campaign.json, find each planned run's newest finished "
            "record, and write report.json, report.md, report.html and improvement.png next to it."
        ),
    )
    report.add_argument("name", metavar="NAME", help="the campaign's metadata.name")
    report.add_argument("--store", metavar="URI", default=None, help="object store (default: ~/.a2rl/store)")
    report.add_argument(
        "--namespace",
        metavar="NS",
        default=LOCAL_NAMESPACE,
        help=f"the campaign's namespace (default {LOCAL_NAMESPACE}: a local campaign)",
    )
    form = report.add_mutually_exclusive_group()
    form.add_argument(
        "--json", action="store_true", help="print the report's summary (the status figures) as JSON"
    )
    form.add_argument("--md", action="store_true", help="print report.md")
    form.add_argument("--html", action="store_true", help="print the path of report.html")
    form.add_argument(
        "--open", action="store_true", help="open report.html (platform opener), else print its path"
    )
    report.set_defaults(func=_report)

    index = commands.add_parser(
        "index",
        help="write index.html at the store's root: every run and campaign, with links to their reports",
    )
    index.add_argument("--store", metavar="URI", default=None, help="object store (default: ~/.a2rl/store)")
    index.set_defaults(func=_index)


def _run(args: argparse.Namespace) -> int:
    from a2rl_grader.campaign_report import render_text
    from a2rl_runner.campaign import plan_campaign, plan_lines, run_campaign

    from a2rl.runs import remember_store

    if args.dry_run:
        plan = plan_campaign(args.file, store_uri=args.store, writable=False)
        for line in plan_lines(plan, args.parallel):
            print(line)
        return 0
    plan = plan_campaign(args.file, store_uri=args.store)
    result = run_campaign(plan, parallel=args.parallel)
    remember_store(plan.store.uri)
    if result.report is not None:
        sys.stdout.write("\n" + render_text(result.report))
        print(f"\nreport      {result.report_location}")
        print(f"index       {result.index_location}")
    if result.usage_error is not None:
        print(f"a2rl: error: {result.usage_error}", file=sys.stderr)
    elif result.interrupted:
        print(
            "a2rl: interrupted; `a2rl campaign run` with the same file resumes the campaign",
            file=sys.stderr,
        )
    return result.exit_status


def _report(args: argparse.Namespace) -> int:
    from a2rl_grader.campaign_report import render_markdown, render_text, write_campaign_report
    from a2rl_runner.campaign import location

    from a2rl.campaign.matrix import CampaignError
    from a2rl.campaign.store_outcomes import read_campaign
    from a2rl.store.layout import CampaignLayout
    from a2rl.store.open import open_store
    from a2rl_cli.report_cmd import open_page

    store = open_store(args.store)
    layout = CampaignLayout(args.namespace, args.name)
    campaign = read_campaign(store, layout)
    try:
        report = write_campaign_report(store, campaign, args.namespace)
    except CampaignError as exc:
        raise A2rlError(f"{store.url_for(layout.campaign_json)}: {exc}") from None
    if args.json:
        print(json.dumps(report.summary, indent=2, sort_keys=True))
    elif args.md:
        sys.stdout.write(render_markdown(report))
    elif args.html or args.open:
        page = _local_page(store, layout)
        if args.open and open_page(Path(page)):
            print(f"opened {page}")
        else:
            print(page if args.html else f"no opener found (xdg-open, open); the page: {page}")
    else:
        sys.stdout.write(render_text(report))
        print(f"\nreport      {location(store, f'{layout.report_dir}/report.html')}")
    return 0


def _local_page(store: ObjectStore, layout: CampaignLayout) -> str:
    """report.html as a local file: in place for a directory store, else copied with its plot into
    a new temporary folder (the runs' reports stay in the store: their links then do not work)."""
    from a2rl_grader.campaign_report.render import IMPROVEMENT_PNG
    from a2rl_grader.campaign_report.write import REPORT_HTML, report_key

    from a2rl.store.local import LocalStore

    if isinstance(store, LocalStore):
        return str(store.root.joinpath(*report_key(layout, REPORT_HTML).split("/")))
    folder = Path(tempfile.mkdtemp(prefix=f"a2rl-campaign-{layout.name}-"))
    for name in (REPORT_HTML, IMPROVEMENT_PNG):
        store.get_file(report_key(layout, name), folder / name)
    return str(folder / REPORT_HTML)


def _index(args: argparse.Namespace) -> int:
    from a2rl_grader.campaign_report import write_store_index
    from a2rl_runner.campaign import location

    from a2rl.store.open import open_store

    store = open_store(args.store)
    write_store_index(store)
    print(location(store, "index.html"))
    return 0
