"""`<namespace>/<name>-<uid>/benchrun.json`: a deleted BenchRun's final record (written by the
operator's finalizer, `a2rl_operator.retention`): its metadata worth keeping, spec and last status
as the API server held them (wire form, camelCase), so the store keeps the whole story after the
custom resource is gone."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from a2rl.records.base import Record

#: Metadata worth keeping; managedFields and kopf/kubectl bookkeeping are noise in a record.
FINAL_META_KEYS = (
    "name",
    "namespace",
    "uid",
    "generation",
    "labels",
    "creationTimestamp",
    "deletionTimestamp",
)


class FinalRunRecord(Record):
    """The BenchRun object as it was when deleted; keys as the API server spells them."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str | None = None
    #: The `FINAL_META_KEYS` of `metadata` that the object had.
    metadata: dict[str, Any] = {}
    #: `spec` and `status` as the API server returned them (wire form).
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}

    @classmethod
    def of(cls, run: dict[str, Any]) -> FinalRunRecord:
        """The record of a BenchRun body (a wire dict from the API server)."""
        meta = run.get("metadata") or {}
        return cls(
            api_version=run.get("apiVersion"),
            kind=run.get("kind"),
            metadata={k: meta[k] for k in FINAL_META_KEYS if k in meta},
            spec=run.get("spec") or {},
            status=run.get("status") or {},
        )

    def to_json(self) -> dict[str, Any]:
        """As stored: `apiVersion` (the wire name), every field (None included)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)
