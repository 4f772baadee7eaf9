"""`a2rl recorder serve`: the grading API + workspace recorder (configuration from the environment)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import TYPE_CHECKING

from a2rl.protocols import DEFAULT_PROTOCOL, PROTOCOLS

if TYPE_CHECKING:
    from a2rl_recorder.config import RecorderConfig


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("recorder", help="the grading API and workspace recorder (local or sidecar)")
    rsub = parser.add_subparsers(dest="recorder_command", metavar="SUBCOMMAND")
    rsub.required = True
    s = rsub.add_parser(
        "serve",
        help="serve the grading API on 127.0.0.1 until SIGTERM (config: A2RL_* env, see docs/recorder.md)",
    )
    s.add_argument("--port", type=int, default=None, help="port (overrides A2RL_RECORDER_PORT; 0 = any free)")
    s.set_defaults(func=_serve)
    st = rsub.add_parser(
        "setup",
        help="prepare a cluster run's workspace volume and record the baseline submission "
        "(the workspace pod's first init container; config: the recorder's A2RL_* env)",
    )
    st.add_argument("--base-model-source", required=True, help="spec.baseModel.source, e.g. builtin:tiny")
    st.add_argument("--base-model-name", required=True, help="spec.baseModel.name (models/<name>/)")
    st.add_argument("--seed", type=int, default=0, help="spec.seed: which staged data split (default 0)")
    st.add_argument("--grace-seconds", type=int, default=30, help="spec.budget.graceSeconds (instructions)")
    st.add_argument(
        "--protocol", choices=PROTOCOLS, default=DEFAULT_PROTOCOL, help="spec.evaluation.protocol"
    )
    st.set_defaults(func=_setup)


def _serve(args: argparse.Namespace) -> int:
    from a2rl_recorder.app import serve
    from a2rl_recorder.config import RecorderConfig

    from a2rl.errors import A2rlError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = RecorderConfig.from_env()
    config = _with_run_key(config)
    if args.port is not None:
        if not 0 <= args.port <= 65535:
            raise A2rlError(f"--port must be between 0 and 65535, got {args.port}")
        config = dataclasses.replace(config, port=args.port)
    return serve(config)


def _with_run_key(config: RecorderConfig) -> RecorderConfig:
    """The run's integrity key from stdin when `A2RL_RUN_KEY_SOURCE=stdin` (the local runner's pipe)."""
    import os
    import sys

    from a2rl import constants as c
    from a2rl.errors import A2rlError
    from a2rl.integrity import parse_key_line

    source = (os.environ.get(c.ENV_RUN_KEY_SOURCE) or "").strip()
    if not source:
        return config
    if source != "stdin":
        raise A2rlError(f"{c.ENV_RUN_KEY_SOURCE} must be 'stdin', got {source!r}")
    try:
        key = parse_key_line(sys.stdin.buffer.readline())
    except ValueError:
        raise A2rlError("the run key on stdin is missing or malformed") from None
    return dataclasses.replace(config, run_key=key)


def _setup(args: argparse.Namespace) -> int:
    from a2rl_recorder.app import cluster_dispatcher
    from a2rl_recorder.cluster_dispatch import ClusterDispatcher
    from a2rl_recorder.config import RecorderConfig
    from a2rl_recorder.workspace_setup import setup_workspace

    from a2rl import constants as c
    from a2rl.contracts.setup import SetupParams
    from a2rl.errors import A2rlError
    from a2rl.store.open import open_store
    from a2rl.tracing import init_tracing

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = RecorderConfig.from_env()
    if config.dispatch != c.DISPATCH_CLUSTER:
        raise A2rlError("`a2rl recorder setup` prepares a cluster run; locally `a2rl run` does this")
    store = open_store(config.store_uri)
    tracing = init_tracing(c.COMPONENT_SETUP, store=store, run_prefix=config.run_prefix)
    params = SetupParams(
        base_model_source=args.base_model_source,
        base_model_name=args.base_model_name,
        seed=args.seed,
        grace_s=args.grace_seconds,
        protocol=args.protocol,
    )
    dispatcher = cluster_dispatcher(config, store)
    assert isinstance(dispatcher, ClusterDispatcher)
    try:
        setup_workspace(config, store, params, create_submission=dispatcher.create)
    finally:
        tracing.shutdown()
    return 0
