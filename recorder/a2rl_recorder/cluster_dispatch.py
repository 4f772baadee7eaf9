"""Cluster mode: each submission becomes a `BenchSubmission`; the operator evaluates it.

`ClusterDispatcher.evaluate(index)` reads the submission's manifest from the store (the snapshot
is already there: the recorder waits for the spool before dispatching), creates the
BenchSubmission `<run>-<index:05d>` owned by the BenchRun, and polls it until the operator sets
a terminal `status.state` (Succeeded, Failed, Rejected). The operator's eval Job writes
`result.json`; the operator copies score and error into the status — the recorder only reads
them. Its ServiceAccount may create and get BenchSubmissions, never write their status.

The protocol with the operator:
- spec: `runName`, `index`, `modelPath`, `modelDigest`, `codeRevision`, `codeDigest`,
  `manifestUri` (the store URI of `submissions/<n>/manifest.json`), `identicalToBase`,
  `submittedAt`; labels `a2rl.dev/run-name`, `a2rl.dev/run-uid`, `a2rl.dev/submission-index`.
- status: `state` terminal → `score` (null on failure) and `error` are the result.

Both sides are the API models of `a2rl.api.benchsubmission`: the body is a `BenchSubmission`
built from the submission's `SubmissionManifest`, and results are read from a
`BenchSubmissionStatus` into a `ResultRecord`.

API server hiccups (connection errors, 5xx, 429) are retried with bounded backoff until the
evaluation timeout; a refusal (403, 422) becomes the submission's error at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from a2rl import constants as c
from a2rl.api.benchrun import ObjectMeta
from a2rl.api.benchsubmission import (
    BenchSubmission,
    BenchSubmissionSpec,
    BenchSubmissionStatus,
    SubmissionState,
    submission_name,
)
from a2rl.records.base import load_record
from a2rl.records.result import ResultRecord
from a2rl.records.submission import SubmissionManifest
from a2rl.records.times import iso_utc
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout

log = logging.getLogger(__name__)

TERMINAL_STATES = frozenset({SubmissionState.SUCCEEDED, SubmissionState.FAILED, SubmissionState.REJECTED})
DEFAULT_POLL_S = 1.0
MAX_RETRY_BACKOFF_S = 10.0
REQUEST_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds for one API call
RETRYABLE_STATUS = frozenset({0, 408, 429, 500, 502, 503, 504})


# --- pure: the object and the result ---------------------------------------------------------


def submission_labels(run_name: str, run_uid: str, index: int) -> dict[str, str]:
    return {
        c.LABEL_NAME: "benchsubmission",
        c.LABEL_INSTANCE: run_name,
        c.LABEL_PART_OF: c.PART_OF,
        c.LABEL_MANAGED_BY: c.MANAGED_BY,
        c.LABEL_COMPONENT: c.COMPONENT_RECORDER,
        c.LABEL_RUN_NAME: run_name,
        c.LABEL_RUN_UID: run_uid,
        c.LABEL_SUBMISSION_INDEX: str(index),
    }


def benchsubmission(
    *,
    run_name: str,
    namespace: str,
    run_uid: str,
    index: int,
    manifest: SubmissionManifest,
    manifest_uri: str,
) -> BenchSubmission:
    """The BenchSubmission for recorded submission `index` (`manifest`: its manifest.json).

    `ValueError` (a pydantic `ValidationError`) when the manifest lacks what the spec needs.
    """
    if manifest.model_path is None or manifest.model_digest is None or manifest.submitted_at is None:
        raise ValueError(f"{manifest_uri} lacks model_path, model_digest or submitted_at")
    spec = BenchSubmissionSpec(
        run_name=run_name,
        index=index,
        model_path=manifest.model_path,
        model_digest=manifest.model_digest,
        manifest_uri=manifest_uri,
        identical_to_base=manifest.identical_to_base,
        submitted_at=datetime.fromisoformat(manifest.submitted_at),
    )
    if manifest.code_revision is not None:
        spec.code_revision = manifest.code_revision
        spec.code_digest = manifest.code_digest
    metadata = ObjectMeta.model_validate(
        {
            "name": submission_name(run_name, index),
            "namespace": namespace,
            "labels": submission_labels(run_name, run_uid, index),
            # Owned by the BenchRun: deleted with it. No blockOwnerDeletion: that would need
            # update rights on benchruns/finalizers, which the recorder's Role does not grant.
            "ownerReferences": [
                {
                    "apiVersion": c.API_GROUP_VERSION,
                    "kind": c.BENCHRUN_KIND,
                    "name": run_name,
                    "uid": run_uid,
                    "controller": True,
                }
            ],
        }
    )
    return BenchSubmission(
        api_version=c.API_GROUP_VERSION, kind=c.BENCHSUBMISSION_KIND, metadata=metadata, spec=spec
    )


def benchsubmission_body(
    *,
    run_name: str,
    namespace: str,
    run_uid: str,
    index: int,
    manifest: SubmissionManifest | Mapping[str, Any],
    manifest_uri: str,
) -> dict[str, Any]:
    """`benchsubmission(…)` as the Kubernetes client sends it: `to_wire()` of the fields set
    (no empty `metadata.annotations`). A mapping manifest is validated first (test helpers)."""
    record = manifest if isinstance(manifest, SubmissionManifest) else SubmissionManifest.from_json(manifest)
    obj = benchsubmission(
        run_name=run_name,
        namespace=namespace,
        run_uid=run_uid,
        index=index,
        manifest=record,
        manifest_uri=manifest_uri,
    )
    return obj.to_wire(only_set=True)


#: The status fields a result is made of (by wire name); others (conditions, evalJob, fields a
#: newer operator adds) are not read, so they can never make a status unreadable.
_STATUS_FIELDS = ("state", "score", "error", "reason", "evaluatorVersion", "resultUri", "startedAt",
                  "finishedAt", "durationSeconds")  # fmt: skip


def result_from_status(index: int, task: str, obj: Mapping[str, Any]) -> ResultRecord | None:
    """The submission's result from its BenchSubmission (the API object as the client returns
    it), or None while it is not terminal."""
    raw = obj.get("status") or {}
    name = (obj.get("metadata") or {}).get("name")
    try:
        status = BenchSubmissionStatus.model_validate({k: raw[k] for k in _STATUS_FIELDS if k in raw})
    except ValidationError as exc:
        if raw.get("state") not in TERMINAL_STATES:
            return None
        log.warning("submission %d: unreadable BenchSubmission status: %s", index, exc)
        return ResultRecord.failure(index, task, f"the BenchSubmission status is not readable: {exc}")
    state = status.state
    if state not in TERMINAL_STATES:
        return None
    score, error = status.score, status.error
    if state == SubmissionState.SUCCEEDED and score is None:
        error = error or "the evaluation finished without a score"
    if state != SubmissionState.SUCCEEDED:
        score = None
        error = error or f"submission {state.lower()} by the operator"
    result = ResultRecord(index=index, task=task, score=score, error=error, state=state, submission=name)
    optional = {
        "reason": status.reason,
        "duration_seconds": status.duration_seconds,
        "evaluator_version": status.evaluator_version,
        "result_uri": status.result_uri,
        "started_at": iso_utc(status.started_at),
        "finished_at": iso_utc(status.finished_at),
    }
    return result.model_copy(update={k: v for k, v in optional.items() if v is not None})


# --- the Kubernetes side ---------------------------------------------------------------------


def api_client_from_env() -> Any:
    """An ApiClient from `$KUBECONFIG` when set, else the in-cluster ServiceAccount token."""
    import os

    from kubernetes import client, config

    if os.environ.get("KUBECONFIG"):
        return config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    configuration = client.Configuration()
    # try_refresh_token: the projected token rotates (expirationSeconds); reread it when it does.
    config.load_incluster_config(client_configuration=configuration, try_refresh_token=True)
    return client.ApiClient(configuration)


def _status_of(exc: BaseException) -> int | None:
    """HTTP status of an API error; 0 for a connection problem; None for anything else."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return int(exc.status or 0)
    import urllib3.exceptions

    if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
        return 0
    return None


