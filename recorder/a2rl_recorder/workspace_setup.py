"""`a2rl recorder setup`: prepare a cluster run's workspace volume before the agent starts.

The first init container of the workspace pod runs it, with the recorder's image, environment
and credentials (it runs before the recorder sidecar, and long before the agent). It does in the
pod what `a2rl run` does on one machine (`a2rl_runner.run.prepare`):

1. resolve the base model (`spec.baseModel.source`: `builtin:tiny`, a directory in the image or a
   mounted volume, or `store:<name>` pushed to the store with `a2rl models push`; nothing is
   fetched from a model hub);
2. fetch the task's *train* artifact from the store (staged by `a2rl data stage TASK --seed S
   --store URI`) and verify every checksum — the held-out artifact is never fetched here;
3. write the workspace with the local runner's builder (`a2rl.workspace.build_workspace`) into
   the empty volume: `models/<name>/` and `data/` read-only, `code/`, `output/`,
   `description.md`, `instructions.md`, `run_meta.json` (the recorder sets the clock when it
   starts);
4. snapshot the base model into the store (content-addressed) and record it as submission 0;
5. create the BenchSubmission `<run>-00000`: the operator scores the baseline — from the cache
   per (task, model digest, evaluator version), else in an eval Job — while the agent works.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from a2rl_grader.baseline import baseline_submission_manifest
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import fetch_artifact, store_prefix
from a2rl_tasks.staging import TRAIN

from a2rl.constants import BASELINE_INDEX
from a2rl.contracts.setup import SetupParams
from a2rl.errors import A2rlError, NotFoundError
from a2rl.models.library import source_layouts
from a2rl.models.resolve import resolve_base_model
from a2rl.records.artifact import ArtifactManifest
from a2rl.records.base import read_record, write_record
from a2rl.records.submission import SubmissionManifest
from a2rl.records.tree import TreeRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import snapshot_tree
from a2rl.store.layout import RunLayout
from a2rl.tracing import ATTR_SUBMISSION_INDEX, span
from a2rl.workspace import WorkspaceRules, build_workspace, sanitize_model_name
from a2rl_recorder.config import RecorderConfig

Say = Callable[[str], None]


def recorded_base_digest(store: ObjectStore, layout: RunLayout) -> str | None:
    """The base model's tree digest from submission 0's manifest (None before setup wrote it, or
    when it is unreadable)."""
    manifest = read_record(store, layout.submission_manifest(BASELINE_INDEX), SubmissionManifest)
    return None if manifest is None else manifest.model_digest


def fetch_train_data(store: ObjectStore, task: Any, seed: int, dest: Path) -> ArtifactManifest:
    """Download and verify the task's staged train artifact into `dest`."""

    prefix = f"{store_prefix(task, seed)}/{TRAIN}"
    try:
        return fetch_artifact(store, prefix, dest)
    except NotFoundError:
        raise A2rlError(
            f"the train data of task {task.name} (seed {seed}) is not staged in {store.uri}: "
            f"run `a2rl data stage {task.name} --seed {seed} --store {store.uri}` once"
        ) from None


def setup_workspace(
    config: RecorderConfig,
    store: ObjectStore,
    params: SetupParams,
    *,
    create_submission: Callable[[int], Any],
    say: Say = print,
) -> SubmissionManifest:
    """Prepare `config.workspace` and record the baseline submission; returns its manifest."""

    task = get_task(config.task, protocol=params.protocol)
    layout = RunLayout.from_prefix(config.run_prefix)
    base_name = sanitize_model_name(params.base_model_name)
    say(f"[a2rl-setup] resolving base model {params.base_model_source}")
    with span("resolve_base_model"):
        model_dir = resolve_base_model(params.base_model_source, store=store)
    with tempfile.TemporaryDirectory(prefix="a2rl-train-") as tmp:
        say(f"[a2rl-setup] fetching the train data of {task.name} (seed {params.seed}) from {store.uri}")
        with span("stage_data"):
            train = fetch_train_data(store, task, params.seed, Path(tmp) / "train")
        say(f"[a2rl-setup] {len(train.files)} train file(s) verified (digest {(train.digest or '')[:12]})")
        with span("workspace_setup"):
            build_workspace(
                config.workspace,
                WorkspaceRules(
                    task=task.name,
                    base_model=params.base_model_name,
                    budget_s=int(config.timeout_s),
                    grace_s=params.grace_s,
                    max_submissions=config.max_submissions,
                    protocol=params.protocol,
                ),
                description=task.description(),
                model_dir=model_dir,
                train_dir=Path(tmp) / "train",
                into_empty_mount=True,
            )
    say(f"[a2rl-setup] workspace {config.workspace} written")
    with span("snapshot_base_model", {ATTR_SUBMISSION_INDEX: BASELINE_INDEX}):
        # A model from the store's library is copied inside the store, not uploaded again.
        copy_from = source_layouts(params.base_model_source)
        tree, stats = snapshot_tree(store, layout, model_dir, copy_from=copy_from)
        manifest = baseline_submission_manifest(TreeRecord.of(tree), tree.digest, base_name)
        write_record(store, layout.submission_manifest(BASELINE_INDEX), manifest)
    say(
        f"[a2rl-setup] base model {tree.digest[:12]} in the store "
        f"({stats.files_uploaded} file(s), {stats.bytes_uploaded} bytes uploaded; "
        f"{stats.files_copied} file(s), {stats.bytes_copied} bytes copied inside the store)"
    )
    with span("baseline_submission"):
        created = create_submission(BASELINE_INDEX)
    name = (created.get("metadata") or {}).get("name", "") if isinstance(created, dict) else ""
    say(f"[a2rl-setup] baseline submission {name} created: the operator scores it")
    return manifest
