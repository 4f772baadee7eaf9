"""Running the recorder as a process: `serve(config)` until SIGTERM/SIGINT, then drain.

Shutdown: the drain (`a2rl_recorder.drain`: submissions closed, those in flight finished or
cancelled, a final code revision, the spool to the store, all within `drain_timeout_s` of the
signal) → its outcome logged and written to the termination message → stop the HTTP server →
return 0. `/health` and `/time` keep answering while draining.

The store is always wrapped in a `SpoolingStore`; the dispatcher is `LocalDispatcher` (an eval
process) or `ClusterDispatcher` (a BenchSubmission), per `config.dispatch`.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from a2rl import constants as c
from a2rl.errors import A2rlError
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store
from a2rl.tracing import init_tracing
from a2rl.workspace import update_run_meta
from a2rl_recorder.clock import recorded_run_start
from a2rl_recorder.config import RecorderConfig
from a2rl_recorder.dispatch import EvaluationDispatcher, LocalDispatcher
from a2rl_recorder.drain import drain, write_termination_message
from a2rl_recorder.server import RecorderHTTPServer, RecorderUnixServer
from a2rl_recorder.service import Recorder
from a2rl_recorder.snapshots import CodeWatcher
from a2rl_recorder.spool import SpoolingStore, default_spool_dir
from a2rl_recorder.workspace_setup import recorded_base_digest

log = logging.getLogger(__name__)

READY_LINE = "a2rl-recorder listening on http://{host}:{port}"


def local_dispatcher(config: RecorderConfig, store: ObjectStore) -> LocalDispatcher:
    if config.heldout_path is None:
        raise A2rlError("A2RL_HELDOUT_PATH is required: the recorder runs the eval process locally")
    if not config.heldout_path.is_dir():
        raise A2rlError(f"held-out data directory not found: {config.heldout_path}")
    return LocalDispatcher(
        store,
        RunLayout.from_prefix(config.run_prefix),
        task=config.task,
        heldout=config.heldout_path,
        backend=config.eval_backend,
        limit=config.eval_limit,
        timeout_s=config.eval_timeout_s,
        key=config.run_key,
    )


def cluster_dispatcher(config: RecorderConfig, store: ObjectStore) -> EvaluationDispatcher:
    # lazy: the Kubernetes client, only in cluster mode
    from a2rl_recorder.cluster_dispatch import ClusterDispatcher, api_client_from_env

    assert config.run_name and config.run_namespace and config.run_uid  # checked by from_env
    try:
        api_client = api_client_from_env()
    except Exception as exc:
        raise A2rlError(f"recorder in cluster mode cannot reach the Kubernetes API: {exc}") from exc
    return ClusterDispatcher(
        store,
        RunLayout.from_prefix(config.run_prefix),
        api_client=api_client,
        task=config.task,
        run_name=config.run_name,
        namespace=config.run_namespace,
        run_uid=config.run_uid,
        timeout_s=config.eval_timeout_s,
    )


def serve(
    config: RecorderConfig,
    *,
    store: ObjectStore | None = None,
    dispatcher: EvaluationDispatcher | None = None,
    stop: threading.Event | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> int:
    """Serve the grading API until `stop` is set (SIGTERM/SIGINT set it in the main thread)."""

    if not config.workspace.is_dir():
        raise A2rlError(f"workspace not found: {config.workspace}")
    try:
        RunLayout.from_prefix(config.run_prefix)
    except ValueError:
        raise A2rlError(
            f"A2RL_RUN_PREFIX must look like <namespace>/<run>-<uid>, got {config.run_prefix!r}"
        ) from None
    store = store or open_store(config.store_uri)
    if config.base_model_digest is None:
        config = dataclasses.replace(config, base_model_digest=_recorded_base_digest(store, config))
    # Spans go straight to the store (the exporter keeps and retries them), not through the spool.
    tracing = init_tracing(c.COMPONENT_RECORDER, store=store, run_prefix=config.run_prefix)
    if not isinstance(store, SpoolingStore):
        store = SpoolingStore(store, config.spool_dir or default_spool_dir(config.run_prefix))
    spool = store
    if not config.run_start_given:  # a pod: the clock's start is the run's record, kept across restarts
        start = recorded_run_start(store, RunLayout.from_prefix(config.run_prefix))
        config = dataclasses.replace(config, run_start=start)
    try:
        # The agent's clock (the local runner wrote the same values before starting us).
        update_run_meta(config.workspace, start_time=config.run_start, timeout_s=config.timeout_s)
    except OSError as exc:
        log.warning("could not write run_meta.json in the workspace: %s", exc)
    if dispatcher is None:
        if config.dispatch == c.DISPATCH_CLUSTER:
            dispatcher = cluster_dispatcher(config, store)
        else:
            dispatcher = local_dispatcher(config, store)
    recorder = Recorder(config, store, dispatcher)
    try:
        server = RecorderHTTPServer(recorder, config.host, config.port)
    except OSError as exc:
        raise A2rlError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from exc
    servers: list[RecorderHTTPServer | RecorderUnixServer] = [server]
    if config.socket_path is not None:  # the same API for the local sandbox to relay
        try:
            servers.append(RecorderUnixServer(recorder, config.socket_path))
        except OSError as exc:
            server.server_close()
            raise A2rlError(
                f"cannot listen on the Unix socket {config.socket_path}: {exc.strerror or exc}"
            ) from exc
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        _install_signal_handlers(stop)
    watcher = CodeWatcher(recorder.code, poll_s=config.code_poll_s, debounce_s=config.code_debounce_s)
    watcher.start()
    for srv in servers:  # both listen before the ready line
        threading.Thread(target=srv.serve_forever, name="a2rl-recorder-http", daemon=True).start()
    print(READY_LINE.format(host=config.host, port=server.port), flush=True)
    if on_ready is not None:
        on_ready(server.port)
    try:
        stop.wait()
    finally:
        log.info("recorder stopping: closing submissions, draining (at most %.0f s)", config.drain_timeout_s)
        drain_start_ns = time.time_ns()
        outcome = drain(recorder, dispatcher, watcher, spool, config.drain_timeout_s)
        write_termination_message(config.termination_message_path, outcome)
        attrs = {"a2rl.drain.complete": outcome.complete, "a2rl.drain.spool_left": outcome.spool_left}
        with tracing.span("recorder_drain", attrs, start_time_ns=drain_start_ns):
            pass  # from SIGTERM to everything recorded: submissions in flight, final code, spool
        for srv in servers:
            srv.shutdown()
            srv.server_close()  # the Unix socket's file goes with it
        tracing.shutdown()
    print("a2rl-recorder stopped", file=sys.stderr, flush=True)
    return 0


def _recorded_base_digest(store: ObjectStore, config: RecorderConfig) -> str | None:
    """Cluster mode: the base model's digest, recorded as submission 0 by `a2rl recorder setup`."""
    try:
        return recorded_base_digest(store, RunLayout.from_prefix(config.run_prefix))
    except Exception as exc:  # an unreachable store must not keep the grading API down
        log.warning("base model digest unknown (copies of the base model are evaluated): %s", exc)
        return None


def _install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
