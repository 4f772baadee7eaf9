"""The `--protocol reference|a2rl` option of the commands that build a task (see `a2rl.protocols`)."""

from __future__ import annotations

import argparse
import os

from a2rl.protocols import DEFAULT_PROTOCOL, ENV_EVAL_PROTOCOL, PROTOCOLS, EvalProtocol, protocol_from_env

HELP = (
    "evaluation protocol: 'reference' reproduces the reference implementation's evaluation and "
    "agent description (the paper's numbers), 'a2rl' is a2rl's corrected protocol (docs/tasks.md)"
)


def add_protocol_arg(parser: argparse.ArgumentParser, *, from_env: bool = False) -> None:
    """`--protocol`; default `reference`, or with `from_env` the evaluation environment's
    `A2RL_EVAL_PROTOCOL` (a run's eval processes get it from `spec.evaluation.protocol`)."""
    where = f"${ENV_EVAL_PROTOCOL}, else {DEFAULT_PROTOCOL}" if from_env else DEFAULT_PROTOCOL
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default=None if from_env else DEFAULT_PROTOCOL,
        help=f"{HELP} (default: {where})",
    )


def chosen_protocol(args: argparse.Namespace) -> EvalProtocol:
    """`--protocol`, else (an option added `from_env`) `A2RL_EVAL_PROTOCOL`, else `reference`."""
    value: EvalProtocol | None = args.protocol
    return value if value is not None else protocol_from_env(os.environ)
