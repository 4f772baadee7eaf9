"""The eval process: evaluate one submission (or the baseline) and write its result to the store.

Runs in a fresh process (`a2rl eval …`, also the cluster eval Job's command) so a model that
crashes or leaks memory cannot take the recorder down. A model that cannot be loaded is a
*result* (`"error"`, `"score": null`), not a crash: exit 0 whenever result.json was written.
Results are `ResultRecord`s (`a2rl.records.result`); the submission is read from its
`SubmissionManifest`.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl_tasks.base import EvalResult, Task

from a2rl.constants import BASELINE_INDEX
from a2rl.errors import A2rlError, NotFoundError
from a2rl.records.base import load_record, read_record, write_record
from a2rl.records.result import ResultRecord
from a2rl.records.submission import SubmissionManifest
from a2rl.records.times import utc_now
from a2rl.store.base import ObjectStore
from a2rl.store.cas import restore_tree
from a2rl.store.layout import RunLayout
from a2rl.tracing import span
from a2rl_grader.bound import (
    MAX_CONFIG_BYTES,
    OPAQUE_WEIGHT_SUFFIXES,
    ParameterBound,
    SubmissionRefusedError,
    base_parameters,
    check_parameter_bound,
)

MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class EvalOptions:
    backend: str = "auto"
    limit: int | None = None
    batch_size: int | None = None
    #: Submissions estimated above this many parameters are refused before loading (None: the
    #: bound derived from the run's base model, `derive_bound`).
    max_parameters: int | None = None


def _short(exc: BaseException) -> str:
    # lazy: torch and transformers (or vLLM), only when a model is evaluated
    from a2rl_grader.inference.loading import ModelLoadError

    # Our own load errors are already worded for the agent; others keep their type for context.
    text = str(exc).strip() if isinstance(exc, ModelLoadError) else f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def evaluate_model_dir(
    task: Task, model_dir: Path, heldout_dir: Path, options: EvalOptions
) -> tuple[ResultRecord, list[dict[str, Any]]]:
    """(result without index/model_digest, per-item details) for the model in `model_dir`.

    Loading failures and evaluation failures become an `error` field with a null score.
    """
    # lazy: torch and transformers (or vLLM), only when a model is evaluated
    from a2rl_grader.inference.select import resolve_backend_name, select_backend
    from a2rl_grader.traced import traced_evaluate

    backend_name = resolve_backend_name(options.backend)
    t0 = time.monotonic()
    fields = ResultRecord(
        task=task.name,
        score=None,
        error=None,
        evaluator_version=task.evaluator_version,
        backend=backend_name,
        n=0,
        correct=0,
        metrics={},
        started_at=utc_now(),
    )
    details: list[dict[str, Any]] = []
    batch_size = options.batch_size or task.default_generation_batch()
    try:
        with span("load_model", {"a2rl.eval.backend": backend_name}):
            backend = select_backend(backend_name, model_dir, batch_size=batch_size)
    except A2rlError:
        raise
    except Exception as exc:
        fields.error = f"model could not be loaded: {_short(exc)}"
    else:
        try:
            result: EvalResult = traced_evaluate(task, backend, heldout_dir, limit=options.limit)
        except A2rlError:
            raise
        except Exception as exc:
            traceback.print_exc()
            fields.error = f"evaluation failed: {_short(exc)}"
        else:
            fields.score = round(float(result.score), 4)
            fields.n = result.n
            fields.correct = result.correct
            fields.metrics = {k: round(float(v), 4) for k, v in result.metrics.items()}
            fields.evaluator_version = result.evaluator_version
            details = result.details
        finally:
            backend.close()
    fields.finished_at = utc_now()
    fields.duration_s = round(time.monotonic() - t0, 3)
    return fields, details


def details_bytes(details: list[dict[str, Any]]) -> bytes:
    return "".join(
        json.dumps(d, ensure_ascii=False, sort_keys=True, default=str) + "\n" for d in details
    ).encode()


def write_result(
    store: ObjectStore,
    layout: RunLayout,
    index: int,
    result: ResultRecord,
    details: list[dict[str, Any]],
) -> None:
    """Write submission `index`'s details.jsonl, then its result.json."""
    # details first: result.json is what readers wait for, so it must come last.
    store.put_bytes(layout.submission_details(index), details_bytes(details))
    write_record(store, layout.submission_result(index), result)


def check_heldout(heldout_dir: Path) -> None:
    if not heldout_dir.is_dir():
        raise A2rlError(f"held-out data directory not found: {heldout_dir}")


