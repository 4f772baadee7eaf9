"""`manifest.json` of a staged task-data artifact (`train/` or `heldout/`, `a2rl_tasks.artifacts`),
in a staging directory and in the store under `data/<task>/<data_version>-seed<seed>/<split>/`:

    {"task", "split", "data_version", "seed", "source", "files": {"<path>": {"sha256", "size"}}, "digest"}
"""

from __future__ import annotations

from a2rl.records.base import Record


class ArtifactFile(Record):
    """One file of an artifact, by its path relative to the artifact."""

    sha256: str
    size: int


class ArtifactManifest(Record):
    """The files of one staged split and their digest; every field but `files` is optional."""

    task: str | None = None
    #: `train` or `heldout`.
    split: str | None = None
    data_version: str | int | None = None
    seed: int | None = None
    #: The data source staged from (None: the task's built-in data).
    source: str | None = None
    files: dict[str, ArtifactFile] = {}
    #: sha256 of the sorted `path, sha256, size` lines (`a2rl_tasks.artifacts.entries_digest`).
    digest: str | None = None
