"""What every round-based reference agent shares: its `main`, the clock, the stop signal, the time
plan for the next round, submitting and logging, and copying its own code into `$WORKSPACE/code`.

Rounds are measured in seconds, not steps, so the same agent fits any machine: the plan keeps
room for saving, the evaluation of the submission (measured after the first one) and a margin.
Pure planning (`plan_round`) is separate from I/O so it can be tested on its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from a2rl_agents.contract import AgentEnv, ApiResponse, ContractError, GradingClient, env_float, env_int

PACKAGE_DIR = Path(__file__).resolve().parent


class Log:
    """Progress lines on stdout, prefixed with the seconds since the agent started."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[{self.name} {time.monotonic() - self.started:6.1f}s] {message}", flush=True)


#: OpenMP (libgomp, which PyTorch uses on Linux) spin iterations before a waiting thread sleeps.
GOMP_SPINCOUNT = "1000"


def prepare_process() -> None:
    """Call before torch is imported: OpenMP threads spin only briefly before they sleep.

    With the default (long) spinning, two threads on two cores that other processes also use
    (the evaluation, other jobs) slow a training step 5-20x; sleeping at once
    (`OMP_WAIT_POLICY=PASSIVE`) avoids that but costs ~50 % on an idle machine. A short spin is
    within noise of the best of both (measured on 2 cores: docs/agents.md). Set
    `OMP_WAIT_POLICY` or `GOMP_SPINCOUNT` yourself to override.
    """
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)


def quiet_libraries() -> None:
    """No progress bars or advisory warnings from datasets/transformers in the agent's log."""
    import warnings

    from datasets.utils.logging import disable_progress_bar
    from transformers.utils import logging as hf_logging

    disable_progress_bar()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def set_threads(threads: int) -> None:
    """Torch's intra-op threads (`AGENT_THREADS`; 0 keeps torch's default, one per core)."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def install_stop_handlers(stop: threading.Event, log: Log | None = None) -> None:
    """SIGTERM/SIGINT set `stop`: training ends after the current step, the agent exits 0."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if log is not None and not stop.is_set():
            log(f"received {signal.Signals(signum).name}: stopping")
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def agent_main(name: str, run: Callable[[AgentEnv, threading.Event, Log], int]) -> int:
    """An agent's `main`: set the process up, read the contract's environment, then `run` it.

    `name` prefixes the log lines; exit status 2 when the environment breaks the contract,
    else what `run(env, stop, log)` returns (`stop` is set by SIGTERM/SIGINT).
    """
    prepare_process()
    log = Log(name)
    stop = threading.Event()
    install_stop_handlers(stop, log)
    try:
        env = AgentEnv.from_environ()
    except ContractError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    quiet_libraries()
    set_threads(env_int("AGENT_THREADS", 0))
    return run(env, stop, log)


class Clock:
    """The run's deadline on this machine's monotonic clock, synced from `GET /time`."""

    def __init__(self, client: GradingClient) -> None:
        self.client = client
        self.deadline = 0.0
        self.sync()

    def sync(self) -> float:
        remaining = self.client.remaining_s()
        self.deadline = time.monotonic() + remaining
        return remaining

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


@dataclass(frozen=True)
class LoopSettings:
    """How an agent spends its budget, in seconds (independent of the training method)."""

    first_round_s: float
    round_s: float
    min_round_s: float
    #: Optional cap on the steps of one round (0: none; the round ends on time).
    round_max_steps: int = 0
    max_rounds: int = 100
    train_limit: int = 0
    eval_estimate_s: float = 30.0
    overhead_estimate_s: float = 10.0
    margin_s: float = 10.0
    submit_timeout_s: float = 7200.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: Fractions of the budget (the time left when the agent starts) used when no knob is set.
FIRST_ROUND_FRACTION = 0.40
ROUND_FRACTION = 0.18
MIN_ROUND_FRACTION = 0.06


def loop_settings(
    budget_s: float,
    *,
    first_fraction: float = FIRST_ROUND_FRACTION,
    round_fraction: float = ROUND_FRACTION,
    environ: Mapping[str, str] | None = None,
) -> LoopSettings:
    """Round lengths from the `AGENT_*` knobs, else from fractions of `budget_s`."""
    budget_s = max(budget_s, 0.0)
    return LoopSettings(
        first_round_s=env_float("AGENT_FIRST_ROUND_S", first_fraction * budget_s, environ),
        round_s=env_float("AGENT_ROUND_S", round_fraction * budget_s, environ),
        min_round_s=env_float("AGENT_MIN_ROUND_S", MIN_ROUND_FRACTION * budget_s, environ),
        round_max_steps=env_int("AGENT_ROUND_MAX_STEPS", 0, environ),
        max_rounds=env_int("AGENT_MAX_ROUNDS", LoopSettings.max_rounds, environ),
        train_limit=env_int("AGENT_TRAIN_LIMIT", 0, environ),
        eval_estimate_s=env_float("AGENT_EVAL_ESTIMATE_S", LoopSettings.eval_estimate_s, environ),
        overhead_estimate_s=env_float("AGENT_OVERHEAD_ESTIMATE_S", LoopSettings.overhead_estimate_s, environ),
        margin_s=env_float("AGENT_MARGIN_S", LoopSettings.margin_s, environ),
        submit_timeout_s=env_float("AGENT_SUBMIT_TIMEOUT_S", LoopSettings.submit_timeout_s, environ),
    )


