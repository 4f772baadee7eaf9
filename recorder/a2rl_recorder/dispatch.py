"""Evaluation dispatch: how a recorded submission gets its result.json.

`EvaluationDispatcher.evaluate(index)` returns the submission's result as a `ResultRecord` (the
content of `submissions/<n>/result.json`, or `ResultRecord.failure` when there is none). A failed
dispatch is recorded in `submissions/<n>/dispatch.json` (a `DispatchRecord`).
`LocalDispatcher` (local mode) runs the grader's crash-isolated eval process `a2rl eval submission
…` in a sandbox of its own (`a2rl_grader.sandbox.submission_box`: no network but its endpoints, of
the host's files a read-only allow-list with its held-out data, writable only its run's store
prefix and a scratch directory, memory and process limits; docs/recorder.md "The eval process's
sandbox"); the result is the one the process printed on its stdout (a pipe the agent cannot write
to), the same it wrote to the store. With the run's key the dispatcher seals that result
(`a2rl.records.result.seal_result`), so a result.json rewritten in the store afterwards (or before
it was read) is detected by every reader. A crashed, killed (by a limit: "evaluation exceeded its
memory limit (… GiB)") or timed-out eval process becomes a result with an `error` and a null score
— never an exception in the recorder. Cluster mode:
`a2rl_recorder.cluster_dispatch.ClusterDispatcher` (a BenchSubmission per submission; same
protocol, plus `result(index)` for scores from its status).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Protocol

from a2rl_grader.sandbox import submission_box

from a2rl.constants import DEFAULT_EVAL_TIMEOUT_S
from a2rl.eval_sandbox import EvalBox
from a2rl.launch import OFFLINE_ENV, kill_group, start_a2rl
from a2rl.records.base import read_record, write_record
from a2rl.records.dispatch import DispatchRecord
from a2rl.records.result import ResultRecord, seal_result
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
        timeout_s: float = DEFAULT_EVAL_TIMEOUT_S,
        python: str = sys.executable,
        key: bytes | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.task = task
        self.heldout = heldout
        self.backend = backend
        self.limit = limit
        self.timeout_s = timeout_s
        self.python = python
        self._key = key
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
            exit_code, problem, printed = self._run(index, log_path)
            try:
                self.store.put_file(log_key, log_path)
            except Exception:
                log.exception("could not store the eval log of submission %d", index)
        if printed is not None and exit_code == 0 and problem is None:
            result: ResultRecord | None = printed
        elif self._key is None:
            result = read_record(self.store, self.layout.submission_result(index), ResultRecord)
        else:
            result = None  # nothing the eval process reported: the store's copy is not trusted
        if result is None:
            error = problem or f"evaluation process exited with code {exit_code} without writing a result"
            failed = DispatchRecord.failed(index, error, exit_code, log_key)
            write_record(self.store, self.layout.submission_dispatch(index), failed)
            return ResultRecord.failure(index, self.task, error)
        if self._key is not None:
            seal_result(self.store, self.layout, index, result, self._key)
        return result

    def _run(self, index: int, log_path: Path) -> tuple[int | None, str | None, ResultRecord | None]:
        """(exit code, problem, printed result) of one eval process; the problem is None when it
        ran normally. Its stderr goes to `log_path`, its stdout (the result line) too, at the end."""
        if self._cancelled.is_set():
            return None, "evaluation cancelled: the run is ending", None
        try:
            box = submission_box(
                index,
                task=self.task,
                store_uri=self.store.uri,
                run_prefix=self.layout.prefix,
                heldout=self.heldout,
                python=self.python,
            )
        except Exception as exc:  # bad limits configuration, no cgroup and no rlimits, …
            log.exception("no sandbox for the evaluation of submission %d", index)
            return None, f"evaluation could not be contained: {exc}", None
        with box, log_path.open("wb") as out:
            out.write(f"{box.describe()}\n".encode())
            out.flush()
            stdout, problem, proc = self._contained(index, box, out)
            if proc is None:
                return None, problem, None
            if problem is None and proc.returncode != 0:
                problem = box.problem()
            out.write(_usage_line(box).encode())
            out.write(stdout or b"")
        code = proc.returncode
        if problem is None and self._cancelled.is_set() and code != 0:
            problem = "evaluation cancelled: the run is ending"
        return code, problem, _printed_result(stdout or b"")

    def _contained(
        self, index: int, box: EvalBox, out: IO[bytes]
    ) -> tuple[bytes | None, str | None, subprocess.Popen[bytes] | None]:
        """Run the eval process in `box`: (its stdout, the problem, the process; None: it never
        started). A time-out kills its process group; closing the box kills what is left."""
        try:
            proc = start_a2rl(
                self.command(index),
                stdout=subprocess.PIPE,
                stderr=out,
                python=self.python,
                # current_trace_env: the eval process's spans are children of "dispatch"
                env={**os.environ, **OFFLINE_ENV, "PYTHONUNBUFFERED": "1", **current_trace_env(), **box.env},
                wrapper=box.prefix,
                preexec_fn=box.preexec,
            )
        except OSError as exc:
            return None, f"evaluation process could not start: {exc}", None
        with self._lock:
            self._proc = proc
        problem: str | None = None
        try:
            stdout, _ = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc, KILL_GRACE_S)
            stdout, _ = proc.communicate()
            problem = f"evaluation timed out after {self.timeout_s:.0f} s"
        finally:
            with self._lock:
                self._proc = None
        return stdout, problem, proc

    def cancel(self) -> None:
        """Kill the running eval process (shutdown after the drain timeout); later calls fail fast."""
        self._cancelled.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            kill_group(proc, KILL_GRACE_S)


def _usage_line(box: EvalBox) -> str:
    used = box.usage()
    peak = "unknown" if used.peak_memory_bytes is None else f"{used.peak_memory_bytes / 2**20:.0f} MiB"
    tasks = "unknown" if used.peak_processes is None else str(used.peak_processes)
    return f"eval usage: peak memory {peak}, peak tasks {tasks}\n"


def _printed_result(stdout: bytes) -> ResultRecord | None:
    """The result the eval process printed (its last JSON object line), if any."""
    for line in reversed(stdout.decode(errors="replace").strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            try:
                return ResultRecord.from_json(value)
            except ValueError:
                return None
    return None
