"""`a2rl run FILE`: run a BenchRun on this machine (local mode)."""

from __future__ import annotations

import argparse

from a2rl.errors import A2rlError, InvalidDocumentError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        help="run a BenchRun locally (agent subprocess, grading server, evaluation, report)",
        description=(
            "Run a BenchRun on this machine: score the base model, build the workspace, start the "
            "grading server, run the agent under its budget, record every submission and code "
            "revision in the store, and write the report. See docs/local-mode.md."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="BenchRun YAML file")
    parser.add_argument(
        "--store",
        metavar="URI",
        default=None,
        help="store for the run's records: a directory, file:///dir or s3://bucket/prefix "
        "(default: spec.store.uri, else ~/.a2rl/store)",
    )
    parser.add_argument(
        "--name", default=None, help="run name (default: metadata.name); the run is <name>-<12 hex uid>"
    )
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print only errors (no progress, no agent output, no summary)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from a2rl_runner.run import run_benchrun

    try:
        outcome = run_benchrun(args.file, store_uri=args.store, name=args.name, progress=not args.quiet)
    except InvalidDocumentError as exc:
        # One line, even when the document has several problems.
        raise A2rlError(f"{exc.source}: {'; '.join(exc.problems)}") from None
    return outcome.exit_status
