"""`RecorderConfig`: everything the recorder needs, read from the environment (schema doc)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from a2rl import constants as c
from a2rl.errors import A2rlError

DEFAULT_MAX_MODEL_BYTES = 50 * (1 << 30)
#: New blob bytes all of a run's submissions may store (`A2RL_MAX_RUN_STORED_BYTES`; 0: no cap).
DEFAULT_MAX_RUN_STORED_BYTES = 200 * (1 << 30)
DEFAULT_DRAIN_TIMEOUT_S = 1800.0
DEFAULT_CODE_POLL_S = 1.0
DEFAULT_CODE_DEBOUNCE_S = 2.0
DEFAULT_CODE_MAX_FILE_BYTES = 100 * (1 << 20)
DEFAULT_STORE_RETRY_TIMEOUT_S = 600.0
HOST = "127.0.0.1"

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class RecorderConfig:
    store_uri: str | None
    run_prefix: str
    workspace: Path
    task: str
    run_start: float
    timeout_s: float
    port: int = c.DEFAULT_RECORDER_PORT
    #: Also serve the grading API on this Unix socket (`A2RL_RECORDER_SOCKET`; the local sandbox).
    socket_path: Path | None = None
    max_submissions: int | None = None
    base_model_digest: str | None = None
    heldout_path: Path | None = None
    eval_backend: str = "auto"
    eval_limit: int | None = None
    eval_timeout_s: float = float(c.DEFAULT_EVAL_TIMEOUT_S)
    max_model_bytes: int = DEFAULT_MAX_MODEL_BYTES
    max_run_stored_bytes: int = DEFAULT_MAX_RUN_STORED_BYTES
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    code_poll_s: float = DEFAULT_CODE_POLL_S
    code_debounce_s: float = DEFAULT_CODE_DEBOUNCE_S
    code_max_file_bytes: int = DEFAULT_CODE_MAX_FILE_BYTES
    host: str = HOST
    # Cluster mode (a BenchSubmission per submit) or local mode (an eval process per submit).
    dispatch: str = c.DISPATCH_LOCAL
    run_name: str | None = None
    run_namespace: str | None = None
    run_uid: str | None = None
    spool_dir: Path | None = None  # None: $TMPDIR/a2rl-spool/<run prefix>
    #: Where the drain's outcome is written (a pod: the container's termination message); None: nowhere.
    termination_message_path: Path | None = None
    store_retry_timeout_s: float = DEFAULT_STORE_RETRY_TIMEOUT_S
    #: Local mode: the run's integrity key (results are sealed and checked with it); it comes
    #: through stdin (`A2RL_RUN_KEY_SOURCE=stdin`), never the environment. None: no checks.
    run_key: bytes | None = field(default=None, repr=False)
    #: False in a pod (`A2RL_RUN_START` unset): `serve` takes the start from the run's clock
    #: record in the store (`a2rl_recorder.clock`), so a restarted recorder keeps the clock.
    run_start_given: bool = True

    @property
    def deadline(self) -> float:
        return self.run_start + self.timeout_s

    @property
    def code_dir(self) -> Path:
        return self.workspace / c.WS_CODE

    @property
    def output_dir(self) -> Path:
        return self.workspace / c.WS_OUTPUT

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RecorderConfig:
        e = os.environ if env is None else env
        missing = [
            n for n in (c.ENV_RUN_PREFIX, c.ENV_WORKSPACE, c.ENV_TASK, c.ENV_RUN_TIMEOUT) if not e.get(n)
        ]
        if missing:
            raise A2rlError(f"recorder configuration incomplete: set {', '.join(missing)}")
        heldout = e.get(c.ENV_HELDOUT_PATH)
        dispatch = _dispatch(e, heldout)
        spool = e.get(c.ENV_SPOOL_DIR)
        socket_path = (e.get(c.ENV_RECORDER_SOCKET) or "").strip()
        return cls(
            store_uri=e.get(c.ENV_STORE_URI) or None,
            run_prefix=e[c.ENV_RUN_PREFIX],
            workspace=Path(e[c.ENV_WORKSPACE]).expanduser().absolute(),
            task=e[c.ENV_TASK],
            run_start=_num(e, c.ENV_RUN_START, float, time.time()),
            timeout_s=_num(e, c.ENV_RUN_TIMEOUT, float, 0.0),
            port=_num(e, c.ENV_RECORDER_PORT, int, c.DEFAULT_RECORDER_PORT),
            socket_path=Path(socket_path).expanduser().absolute() if socket_path else None,
            max_submissions=_opt_int(e, c.ENV_MAX_SUBMISSIONS),
            base_model_digest=e.get(c.ENV_BASE_MODEL_DIGEST) or None,
            heldout_path=Path(heldout).expanduser() if heldout else None,
            eval_backend=e.get(c.ENV_EVAL_BACKEND) or "auto",
            eval_limit=_opt_int(e, c.ENV_EVAL_LIMIT),
            eval_timeout_s=_num(e, c.ENV_EVAL_TIMEOUT, float, float(c.DEFAULT_EVAL_TIMEOUT_S)),
            max_model_bytes=_num(e, c.ENV_MAX_MODEL_BYTES, int, DEFAULT_MAX_MODEL_BYTES),
            max_run_stored_bytes=_num(e, c.ENV_MAX_RUN_STORED_BYTES, int, DEFAULT_MAX_RUN_STORED_BYTES),
            drain_timeout_s=_num(e, c.ENV_RECORDER_DRAIN_TIMEOUT, float, DEFAULT_DRAIN_TIMEOUT_S),
            code_poll_s=_num(e, c.ENV_CODE_POLL_INTERVAL, float, DEFAULT_CODE_POLL_S),
            code_debounce_s=_num(e, c.ENV_CODE_DEBOUNCE, float, DEFAULT_CODE_DEBOUNCE_S),
            code_max_file_bytes=_num(e, c.ENV_CODE_MAX_FILE_BYTES, int, DEFAULT_CODE_MAX_FILE_BYTES),
            dispatch=dispatch,
            run_name=e.get(c.ENV_RUN_NAME) or None,
            run_namespace=e.get(c.ENV_RUN_NAMESPACE) or None,
            run_uid=e.get(c.ENV_RUN_UID) or None,
            spool_dir=Path(spool).expanduser().absolute() if spool else None,
            termination_message_path=Path(term) if (term := e.get(c.ENV_TERMINATION_MESSAGE_PATH)) else None,
            store_retry_timeout_s=_num(e, c.ENV_STORE_RETRY_TIMEOUT, float, DEFAULT_STORE_RETRY_TIMEOUT_S),
            run_start_given=bool((e.get(c.ENV_RUN_START) or "").strip()),
        )


def _dispatch(env: Mapping[str, str], heldout: str | None) -> str:
    """`A2RL_RECORDER_DISPATCH`, by default `local` when a held-out path is given, else `cluster`.

    Cluster mode needs the BenchRun's name, namespace and uid (the owner of every submission);
    the held-out data never reaches a cluster recorder, so a held-out path means local mode.
    """
    raw = (env.get(c.ENV_RECORDER_DISPATCH) or "").strip().lower()
    mode = raw or (c.DISPATCH_LOCAL if heldout else c.DISPATCH_CLUSTER)
    if mode not in (c.DISPATCH_LOCAL, c.DISPATCH_CLUSTER):
        raise A2rlError(
            f"{c.ENV_RECORDER_DISPATCH} must be {c.DISPATCH_LOCAL!r} or {c.DISPATCH_CLUSTER!r}, got {raw!r}"
        )
    if mode == c.DISPATCH_CLUSTER:
        missing = [n for n in (c.ENV_RUN_NAME, c.ENV_RUN_NAMESPACE, c.ENV_RUN_UID) if not env.get(n)]
        if missing:
            raise A2rlError(
                "recorder in cluster mode (no A2RL_HELDOUT_PATH) needs the BenchRun: "
                f"set {', '.join(missing)}"
            )
    return mode


def _num(env: Mapping[str, str], name: str, kind: type[T], default: T) -> T:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise A2rlError(f"{name} must be a {kind.__name__}, got {raw!r}") from None
    if value < 0:
        raise A2rlError(f"{name} must not be negative, got {raw!r}")
    return value


def _opt_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    return None if raw is None or raw.strip() == "" else _num(env, name, int, 0)
