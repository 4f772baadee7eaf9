"""`a2rl validate FILE...`: check BenchRun / BenchSubmission files as the API server would.

Like grep: every file gets its verdict; exit 0 when all are valid, 1 when one is invalid, 2 when
one could not be read at all (missing, not a regular file, over the size cap, not UTF-8).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from a2rl.errors import A2rlError, InvalidDocumentError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("validate", help="validate BenchRun/BenchSubmission YAML files")
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="YAML file(s) to check")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="for each valid BenchRun, also print the plan `a2rl run --dry-run` prints",
    )
    parser.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    from a2rl_tasks import TASKS

    from a2rl.api.benchrun import BenchRun
    from a2rl.api.load import load_resource

    failed = unreadable = 0
    for path in args.files:
        try:
            obj = load_resource(path, TASKS)
        except InvalidDocumentError as exc:
            failed += 1
            print(exc)
            continue
        except A2rlError as exc:
            unreadable += 1
            print(exc if str(exc).startswith(str(path)) else f"{path}: {exc}")
            continue
        if isinstance(obj, BenchRun):
            print(f"{path}: valid (BenchRun {obj.metadata.name}, task {obj.spec.task})")
            if getattr(args, "plan", False):
                from a2rl_runner.plan import plan_lines

                for line in plan_lines(obj, store_uri=None):
                    print(f"  {line}")
        else:
            print(f"{path}: valid (BenchSubmission {obj.metadata.name}, run {obj.spec.run_name})")
    return 2 if unreadable else 1 if failed else 0
