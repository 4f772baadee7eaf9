"""`submissions/<n>/manifest.json`: what was submitted (written by the recorder on POST /submit,
by the baseline evaluation and by the cluster set-up container for submission 0)."""

from __future__ import annotations

from typing import Any

from a2rl.records.base import Record
from a2rl.records.tree import TreeRecord


class SnapshotInfo(Record):
    """`snapshot`: what recording the model cost (agent submissions only)."""

    files_uploaded: int | None = None
    bytes_uploaded: int | None = None
    seconds: float | None = None


class SubmissionManifest(Record):
    """The snapshot of one submission; every field is optional when reading."""

    index: int | None = None
    submitted_at: str | None = None
    #: Relative to the workspace (`output/v1`; `models/<base>` for the baseline).
    model_path: str | None = None
    model: TreeRecord | None = None
    model_digest: str | None = None
    base_model_digest: str | None = None
    identical_to_base: bool = False
    code_revision: int | None = None
    code_digest: str | None = None
    #: The agent's request body as it sent it (`{}` for the baseline).
    request: dict[str, Any] | None = None
    snapshot: SnapshotInfo | None = None
