"""`a2rl run FILE`: run a BenchRun on this machine (local mode).

Every user mistake is one line on stderr and exit 2, before anything starts. An agent that could
not be started at all (its working directory or command missing, not executable) is reported in
one line on stderr too, `--quiet` or not; the run itself is recorded as failed (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.errors import A2rlError, InvalidDocumentError

if TYPE_CHECKING:
    from a2rl_runner.run import RunOutcome

#: How the runner (supervisor or sandbox relay) and bubblewrap report an agent they could not start.
_START_FAILURES = ("a2rl: cannot start agent command", "bwrap: ")
_MAX_LINE = 4096  # the log is the agent's output: never read more of it than one line's worth


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
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the agent without the local sandbox (bubblewrap namespaces): it then runs as you and "
        "can read your files, the held-out data and the store; the run and its report say so",
    )
    parser.add_argument(
        "--fail-on-no-improvement",
        action="store_true",
        help="exit 3 when no valid submission scored above the baseline (also when the baseline "
        "has no score); for scripts and CI",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved plan (model, data, agent, sandbox, limits, baseline cache, worst-case "
        "driver cost, expected wall time) and exit 0; nothing is staged, started or written",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from a2rl_runner.run import EXIT_NO_IMPROVEMENT, run_benchrun

    from a2rl.runs import remember_store

    if args.dry_run:
        return _dry_run(args)
    try:
        outcome = run_benchrun(
            args.file,
            store_uri=args.store,
            name=args.name,
            progress=not args.quiet,
            sandbox=not args.no_sandbox,
        )
    except InvalidDocumentError as exc:
        # One line, even when the document has several problems.
        raise A2rlError(f"{exc.source}: {'; '.join(exc.problems)}") from None
    remember_store(outcome.store_uri)
    reason = _start_failure(Path(args.file), outcome)
    if reason is not None:
        print(f"a2rl: error: the agent could not be started: {reason}", file=sys.stderr, flush=True)
    code = outcome.exit_status
    if code == 0 and args.fail_on_no_improvement and not outcome.improved:
        print(
            f"a2rl: no improvement over the baseline ({outcome.end_reason}; "
            f"{outcome.scores.valid_submissions} scored submissions)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_NO_IMPROVEMENT
    return code


def _dry_run(args: argparse.Namespace) -> int:
    from a2rl_runner.plan import plan_lines
    from a2rl_runner.run import load

    try:
        run = load(args.file)
    except InvalidDocumentError as exc:
        raise A2rlError(f"{exc.source}: {'; '.join(exc.problems)}") from None
    for line in plan_lines(run, store_uri=args.store, sandbox=not args.no_sandbox):
        print(line)
    return 0


def _start_failure(file: Path, outcome: RunOutcome) -> str | None:
    """Why the agent never started (None when it did): the runner writes the reason into the
    agent's log only, which `--quiet` does not show."""
    from a2rl import paths

    if outcome.interrupted or outcome.agent_exit_code in (0, None):
        return None
    log = paths.home() / "logs" / f"{outcome.name}-{outcome.uid}" / "agent.log"
    try:
        with log.open(encoding="utf-8", errors="replace") as f:
            line = f.readline(_MAX_LINE).rstrip("\n")  # the runner's reason is the log's first line
    except OSError:
        return None
    if not line.startswith(_START_FAILURES):
        return None
    missing_dir = _missing_working_dir(file, outcome.workspace)
    if missing_dir is not None:
        return missing_dir
    return line.removeprefix("a2rl: ").removeprefix("bwrap: ")


def _missing_working_dir(file: Path, workspace: Path) -> str | None:
    from a2rl.api.load import load_benchrun
    from a2rl.contracts.env import agent_cwd
    from a2rl.workspace import Workspace

    try:
        spec = load_benchrun(file).spec
    except A2rlError:
        return None
    cwd = agent_cwd(spec, Workspace.for_base_model(workspace, spec.base_model.name))
    if cwd.is_dir():
        return None
    return (
        f"its working directory spec.agent.workingDir={spec.agent.working_dir!r} is not a directory ({cwd})"
    )
