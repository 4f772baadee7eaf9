"""`[RUN] [--latest] [--store URI]` of the commands that read one run from a store (`report`, `logs`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from a2rl.errors import A2rlError

if TYPE_CHECKING:
    from a2rl.store.base import ObjectStore
    from a2rl.store.layout import RunLayout


def add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", metavar="RUN", help="the run (default: the newest run)")
    parser.add_argument("--latest", action="store_true", help="the run with the newest start time")
    parser.add_argument("--store", metavar="URI", default=None, help="object store (default: ~/.a2rl/store)")


def chosen_run(args: argparse.Namespace, command: str) -> tuple[ObjectStore, RunLayout]:
    """(the store, the run) that RUN or --latest names; `command` is named in a hint when the store
    has no runs."""
    # lazy: the store's clients, only when a command reads a run
    from a2rl.runs import find_run, latest_run
    from a2rl.store.open import open_store

    if args.run and args.latest:
        raise A2rlError("give either RUN or --latest, not both")
    store = open_store(args.store)
    layout = find_run(store, args.run, command=command) if args.run else latest_run(store, command=command)
    return store, layout
