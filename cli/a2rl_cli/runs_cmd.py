"""`a2rl runs list|compare|rm|prune|export|import`: the runs of a store — a table of them, side by
side, deleted (records, workspace and logs), or moved between stores as a tar
(`a2rl.runs_admin`; docs/cli.md, "a2rl runs")."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.errors import A2rlError

if TYPE_CHECKING:
    from a2rl.runs import RunInfo
    from a2rl.runs_admin.delete import DeletionPlan
    from a2rl.store.base import ObjectStore

STORE_HELP = "object store (default: ~/.a2rl/store)"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "runs",
        help="list, compare, delete, prune, export and import the runs of a store",
        description="Manage the runs of an object store (docs/cli.md, 'a2rl runs').",
    )
    rsub = parser.add_subparsers(dest="runs_command", metavar="SUBCOMMAND")
    rsub.required = True

    lst = rsub.add_parser("list", help="every run of the store, newest first, one row each")
    lst.add_argument("--store", metavar="URI", default=None, help=STORE_HELP)
    lst.add_argument("--task", metavar="T", default=None, help="only runs of task T")
    lst.add_argument(
        "--stack", metavar="S", default=None, help="only runs of agent stack S (or command agent S, as shown)"
    )
    lst.add_argument("--campaign", metavar="C", default=None, help="only runs of campaign C (their label)")
    lst.add_argument("--json", action="store_true", help="print a JSON array (one object per run)")
    lst.set_defaults(func=_list)

    cmp = rsub.add_parser("compare", help="runs side by side: setup, scores, cost, each submission's score")
    cmp.add_argument("runs", nargs="+", metavar="RUN", help="prefix, name-uid, uid or name (as a2rl report)")
    cmp.add_argument("--store", metavar="URI", default=None, help=STORE_HELP)
    cmp.add_argument("--json", action="store_true", help="print a JSON array (one object per run)")
    cmp.set_defaults(func=_compare)

    rm = rsub.add_parser("rm", help="delete runs: their store records, workspace and logs")
    rm.add_argument("runs", nargs="+", metavar="RUN", help="prefix, name-uid, uid or name (as a2rl report)")
    rm.add_argument("--store", metavar="URI", default=None, help=STORE_HELP)
    rm.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--force", action="store_true", help="delete even a run that may still be going")
    rm.set_defaults(func=_rm)

    prune = rsub.add_parser("prune", help="delete the runs that started longer ago than a duration")
    prune.add_argument("--older-than", metavar="DURATION", required=True, help="e.g. 7d, 12h, 30m, 2w")
    prune.add_argument("--store", metavar="URI", default=None, help=STORE_HELP)
    prune.add_argument("--dry-run", action="store_true", help="print what would be deleted; delete nothing")
    prune.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    prune.set_defaults(func=_prune)

    export = rsub.add_parser("export", help="write every object of a run to a tar file")
    export.add_argument("run", metavar="RUN", help="prefix, name-uid, uid or name (as a2rl report)")
    export.add_argument("-o", "--output", metavar="FILE", type=Path, required=True, help="the tar to write")
    export.add_argument("--store", metavar="URI", default=None, help=STORE_HELP)
    export.set_defaults(func=_export)

    imp = rsub.add_parser("import", help="verify a run's tar (a2rl runs export) and write it into a store")
    imp.add_argument("archive", metavar="FILE", type=Path, help="the tar that a2rl runs export wrote")
    imp.add_argument("--store", metavar="URI", default=None, help=STORE_HELP)
    imp.set_defaults(func=_import)


def _now() -> datetime:
    return datetime.now(UTC)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _list(args: argparse.Namespace) -> int:
    from a2rl.runs import list_runs, no_runs_message
    from a2rl.runs_admin.listing import LIST_HEADERS, RunFilter, list_rows, list_summaries
    from a2rl.runs_admin.table import render_table
    from a2rl.store.open import open_store

    store = open_store(args.store)
    now = _now()
    summaries = list_summaries(store, RunFilter(args.task, args.stack, args.campaign), now)
    if args.json:
        print(json.dumps([s.to_json(now) for s in summaries], indent=2))
        return 0
    if not summaries:
        total = len(list_runs(store))
        if total == 0:
            print(no_runs_message(store, "a2rl runs list", latest=False))
        else:
            print(f"no run matches the filters among the {total} run(s) in store {store.uri}")
        return 0
    sys.stdout.write(render_table(LIST_HEADERS, list_rows(summaries)))
    return 0


def _resolve(store: ObjectStore, refs: list[str], command: str) -> list[RunInfo]:
    """The runs `refs` name (as `a2rl report` does), each once, in the order given."""
    from a2rl.runs import find_run, read_run_info

    seen: set[str] = set()
    infos = []
    for ref in refs:
        layout = find_run(store, ref, command=command)
        if layout.prefix not in seen:
            seen.add(layout.prefix)
            infos.append(read_run_info(store, layout))
    return infos


def _compare(args: argparse.Namespace) -> int:
    from a2rl.runs_admin.compare import compare_json, compare_rows
    from a2rl.runs_admin.summary import read_summary
    from a2rl.runs_admin.table import render_table
    from a2rl.store.open import open_store

    store = open_store(args.store)
    now = _now()
    summaries = [read_summary(store, info, now) for info in _resolve(store, args.runs, "a2rl runs compare")]
    if args.json:
        print(json.dumps([compare_json(s, now) for s in summaries], indent=2))
        return 0
    headers, rows = compare_rows(summaries, now)
    sys.stdout.write(render_table(headers, rows))
    return 0


def _describe(plan: DeletionPlan) -> list[str]:
    from a2rl.runs_admin.durations import format_bytes

    lines = [
        f"{plan.ref} ({plan.state}): {plan.objects} objects, {format_bytes(plan.store_bytes)} in the store"
    ]
    lines += [f"  {d.path} ({format_bytes(d.bytes)})" for d in plan.local]
    return lines


def check_can_confirm(yes: bool) -> None:
    """Refuse (A2rlError) when there is neither `--yes` nor a terminal to ask on."""
    if not yes and not sys.stdin.isatty():
        raise A2rlError("refusing to delete without --yes (stdin is not a terminal to confirm on)")


def confirm(question: str, yes: bool) -> bool:
    """True with `--yes`; else ask on a terminal; refuse (A2rlError) when stdin is not one."""
    check_can_confirm(yes)
    if yes:
        return True
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _delete(store: ObjectStore, plans: list[DeletionPlan], yes: bool) -> int:
    from a2rl.runs_admin.delete import execute
    from a2rl.runs_admin.durations import format_bytes

    check_can_confirm(yes)
    for plan in plans:
        for line in _describe(plan):
            print(line)
    total = sum(p.total_bytes for p in plans)
    if not confirm(f"delete {len(plans)} run(s), {format_bytes(total)}?", yes):
        print("nothing deleted")
        return 1
    freed = 0
    for plan in plans:
        freed += execute(store, plan)
        print(f"deleted {plan.prefix}")
    print(f"deleted {len(plans)} run(s), freed {format_bytes(freed)}")
    return 0


def _rm(args: argparse.Namespace) -> int:
    from a2rl.runs_admin.delete import plan_deletion, refuse_live
    from a2rl.store.open import open_store

    store = open_store(args.store)
    now = _now()
    plans = [plan_deletion(store, info, now) for info in _resolve(store, args.runs, "a2rl runs rm")]
    if not args.force:
        refuse_live(plans)
    return _delete(store, plans, args.yes)


def _prune(args: argparse.Namespace) -> int:
    from a2rl.runs import list_runs
    from a2rl.runs_admin.delete import older_than, plan_deletion
    from a2rl.runs_admin.durations import format_bytes, parse_duration
    from a2rl.store.open import open_store

    age = parse_duration(args.older_than)
    store = open_store(args.store)
    now = _now()
    runs = list_runs(store)
    written = {r.prefix: store.modified_at(r.layout.run_json) for r in runs if r.started_at is None}
    plans = []
    for info in older_than(runs, now - age, written):
        plan = plan_deletion(store, info, now)
        if plan.live:
            print(f"skipping {plan.ref}: it may still be going ({plan.state})")
        else:
            plans.append(plan)
    if not plans:
        print(f"no run to prune: none started more than {args.older_than} ago in store {store.uri}")
        return 0
    if args.dry_run:
        for plan in plans:
            for line in _describe(plan):
                print(line)
        total = format_bytes(sum(p.total_bytes for p in plans))
        print(f"dry run: would delete {len(plans)} run(s), freeing {total}")
        return 0
    return _delete(store, plans, args.yes)


def _export(args: argparse.Namespace) -> int:
    from a2rl.runs_admin.archive import export_run
    from a2rl.runs_admin.durations import format_bytes
    from a2rl.runs_admin.state import is_live
    from a2rl.runs_admin.summary import read_state
    from a2rl.store.open import open_store

    store = open_store(args.store)
    (info,) = _resolve(store, [args.run], "a2rl runs export")
    state = read_state(store, info, _now())
    if is_live(state):
        _say(f"note: {info.ref} may still be going ({state}); the export is what the store holds now")
    manifest = export_run(store, info.layout, args.output, say=_say)
    size = format_bytes(manifest.bytes)
    print(f"exported {manifest.prefix}: {len(manifest.objects)} objects, {size} to {args.output}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from a2rl.runs_admin.archive import import_run
    from a2rl.runs_admin.durations import format_bytes
    from a2rl.store.open import open_store

    store = open_store(args.store)
    result = import_run(store, args.archive, say=_say)
    if result.written == 0:
        print(f"store {store.uri} already holds {result.prefix} with the same contents: nothing written")
    else:
        kept = f" ({result.present} already there)" if result.present else ""
        print(
            f"imported {result.prefix} into {store.uri}: {result.written} objects, "
            f"{format_bytes(result.bytes)}{kept}"
        )
    return 0
