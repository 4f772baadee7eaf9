"""`a2rl` command line, the top layer (it may import every other package). Each command group
lives in its own module with a `register` function.

User mistakes raise `A2rlError` and are printed as one line (`a2rl: error: …`), never a traceback.
SIGTERM ends a command (exit 143) even where it is a container's PID 1, which the kernel gives no
signal it has no handler for (`a2rl.contracts.pid1.exit_on_sigterm`); the serving commands install
their own handler and drain.
Heavy imports (torch, transformers, kubernetes) happen inside the handlers, so `a2rl --help`
and `a2rl validate` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from a2rl import __version__
from a2rl.contracts.pid1 import exit_on_sigterm
from a2rl.errors import A2rlError

# Module names under a2rl_cli, in the order their commands appear in `a2rl --help`.
COMMAND_MODULES = (
    "run_cmd",
    "campaign_cmd",
    "validate_cmd",
    "report_cmd",
    "logs_cmd",
    "runs_cmd",
    "models_cmd",
    "tasks_cmd",
    "data_cmd",
    "crds_cmd",
    "chart_cmd",
    "recorder_cmd",
    "gateway_cmd",
    "eval_cmd",
    "operator_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="a2rl", description="Agent² RL-Bench, Kubernetes-native.")
    parser.add_argument("--version", action="version", version=f"a2rl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"a2rl_cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with exit_on_sigterm():
            code: int = args.func(args)
    except A2rlError as exc:
        print(f"a2rl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("a2rl: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
