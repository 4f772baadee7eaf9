"""`models/<name>/manifest.json`: a base model pushed to the store's library (`a2rl models push`,
`a2rl.models.library`)."""

from __future__ import annotations

from typing import Any

from a2rl.records.base import Record
from a2rl.records.tree import TreeRecord


class ModelLibraryManifest(Record):
    """One pushed model; every field is optional when reading (`fetch_model` needs `files`)."""

    name: str | None = None
    #: The tree digest of `files`.
    digest: str | None = None
    #: Total size of the files.
    bytes: int | None = None
    files: TreeRecord | None = None
    #: ISO 8601 UTC, `Z` suffix.
    pushed_at: str | None = None

    def summary(self) -> dict[str, Any]:
        """The manifest as JSON without the file list (`a2rl models list`)."""
        return {k: v for k, v in self.to_json().items() if k != "files"}
