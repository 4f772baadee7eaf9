"""Evaluation dispatch: how a recorded submission gets its result.json.

`EvaluationDispatcher.evaluate(index)` returns the submission's result as a `ResultRecord` (the
content of `submissions/<n>/result.json`, or `ResultRecord.failure` when there is none). A failed
dispatch is recorded in `submissions/<n>/dispatch.json` (a `DispatchRecord`).
`LocalDispatcher` (local mode) runs the grader's crash-isolated
eval process `a2rl eval submission …` and reads the result it wrote to the store. A crashed,
killed or timed-out eval process becomes a result with an `error` and a null score — never an
exception in the recorder. Cluster mode: `a2rl_recorder.cluster_dispatch.ClusterDispatcher` (a
BenchSubmission per submission; same protocol, plus `result(index)` for scores from its status).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Protocol

from a2rl.launch import OFFLINE_ENV, kill_group, start_a2rl
from a2rl.records.base import read_record, write_record
from a2rl.records.dispatch import DispatchRecord
from a2rl.records.result import ResultRecord
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.tracing import current_trace_env

log = logging.getLogger(__name__)

KILL_GRACE_S = 10.0


class EvaluationDispatcher(Protocol):
    def evaluate(self, index: int) -> ResultRecord:
        """Evaluate recorded submission `index`; return its result (a failure record when the
        evaluation produced none)."""
        ...


class LocalDispatcher:
    def __init__(
        self,
        store: ObjectStore,
        layout: RunLayout,
        *,
        task: str,
        heldout: Path,
        backend: str = "auto",
        limit: int | None = None,
        timeout_s: float = 7200.0,
        python: str = sys.executable,
    ) -> None:
        self.store = store
        self.layout = layout
        self.task = task
        self.heldout = heldout
        self.backend = backend
        self.limit = limit
        self.timeout_s = timeout_s
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()

    def command(self, index: int) -> list[str]:
        args = [
            "eval",
            "submission",
            "--store",
            self.store.uri,
            "--run-prefix",
            self.layout.prefix,
            "--index",
            str(index),
            "--task",
            self.task,
            "--heldout",
            str(self.heldout),
            "--backend",
            self.backend,
        ]
        if self.limit is not None:
            args += ["--limit", str(self.limit)]
        return args

    def evaluate(self, index: int) -> ResultRecord:
        log_key = self.layout.log(f"eval-{index:05d}")
        with tempfile.TemporaryDirectory(prefix="a2rl-eval-log-") as tmp:
            log_path = Path(tmp) / "eval.log"
            exit_code, problem = self._run(index, log_path)
            try:
                self.store.put_file(log_key, log_path)
            except Exception:
                log.exception("could not store the eval log of submission %d", index)
        result = read_record(self.store, self.layout.submission_result(index), ResultRecord)
        if result is None:
            error = problem or f"evaluation process exited with code {exit_code} without writing a result"
            failed = DispatchRecord.failed(index, error, exit_code, log_key)
            write_record(self.store, self.layout.submission_dispatch(index), failed)
            return ResultRecord.failure(index, self.task, error)
        return result

    def _run(self, index: int, log_path: Path) -> tuple[int | None, str | None]:
        """(exit code, problem) of one eval process; the problem is None when it ran normally."""
        if self._cancelled.is_set():
            return None, "evaluation cancelled: the run is ending"
        with log_path.open("wb") as out:
            try:
                proc = start_a2rl(
                    self.command(index),
                    stdout=out,
                    python=self.python,
                    # current_trace_env: the eval process's spans are children of "dispatch"
                    env={**os.environ, **OFFLINE_ENV, "PYTHONUNBUFFERED": "1", **current_trace_env()},
                )
            except OSError as exc:
                return None, f"evaluation process could not start: {exc}"
            with self._lock:
                self._proc = proc
            try:
                code = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                kill_group(proc, KILL_GRACE_S)
                return proc.returncode, f"evaluation timed out after {self.timeout_s:.0f} s"
            finally:
                with self._lock:
                    self._proc = None
        if self._cancelled.is_set() and code != 0:
            return code, "evaluation cancelled: the run is ending"
        return code, None

    def cancel(self) -> None:
        """Kill the running eval process (shutdown after the drain timeout); later calls fail fast."""
        self._cancelled.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            kill_group(proc, KILL_GRACE_S)