def _reason(exc: BaseException) -> str:
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        import json

        try:
            message = json.loads(exc.body or "{}").get("message")
        except ValueError:
            message = None
        return f"{exc.status} {message or exc.reason}"
    return f"{type(exc).__name__}: {exc}"


class ClusterDispatcher:
    def __init__(
        self,
        store: ObjectStore,
        layout: RunLayout,
        *,
        api_client: Any,
        task: str,
        run_name: str,
        namespace: str,
        run_uid: str,
        timeout_s: float,
        poll_s: float = DEFAULT_POLL_S,
    ) -> None:
        from kubernetes import client

        self.store = store
        self.layout = layout
        self.api: Any = client.CustomObjectsApi(api_client)
        self.task = task
        self.run_name = run_name
        self.namespace = namespace
        self.run_uid = run_uid
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._cancelled = threading.Event()
        self._ending = threading.Event()  # set by cancel() too: it ends every wait for a result
        self._terminal: dict[int, ResultRecord] = {}  # terminal results never change
        self._lock = threading.Lock()

    # --- API calls ------------------------------------------------------------------------

    def _get(self, index: int) -> dict[str, Any]:
        obj: dict[str, Any] = self.api.get_namespaced_custom_object(
            c.API_GROUP,
            c.API_VERSION,
            self.namespace,
            c.BENCHSUBMISSION_PLURAL,
            submission_name(self.run_name, index),
            _request_timeout=REQUEST_TIMEOUT,
        )
        return obj

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = self.api.create_namespaced_custom_object(
            c.API_GROUP,
            c.API_VERSION,
            self.namespace,
            c.BENCHSUBMISSION_PLURAL,
            body,
            _request_timeout=REQUEST_TIMEOUT,
        )
        return obj

    def _retrying(self, what: str, call: Any, deadline: float) -> Any:
        """`call()`, retried with bounded backoff on connection errors and 5xx/429 until `deadline`."""
        backoff = self.poll_s
        while True:
            try:
                return call()
            except Exception as exc:
                status = _status_of(exc)
                if status not in RETRYABLE_STATUS or time.monotonic() + backoff > deadline:
                    raise
                if self._cancelled.is_set():
                    raise
                log.warning(
                    "%s: API server not answering (%s); retrying in %.1f s", what, _reason(exc), backoff
                )
                self._cancelled.wait(backoff)
                backoff = min(MAX_RETRY_BACKOFF_S, backoff * 2)

    # --- EvaluationDispatcher -------------------------------------------------------------

    def submission_body(self, index: int) -> dict[str, Any]:
        """The BenchSubmission of `index` as the Kubernetes client sends it."""
        manifest = load_record(self.store, self.layout.submission_manifest(index), SubmissionManifest)
        return benchsubmission_body(
            run_name=self.run_name,
            namespace=self.namespace,
            run_uid=self.run_uid,
            index=index,
            manifest=manifest,
            manifest_uri=self.store.url_for(self.layout.submission_manifest(index)),
        )

    def create(self, index: int, deadline: float | None = None) -> dict[str, Any]:
        """Create the BenchSubmission of `index` (idempotent: an existing one with the same
        model digest is adopted, e.g. after a recorder restart)."""
        from kubernetes.client.exceptions import ApiException

        body = self.submission_body(index)
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout_s
        name = body["metadata"]["name"]
        try:
            obj: dict[str, Any] = self._retrying(f"create {name}", lambda: self._create(body), deadline)
        except ApiException as exc:
            if exc.status != 409:
                raise
            obj = self._retrying(f"get {name}", lambda: self._get(index), deadline)
            if (obj.get("spec") or {}).get("modelDigest") != body["spec"]["modelDigest"]:
                raise RuntimeError(f"BenchSubmission {name} already exists for another model") from exc
        log.info("submission %d: BenchSubmission %s/%s created", index, self.namespace, name)
        return obj

    def evaluate(self, index: int) -> ResultRecord:
        deadline = time.monotonic() + self.timeout_s
        name = submission_name(self.run_name, index)
        try:
            self.create(index, deadline)
        except Exception as exc:
            log.exception("submission %d: could not create BenchSubmission %s", index, name)
            return ResultRecord.failure(
                index, self.task, f"could not create BenchSubmission {name}: {_reason(exc)}"
            )
        while True:
            try:
                obj = self._get(index)
            except Exception as exc:
                status = _status_of(exc)
                if status == 404:
                    return ResultRecord.failure(index, self.task, f"BenchSubmission {name} was deleted")
                if status not in RETRYABLE_STATUS:
                    return ResultRecord.failure(
                        index, self.task, f"cannot read BenchSubmission {name}: {_reason(exc)}"
                    )
                log.warning("submission %d: reading %s failed (%s); retrying", index, name, _reason(exc))
            else:
                result = result_from_status(index, self.task, obj)
                if result is not None:
                    with self._lock:
                        self._terminal[index] = result
                    return result
            if time.monotonic() >= deadline:
                return ResultRecord.failure(
                    index, self.task, f"no evaluation result for {name} within {self.timeout_s:.0f} s"
                )
            if self._ending.wait(self.poll_s):
                return ResultRecord.failure(
                    index,
                    self.task,
                    "the run is ending; the evaluation goes on in the cluster and its score will be in "
                    "the BenchRun status",
                )

    def result(self, index: int) -> ResultRecord | None:
        """The terminal result of submission `index` from its BenchSubmission, or None (not
        terminal, absent, or the API server unreachable): the score as the operator recorded it."""
        with self._lock:
            cached = self._terminal.get(index)
        if cached is not None:
            return cached
        try:
            obj = self._get(index)
        except Exception:
            return None
        result = result_from_status(index, self.task, obj)
        if result is not None:
            with self._lock:
                self._terminal[index] = result
        return result

    def stop_waiting(self) -> None:
        """The run is ending (the recorder's drain): a submission returns once its BenchSubmission
        exists; its evaluation goes on in the cluster and the operator records the score."""
        self._ending.set()

    def cancel(self) -> None:
        """Give up (the drain's deadline): creates are not retried any more, waits end."""
        self._cancelled.set()
        self._ending.set()
