"""The BenchSubmission custom resource: one submitted model with its immutable snapshot."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field

from a2rl.api.benchrun import ObjectMeta
from a2rl.api.common import X_VALIDATIONS, ApiModel, Condition, Name, cel, map_list
from a2rl.constants import BENCHSUBMISSION_KIND

SHA256 = r"^[0-9a-f]{64}$"


class SubmissionState(StrEnum):
    """Where a submission is in its evaluation."""

    PENDING = "Pending"
    EVALUATING = "Evaluating"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    REJECTED = "Rejected"


class BenchSubmissionSpec(ApiModel):
    """The snapshot of one submission; immutable once created."""

    model_config = ConfigDict(
        json_schema_extra={
            X_VALIDATIONS: [
                cel(
                    "self == oldSelf",
                    "a BenchSubmission's spec cannot change once created (it is a fixed snapshot); "
                    "metadata labels and annotations may change",
                )
            ]
        }
    )

    run_name: Name = Field(description="The BenchRun this submission belongs to.")
    index: int = Field(
        ge=0, le=1_000_000, description="0 is the baseline (the base model); agent submissions start at 1."
    )
    model_path: str = Field(
        min_length=1,
        max_length=4096,
        description="Path the agent submitted, relative to the workspace (`models/<base>` for the baseline).",
    )
    model_digest: str = Field(pattern=SHA256, max_length=64, description="Tree digest of the model snapshot.")
    code_revision: int | None = Field(
        default=None, ge=0, description="Code revision snapshotted with it (unset for the baseline)."
    )
    code_digest: str | None = Field(
        default=None, pattern=SHA256, max_length=64, description="Tree digest of that code revision."
    )
    manifest_uri: str = Field(
        min_length=1, max_length=4096, description="Snapshot manifest in the object store."
    )
    identical_to_base: bool = Field(default=False, description="The model's digest equals the base model's.")
    submitted_at: datetime = Field(description="When the agent submitted (UTC).")


class BenchSubmissionStatus(ApiModel):
    """The evaluation of the submission, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The `metadata.generation` the status was computed from."
    )
    state: SubmissionState = Field(default=SubmissionState.PENDING, description="Evaluation state.")
    reason: str | None = Field(
        default=None,
        max_length=1024,
        description="CamelCase reason of the state (`Evaluated`, `EvalJobFailed`, `AfterDeadline`, …).",
    )
    score: float | None = Field(default=None, description="Score (0-100) when the evaluation succeeded.")
    error: str | None = Field(default=None, description="Why the submission has no score.")
    evaluator_version: str | None = Field(default=None, description="Version of the task's evaluator.")
    result_uri: str | None = Field(default=None, description="`result.json` in the object store.")
    eval_job: str | None = Field(default=None, description="Name of the eval Job that evaluates it.")
    cached: bool | None = Field(
        default=None, description="The baseline's result came from the store's baseline cache (no eval Job)."
    )
    started_at: datetime | None = Field(default=None, description="When the evaluation started.")
    finished_at: datetime | None = Field(default=None, description="When the evaluation finished.")
    duration_seconds: float | None = Field(
        default=None, ge=0, description="Wall time of the evaluation (from `result.json`)."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Conditions, one per type: `Evaluated`, and the GitOps-readable `Reconciling`, `Stalled`, "
            "`Ready`, `Finished`, `Succeeded`, `Failed` (docs/gitops.md)."
        ),
        json_schema_extra=map_list("type"),
    )


class BenchSubmission(ApiModel):
    """One model the agent submitted (index ≥ 1) or the baseline (index 0), with its evaluation."""

    api_version: Literal["a2rl.dev/v1alpha1"] = Field(default="a2rl.dev/v1alpha1", description="API version.")
    kind: Literal["BenchSubmission"] = Field(default=BENCHSUBMISSION_KIND, description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: BenchSubmissionSpec = Field(description="The snapshot (immutable).")
    status: BenchSubmissionStatus | None = Field(default=None, description="Evaluation state.")


def submission_name(run_name: str, index: int) -> str:
    """Name of the BenchSubmission of a run's submission `index` (0 = baseline): `<run>-<index:05d>`.

    Deterministic, so a recorder that restarts finds the object it created, and it sorts like the
    store's `submissions/<n>/` folders.
    """
    return f"{run_name}-{index:05d}"
