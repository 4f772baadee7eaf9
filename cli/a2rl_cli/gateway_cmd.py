"""`a2rl gateway serve`: one run's driver gateway (configuration from the environment: docs/gateway.md)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("gateway", help="the driver gateway: the agent's LLM calls, metered and budgeted")
    gsub = parser.add_subparsers(dest="gateway_command", metavar="SUBCOMMAND")
    gsub.required = True
    s = gsub.add_parser(
        "serve",
        help="serve one run's driver gateway until SIGTERM (config: A2RL_GATEWAY_* env, see docs/gateway.md)",
    )
    s.add_argument(
        "--port",
        type=int,
        default=None,
        help="also serve on 127.0.0.1:PORT (overrides A2RL_GATEWAY_PORT; 0 = any free)",
    )
    s.add_argument(
        "--socket",
        default=None,
        metavar="PATH",
        help="serve on this Unix socket (overrides A2RL_GATEWAY_SOCKET)",
    )
    s.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import os
    import sys

    from a2rl_gateway.app import serve
    from a2rl_gateway.config import GatewayConfig, read_upstream_key

    from a2rl import constants as c
    from a2rl.errors import A2rlError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    env = dict(os.environ)
    if args.port is not None:
        if not 0 <= args.port <= 65535:
            raise A2rlError(f"--port must be between 0 and 65535, got {args.port}")
        env[c.ENV_GATEWAY_PORT] = str(args.port)
    if args.socket is not None:
        env[c.ENV_GATEWAY_SOCKET] = str(Path(args.socket).expanduser().absolute())
    config = GatewayConfig.from_env(env)
    key = read_upstream_key(config.key_source, sys.stdin.buffer)
    config = dataclasses.replace(config, key_source=None)
    serve(config, upstream_key=key)
    return 0
