"""The baseline (submission 0): the base model's score, cached across runs.

Cache key: `baselines/<task>/<model digest>/<evaluator version>-data-<held-out digest>.json`
(`a2rl.store.layout.baseline_data_key`; the operator's, with the digest of the held-out artifact
staged in the store: `cluster_baseline_cache_key`), and in local mode `…-signer-<key
fingerprint>.json` (machines sharing a store keep their own entries). The evaluator version names
the protocol (`gsm8k-2+reference`) and the held-out digest the data, so another protocol, other
held-out data (source, seed) or a changed staging never reuse a stale baseline; an evaluation
limited to the first N items is cached under `<evaluator version>+limitN` so a smoke-test
baseline never stands in for a full one. Failed evaluations are not cached. An entry is a
`BaselineEntry` (`a2rl.records.baseline`): the score, never the per-item details (gold answers).
In local mode an entry carries a MAC under a machine-local key (`a2rl.local_keys`); an entry
whose MAC is missing or wrong (a run poisoned the cache) is not used: the base model is evaluated
again, the entry rewritten, and the result says why (`cache_problem`). Submission 0's manifest
is a `SubmissionManifest`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from a2rl_tasks.artifacts import MANIFEST, heldout_key
from a2rl_tasks.base import Task

from a2rl.constants import BASELINE_INDEX
from a2rl.integrity import fingerprint
from a2rl.records.artifact import ArtifactManifest
from a2rl.records.base import read_record, write_record
from a2rl.records.baseline import BaselineEntry
from a2rl.records.result import ResultRecord
from a2rl.records.submission import SubmissionManifest
from a2rl.records.times import utc_now
from a2rl.records.tree import TreeRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import TreeManifest, hash_tree
from a2rl.store.layout import RunLayout, baseline_data_key, baseline_key
from a2rl_grader.evaluate import EvalOptions, check_heldout, evaluate_model_dir, write_result

WS_MODELS_PREFIX = "models"

log = logging.getLogger(__name__)


def cache_version(task: Task, limit: int | None) -> str:
    return task.evaluator_version if limit is None else f"{task.evaluator_version}+limit{limit}"


def baseline_cache_key(
    task: Task,
    model_digest: str,
    limit: int | None,
    heldout_digest: str | None = None,
    signer: str | None = None,
) -> str:
    """The cache key: with `heldout_digest` the held-out data's digest is in it, and in local
    mode `signer` too (the fingerprint of the key that signs the entry). Without a digest (held-out
    data the operator cannot read) only the evaluator version keys it."""
    if heldout_digest is None:
        return baseline_key(task.name, model_digest, cache_version(task, limit))
    return baseline_data_key(task.name, model_digest, cache_version(task, limit), heldout_digest, signer)


def stored_heldout_digest(store: ObjectStore, task: Task, seed: int) -> str | None:
    """The digest of `task`'s held-out artifact staged in `store` for `seed` (its manifest's),
    None when it is not staged there (e.g. the held-out data come from a volume)."""
    key = f"{heldout_key(task, seed)}/{MANIFEST}"
    manifest = read_record(store, key, ArtifactManifest) if store.exists(key) else None
    return None if manifest is None else manifest.digest


def cluster_baseline_cache_key(
    task: Task, model_digest: str, limit: int | None, store: ObjectStore, seed: int
) -> str:
    """The operator's cache key: keyed by the held-out artifact staged in `store` as well."""
    return baseline_cache_key(task, model_digest, limit, stored_heldout_digest(store, task, seed))


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
    cache_mac_key: bytes | None = None,
) -> ResultRecord:
    """Score the base model (from the cache when possible) and record it as submission 0.

    Returns the run's result.json content plus `cached` (and `cache_problem` when a cache entry
    failed its integrity check). With `cache_mac_key` (local mode) the cache is keyed by the
    held-out data's digest too, and entries are signed and checked with it.
    """
    check_heldout(heldout_dir)
    tree: TreeManifest = hash_tree(model_dir)
    digest = tree.digest
    if cache_mac_key is None:
        key = baseline_cache_key(task, digest, options.limit)
    else:
        heldout_digest = hash_tree(heldout_dir).digest
        key = baseline_cache_key(task, digest, options.limit, heldout_digest, fingerprint(cache_mac_key))
    write_record(
        store,
        layout.submission_manifest(BASELINE_INDEX),
        baseline_submission_manifest(TreeRecord.of(tree), digest, base_name or model_dir.name),
    )
    _store_config(store, layout, tree, model_dir)
    entry = read_record(store, key, BaselineEntry) if store.exists(key) else None
    problem: str | None = None
    if entry is not None and cache_mac_key is not None and not entry.verified(cache_mac_key, key):
        problem = f"the baseline cache entry {store.url_for(key)} failed its integrity check"
        log.warning("%s: not used; evaluating the base model again", problem)
        entry = None
    if entry is not None and entry.score is not None:
        details: list[dict[str, Any]] = []  # the cache keeps no per-item details
        result = entry.result(digest)
    else:
        fields, details = evaluate_model_dir(task, model_dir, heldout_dir, options)
        update: dict[str, Any] = {"index": BASELINE_INDEX, "model_digest": digest, "cached": False}
        if problem is not None:
            update["cache_problem"] = problem
        result = fields.model_copy(update=update)
        if result.error is None:
            fresh = BaselineEntry.of(result)
            write_record(store, key, fresh if cache_mac_key is None else fresh.signed(cache_mac_key, key))
    write_result(store, layout, BASELINE_INDEX, result, details)
    return result


def _store_config(store: ObjectStore, layout: RunLayout, tree: TreeManifest, model_dir: Path) -> None:
    """The base model's config.json blob: each submission's evaluation derives its parameter
    bound from it (`a2rl_grader.evaluate.derive_bound`)."""
    entry = next((e for e in tree.entries if e.path == "config.json"), None)
    if entry is not None and not store.exists(layout.blob(entry.sha256)):
        store.put_file(layout.blob(entry.sha256), model_dir / "config.json")