@dataclass
class TimePlan:
    """Running estimates used to decide whether (and how long) another round fits the budget."""

    #: Seconds a submission takes (snapshot + evaluation): the slowest one measured so far.
    eval_s: float
    #: Seconds of a round that are not training: trainer set-up and saving the model.
    overhead_s: float = 10.0
    #: Safety margin kept free before the deadline.
    margin_s: float = 10.0
    eval_history: list[float] = field(default_factory=list)
    overhead_history: list[float] = field(default_factory=list)

    def record_eval(self, seconds: float) -> None:
        self.eval_history.append(seconds)
        # The slowest evaluation so far: a later model that writes longer answers is slower.
        self.eval_s = max(self.eval_history)

    def record_overhead(self, seconds: float) -> None:
        self.overhead_history.append(max(seconds, 0.0))
        self.overhead_s = max(self.overhead_history)

    def train_window(self, remaining_s: float) -> float:
        """Seconds of training that leave time to save, submit and score before the deadline."""
        return remaining_s - self.eval_s - self.overhead_s - self.margin_s


def plan_round(plan: TimePlan, remaining_s: float, wanted_s: float, min_s: float) -> float:
    """Seconds for the next round: `wanted_s`, less if only that much fits, 0 if not even `min_s`."""
    seconds = min(wanted_s, plan.train_window(remaining_s))
    return seconds if seconds > 0 and seconds >= min_s else 0.0


def submit_until_stopped(
    client: GradingClient, model_dir: Path, stop: threading.Event, *, timeout_s: float
) -> ApiResponse | None:
    """Submit in a worker thread so that a stop signal ends the wait at once (None then)."""
    box: list[ApiResponse | BaseException] = []

    def work() -> None:
        try:
            box.append(client.submit(model_dir, timeout_s=timeout_s))
        except BaseException as exc:  # re-raised in the caller's thread
            box.append(exc)

    worker = threading.Thread(target=work, name="submit", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)
        if stop.is_set() and worker.is_alive():
            return None
    result = box[0]
    if isinstance(result, BaseException):
        raise result
    return result


def describe_submit(resp: ApiResponse) -> str:
    """One progress line for a grading-server response."""
    body = resp.body
    if not resp.ok:
        return f"submission rejected ({resp.status}): {resp.error}"
    best = body.get("best") or {}
    parts = [
        f"submission {body.get('submission_id')}",
        f"score {_fmt(body.get('score'))}",
        f"baseline {_fmt(body.get('baseline_score'))}",
        f"improvement {_fmt(body.get('improvement'))}",
        f"best {_fmt(best.get('score'))} (#{best.get('submission_id')})",
        f"eval {_fmt(body.get('elapsed_seconds'))}s",
    ]
    if body.get("error"):
        parts.append(f"error: {body['error']}")
    return ", ".join(parts)


def _fmt(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else str(value)


def submit_round(
    client: GradingClient,
    model_dir: Path,
    *,
    plan: TimePlan,
    stop: threading.Event,
    log: Log,
    timeout_s: float,
) -> bool:
    """Submit `model_dir`, log the answer, update the evaluation estimate; False: stop submitting."""
    log(f"submitting {model_dir.name}")
    started = time.monotonic()
    resp = submit_until_stopped(client, model_dir, stop, timeout_s=timeout_s)
    if resp is None:
        log("stopped while waiting for the evaluation")
        return False
    log(describe_submit(resp))
    if resp.ok:
        plan.record_eval(time.monotonic() - started)
        return True
    # 403 (time used up), 429 (submission cap), 503 (run ending): nothing more can be scored.
    return resp.status not in (403, 429, 503)


def copy_code(code_dir: Path, extra_files: dict[str, str] | None = None) -> list[Path]:
    """Copy this package's source into `code_dir/a2rl_agents/` (the recorder snapshots `code/`).

    `extra_files` (name → text) are written next to it, e.g. the settings of this run.
    """
    dest = code_dir / PACKAGE_DIR.name
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for src in sorted(PACKAGE_DIR.glob("*.py")):
        shutil.copyfile(src, dest / src.name)
        written.append(dest / src.name)
    for name, text in (extra_files or {}).items():
        path = code_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
