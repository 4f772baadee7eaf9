"""The baseline (submission 0): the base model's score, cached across runs.

Cache key: `baselines/<task>/<model digest>/<evaluator version>.json` (`a2rl.store.layout.baseline_key`);
an evaluation limited to the first N items is cached under `<evaluator version>+limitN` so a
smoke-test baseline never stands in for a full one. Failed evaluations are not cached. An entry
is a `BaselineEntry` (`a2rl.records.baseline`); submission 0's manifest a `SubmissionManifest`.
"""

from __future__ import annotations

from pathlib import Path

from a2rl_tasks.base import Task

from a2rl.constants import BASELINE_INDEX
from a2rl.records.base import read_record, write_record
from a2rl.records.baseline import BaselineEntry
from a2rl.records.result import ResultRecord
from a2rl.records.submission import SubmissionManifest
from a2rl.records.times import utc_now
from a2rl.records.tree import TreeRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import TreeManifest, hash_tree
from a2rl.store.layout import RunLayout, baseline_key
from a2rl_grader.evaluate import EvalOptions, check_heldout, evaluate_model_dir, write_result

WS_MODELS_PREFIX = "models"


def cache_version(task: Task, limit: int | None) -> str:
    return task.evaluator_version if limit is None else f"{task.evaluator_version}+limit{limit}"


def baseline_cache_key(task: Task, model_digest: str, limit: int | None) -> str:
    return baseline_key(task.name, model_digest, cache_version(task, limit))


def baseline_submission_manifest(tree: TreeRecord, digest: str, base_name: str) -> SubmissionManifest:
    """Submission 0's manifest: the base model (`models/<base_name>` in the workspace)."""
    return SubmissionManifest(
        index=BASELINE_INDEX,
        submitted_at=utc_now(),
        model_path=f"{WS_MODELS_PREFIX}/{base_name}",
        model=tree,
        model_digest=digest,
        base_model_digest=digest,
        identical_to_base=True,
        code_revision=None,
        code_digest=None,
        request={},
    )


def read_baseline_entry(store: ObjectStore, key: str) -> BaselineEntry | None:
    """The cache entry at `key`; None when absent, unreadable, or without a score."""
    entry = read_record(store, key, BaselineEntry)
    return entry if entry is not None and entry.score is not None else None


def evaluate_baseline(
    store: ObjectStore,
    layout: RunLayout,
    task: Task,
    model_dir: Path,
    heldout_dir: Path,
    *,
    options: EvalOptions,
    base_name: str | None = None,
) -> ResultRecord:
    """Score the base model (from the cache when possible) and record it as submission 0.

    Returns the run's result.json content plus `cached`.
    """
    check_heldout(heldout_dir)
    tree: TreeManifest = hash_tree(model_dir)
    digest = tree.digest
    key = baseline_cache_key(task, digest, options.limit)
    write_record(
        store,
        layout.submission_manifest(BASELINE_INDEX),
        baseline_submission_manifest(TreeRecord.of(tree), digest, base_name or model_dir.name),
    )
    entry = read_record(store, key, BaselineEntry) if store.exists(key) else None
    if entry is not None:
        details = entry.details
        result = entry.result(digest)
    else:
        fields, details = evaluate_model_dir(task, model_dir, heldout_dir, options)
        result = fields.model_copy(update={"index": BASELINE_INDEX, "model_digest": digest, "cached": False})
        if result.error is None:
            write_record(store, key, BaselineEntry.of(result, details))
    write_result(store, layout, BASELINE_INDEX, result, details)
    return result
