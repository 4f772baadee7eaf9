"""`Recorder`: the grading API's behaviour, independent of HTTP.

A submit is: checks (closing, deadline, cap, path) → snapshot of the model and of `code/` →
a race-free submission number and `submissions/<n>/manifest.json` → one evaluation at a time
per run (a lock: evaluations share the machine with the agent's training, and the reference
serialises them too) → the response, with best/total derived from the store.
Every public method returns `(HTTP status, JSON body)`.

When the store is unreachable the snapshot is spooled (`a2rl_recorder.spool`) and the submit
waits up to `store_retry_timeout_s` for it to reach the store before dispatching. Past that the
agent gets a 503 naming its submission number; the submission stays recorded and is dispatched
in the background as soon as the store is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from a2rl.constants import BASELINE_INDEX
from a2rl.records.base import write_record
from a2rl.records.dispatch import DispatchRecord
from a2rl.records.result import ResultRecord, seal_result
from a2rl.records.submission import SnapshotInfo, SubmissionManifest
from a2rl.records.times import iso_utc
from a2rl.records.tree import TreeRecord
from a2rl.scores import improvement
from a2rl.store.base import ObjectStore
from a2rl.store.cas import DigestCache, UploadBudget
from a2rl.store.layout import RunLayout
from a2rl.tracing import ATTR_SUBMISSION_INDEX, annotate, span
from a2rl.workspace import update_run_meta
from a2rl_recorder.config import RecorderConfig
from a2rl_recorder.dispatch import EvaluationDispatcher
from a2rl_recorder.snapshots import CodeSnapshotter
from a2rl_recorder.spool import SpoolingStore
from a2rl_recorder.state import RunState
from a2rl_recorder.submit import SubmitRejectedError, snapshot_model, validate_model_path

log = logging.getLogger(__name__)

Reply = tuple[int, dict[str, Any] | list[dict[str, Any]]]


class Recorder:
    def __init__(
        self,
        config: RecorderConfig,
        store: ObjectStore,
        dispatcher: EvaluationDispatcher,
        *,
        clock: Any = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.dispatcher = dispatcher
        self.clock = clock
        self.layout = RunLayout.from_prefix(config.run_prefix)
        self.known: set[str] = set()
        self.digests = DigestCache()  # unchanged files are not re-hashed at the next snapshot
        # New blob bytes this recorder's submissions and code revisions may still store: the
        # configured cap, at most a fraction of the store's free space now.
        self.upload_budget = UploadBudget.for_store(store, config.max_run_stored_bytes)
        self.code = CodeSnapshotter(
            store,
            self.layout,
            config.code_dir,
            max_file_bytes=config.code_max_file_bytes,
            known=self.known,
            digests=self.digests,
            budget=self.upload_budget,
        )
        self.state = RunState(store, self.layout, getattr(dispatcher, "result", None), key=config.run_key)
        self._alloc_lock = threading.Lock()
        self._eval_lock = threading.Lock()
        self._busy = threading.Condition()
        self._in_flight = 0
        self._closed = False
        used = [i for i in self.state.indices() if i != BASELINE_INDEX]
        self._next_index = max(used, default=0) + 1
        self._allocated = len(used)
        self._last_submit_time: float | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def close_submissions(self) -> None:
        """From now on /submit answers 503; submissions already accepted run to the end."""
        with self._busy:
            self._closed = True

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no submission is in flight; False if `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._busy:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._busy.wait(left)
        return True

    @contextmanager
    def _in_flight_guard(self) -> Iterator[bool]:
        with self._busy:
            admitted = not self._closed
            if admitted:
                self._in_flight += 1
        try:
            yield admitted
        finally:
            if admitted:
                with self._busy:
                    self._in_flight -= 1
                    self._busy.notify_all()

    # --- endpoints ----------------------------------------------------------------------

    def health(self) -> Reply:
        with self._busy:
            accepting = not self._closed
        return 200, {
            "status": "ok",
            "task": self.config.task,
            "workspace": str(self.config.workspace),
            "accepting_submissions": accepting and self.clock() < self.config.deadline,
        }

    def time_info(self) -> Reply:
        now = self.clock()
        elapsed = max(0.0, now - self.config.run_start)
        return 200, {
            "start_time": self.config.run_start,
            "timeout_s": self.config.timeout_s,
            "elapsed": round(elapsed, 3),
            "remaining": round(max(0.0, self.config.timeout_s - elapsed), 3),
            "deadline": iso_utc(self.config.deadline),
            "now": now,
            "last_submit_time": self._last_submit_time,
        }

    def submissions(self) -> Reply:
        return 200, [
            {
                "submission_id": r.index,
                "submitted_at": r.submitted_at,
                "score": r.score,
                "error": r.error,
                "model_digest": r.model_digest,
                "code_revision": r.code_revision,
            }
            for r in self.state.records()
            if r.index != BASELINE_INDEX
        ]

    def submit(self, body: Any) -> Reply:
        t0 = time.monotonic()
        with self._in_flight_guard() as admitted:
            if not admitted:
                return 503, {"error": "the run is ending: submissions are closed"}
            try:
                with span("submission"):
                    return self._submit(body, t0)
            except SubmitRejectedError as exc:
                return exc.status, {"error": str(exc)}

    # --- the submit pipeline ------------------------------------------------------------

    def _check_open(self, *, deadline: bool = True) -> None:
        if deadline and self.clock() >= self.config.deadline:
            raise SubmitRejectedError(
                403,
                f"the time budget is used up (deadline {iso_utc(self.config.deadline)}): "
                "submissions are closed",
            )
        cap = self.config.max_submissions
        if cap is not None and self._allocated >= cap:
            raise SubmitRejectedError(429, f"maximum number of submissions reached ({cap})")

    def _submit(self, body: Any, t0: float) -> Reply:
        if not isinstance(body, dict):
            raise SubmitRejectedError(
                400, 'request body must be a JSON object like {"model_path": "output/v1"}'
            )
        self._check_open()
        candidate = validate_model_path(
            self.config.workspace, body.get("model_path"), max_bytes=self.config.max_model_bytes
        )
        # The files checked, read through no-follow descriptors, and only before the deadline.
        with candidate.tree, span("snapshot_model"):
            model, stats = snapshot_model(
                self.store,
                self.layout,
                candidate,
                known=self.known,
                digests=self.digests,
                read_deadline=self.config.deadline,
                clock=self.clock,
                budget=self.upload_budget,
            )
        with span("snapshot_code"):
            revision = self.code.snapshot("submit")
        base_digest = self.config.base_model_digest
        identical = base_digest is not None and model.digest == base_digest

        with self._alloc_lock:
            # The cap again (a concurrent submit may have taken the last slot); not the deadline:
            # a request that arrived in time is recorded even if its snapshot ended after it.
            self._check_open(deadline=False)
            index = self._next_index
            self._next_index += 1
            self._allocated += 1
            submitted = self.clock()
            write_record(
                self.store,
                self.layout.submission_manifest(index),
                SubmissionManifest(
                    index=index,
                    submitted_at=iso_utc(submitted),
                    model_path=candidate.rel_path,
                    model=TreeRecord.of(model),
                    model_digest=model.digest,
                    base_model_digest=base_digest,
                    identical_to_base=identical,
                    code_revision=revision.index if revision else None,
                    code_digest=revision.digest if revision else None,
                    request=body,
                    snapshot=SnapshotInfo(
                        files_uploaded=stats.files_uploaded,
                        bytes_uploaded=stats.bytes_uploaded,
                        seconds=stats.seconds,
                    ),
                ),
            )
            mark = self._spool_mark()
        self._last_submit_time = submitted
        try:
            update_run_meta(self.config.workspace, last_submit_time=submitted)
        except OSError:
            log.warning("could not update run_meta.json in the workspace")
        log.info("submission %d: %s (%s)", index, candidate.rel_path, model.digest[:12])
        annotate({ATTR_SUBMISSION_INDEX: index, "a2rl.model.digest": model.digest})

        if not self._wait_stored(mark):
            self._dispatch_later(index, identical, model.digest, mark)
            timeout = self.config.store_retry_timeout_s
            return 503, {
                "error": (
                    f"the object store has been unreachable for {timeout:.0f} s: submission {index} is "
                    "recorded on the grading server and will be evaluated once the store is back; "
                    "see GET /submissions for its score"
                ),
                "submission_id": index,
                "elapsed_seconds": round(time.monotonic() - t0, 3),
            }
        with span("dispatch", {ATTR_SUBMISSION_INDEX: index}):
            result = self._result_for(index, identical, model.digest)
        return 200, self._reply(index, result, t0)

    def _reply(self, index: int, result: ResultRecord, t0: float) -> dict[str, Any]:
        """The agent's answer to a submit that was evaluated (an HTTP reply, not a store document)."""
        summary = self.state.summary()
        score = result.score
        reply: dict[str, Any] = {
            "submission_id": index,
            "score": score,
            "baseline_score": summary.baseline_score,
            "improvement": improvement(score, summary.baseline_score),
            "best": (
                {"submission_id": summary.best.index, "score": summary.best.score} if summary.best else None
            ),
            "total_submissions": summary.total_submissions,
            "elapsed_seconds": round(time.monotonic() - t0, 3),
        }
        if result.error:
            reply["error"] = result.error
        return reply

    def _result_for(self, index: int, identical: bool, digest: str) -> ResultRecord:
        key = self.config.run_key
        if identical:
            baseline = self.state.baseline_record()  # checked against its seal when there is a key
            if baseline is not None and not baseline.tampered:
                # Same bytes as the base model: its score is the baseline's; no need to evaluate.
                copied = baseline.model_copy(
                    update={"index": index, "model_digest": digest, "copied_from_baseline": True}
                )
                if key is not None:  # the seal first: no reader sees the result unsealed
                    seal_result(self.store, self.layout, index, copied, key)
                write_record(self.store, self.layout.submission_result(index), copied)
                return copied
        with self._eval_lock:
            self.state.evaluating.add(index)  # its result.json exists before its seal does
            try:
                return self.dispatcher.evaluate(index)
            except Exception as exc:  # the dispatcher's own bug must not take the recorder down
                log.exception("evaluation of submission %d failed", index)
                error = f"evaluation failed: {type(exc).__name__}"
                failed = DispatchRecord.failed(index, error, None, None)
                write_record(self.store, self.layout.submission_dispatch(index), failed)
                return ResultRecord.failure(index, self.config.task, error)
            finally:
                self.state.evaluating.discard(index)

    # --- an unreachable store -----------------------------------------------------------

    def _spool_mark(self) -> int | None:
        return self.store.mark() if isinstance(self.store, SpoolingStore) else None

    def _wait_stored(self, mark: int | None) -> bool:
        """Wait (bounded) until every write up to `mark` reached the store; True when it did."""
        if mark is None or not isinstance(self.store, SpoolingStore):
            return True
        if self.store.wait_flushed(mark, 0):
            return True
        log.warning("store unreachable: submission waits up to %.0f s for the spool to drain",
                    self.config.store_retry_timeout_s)  # fmt: skip
        return self.store.wait_flushed(mark, self.config.store_retry_timeout_s)

    def _dispatch_later(self, index: int, identical: bool, digest: str, mark: int | None) -> None:
        """After a 503: dispatch submission `index` once its snapshot is in the store.

        Counts as in flight, so shutdown waits for it within the drain timeout; a recorder that
        exits first leaves the snapshot in the spool directory (see docs/recorder.md).
        """
        with self._busy:
            self._in_flight += 1

        def run() -> None:
            try:
                if isinstance(self.store, SpoolingStore) and mark is not None:
                    self.store.wait_flushed(mark, None)
                log.info("submission %d: snapshot stored after the outage; dispatching", index)
                self._result_for(index, identical, digest)
            except Exception:
                log.exception("submission %d: late dispatch failed", index)
            finally:
                with self._busy:
                    self._in_flight -= 1
                    self._busy.notify_all()

        threading.Thread(target=run, name=f"a2rl-late-{index}", daemon=True).start()