def evaluate_submission(
    store: ObjectStore,
    layout: RunLayout,
    index: int,
    task: Task,
    heldout_dir: Path,
    *,
    options: EvalOptions,
) -> ResultRecord:
    """Restore submission `index`'s model into a fresh temp dir, evaluate it, write the result."""

    check_heldout(heldout_dir)
    key = layout.submission_manifest(index)
    manifest = load_record(store, key, SubmissionManifest)
    if manifest.model is None:
        raise NotFoundError(f"{store.url_for(key)} names no model snapshot")
    tree = manifest.model.manifest()
    model_digest = manifest.model_digest or tree.digest
    workdir = Path(tempfile.mkdtemp(prefix=f"a2rl-eval-{index:05d}-"))
    try:
        model_dir = workdir / "model"
        started_at = utc_now()
        try:
            with span(
                "restore_snapshot",
                {"a2rl.model.files": len(tree.entries), "a2rl.model.bytes": tree.total_bytes},
            ):
                restore_tree(store, layout, tree, model_dir)
        except Exception as exc:
            fields = _error_fields(task, options, f"model snapshot could not be restored: {_short(exc)}")
            fields.started_at = started_at
            details: list[dict[str, Any]] = []
        else:
            refusal = _refusal(model_dir, options.max_parameters, store, layout)
            if refusal is not None:  # before torch is even imported: nothing is allocated
                fields, details = _refused_fields(task, options, refusal), []
                fields.started_at = started_at
            else:
                fields, details = evaluate_model_dir(task, model_dir, heldout_dir, options)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = fields.model_copy(update={"index": index, "model_digest": model_digest})
    write_result(store, layout, index, result, details)
    return result


def derive_bound(store: ObjectStore, layout: RunLayout) -> ParameterBound | None:
    """The run's parameter bound, from its base model (submission 0): its config.json blob when
    stored (`evaluate_baseline` stores it; the cluster's set-up stores every file), else the size
    of its weight files. None when the run has no submission 0."""
    manifest = read_record(store, layout.submission_manifest(BASELINE_INDEX), SubmissionManifest)
    if manifest is None or manifest.model is None:
        return None
    files = manifest.model.files
    weight_bytes = sum(f.size for f in files if f.path.endswith((".safetensors", *OPAQUE_WEIGHT_SUFFIXES)))
    config: dict[str, Any] = {}
    entry = next((f for f in files if f.path == "config.json"), None)
    if entry is not None and entry.size <= MAX_CONFIG_BYTES and store.exists(layout.blob(entry.sha256)):
        try:
            loaded = json.loads(store.get_bytes(layout.blob(entry.sha256)))
        except ValueError:
            loaded = None
        config = loaded if isinstance(loaded, dict) else {}
    return ParameterBound(base_parameters(config, weight_bytes))


def _refusal(
    model_dir: Path, max_parameters: int | None, store: ObjectStore, layout: RunLayout
) -> str | None:
    """The one-line reason to refuse the submission in `model_dir` before loading it, if any."""
    bound = (
        ParameterBound.fixed(max_parameters, "set for this evaluation")
        if max_parameters is not None
        else derive_bound(store, layout)
    )
    if bound is None:
        print("no base model recorded (submission 0): no parameter bound", file=sys.stderr)
        return None
    try:
        estimate = check_parameter_bound(model_dir, bound)
    except SubmissionRefusedError as exc:
        return str(exc)
    print(f"parameters: ~{estimate.total} estimated, bound {bound.limit}", file=sys.stderr)
    return None


def _refused_fields(task: Task, options: EvalOptions, reason: str) -> ResultRecord:
    # no backend resolution: "auto" would import torch to look for a GPU
    now = utc_now()
    return ResultRecord(
        task=task.name,
        score=None,
        error=reason,
        evaluator_version=task.evaluator_version,
        backend=options.backend,
        n=0,
        correct=0,
        metrics={},
        started_at=now,
        finished_at=now,
        duration_s=0.0,
    )


def _error_fields(task: Task, options: EvalOptions, error: str) -> ResultRecord:
    # lazy: torch and transformers (or vLLM), only when a model is evaluated
    from a2rl_grader.inference.select import resolve_backend_name

    now = utc_now()
    return ResultRecord(
        task=task.name,
        score=None,
        error=error,
        evaluator_version=task.evaluator_version,
        backend=resolve_backend_name(options.backend),
        n=0,
        correct=0,
        metrics={},
        started_at=now,
        finished_at=now,
        duration_s=0.0,
    )
