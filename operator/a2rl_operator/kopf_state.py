"""Where kopf keeps its per-object state, sized so a run costs no PATCH of its own.

kopf remembers two things per object: the progress of its handlers (retries, delays) and the
"diff base", the last handled state, which tells a create from an update. Both default to
annotations, so every handled object gets a PATCH after its handlers: at hundreds of runs, one
API call in fourteen, and one more watch event each to decode. And kopf builds the "essence" of
every object it sees (a deep copy, and a second one to clear it), pods, Jobs and Events included.

- Only campaigns have update handlers (their `spec`): they keep kopf's essence and annotation.
- BenchRuns have none: all kopf needs to know is whether a run was handled, and the run says so
  itself once its first status is written (the `Accepted` condition, set by the create handler
  in the same write that says what was created). `RunDiffBase` reads it from there and stores
  nothing; a run without it is still a create, so a failed create is retried, as before.
- Every other kind (watched only, never "changed"): an empty essence, nothing copied.
- `QuietProgress` keeps retries and delays in annotations, as kopf does, but writes no
  `a2rl.dev/kopf-managed` marker: the marker only tells other kopf operators which annotations to
  ignore, and a handler that succeeds at once left nothing else in the PATCH.

Add an update or field handler for another kind and it must join `UPDATED_KINDS` (a unit test
holds the registry to that).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from kopf._cogs.structs.dicts import FieldSpec

from a2rl.constants import API_GROUP, BENCHCAMPAIGN_KIND, BENCHRUN_KIND, COND_ACCEPTED

DIFFBASE_KEY = "last-handled-configuration"
UPDATED_KINDS = frozenset({BENCHCAMPAIGN_KIND})  # the kinds with update (or field) handlers


def is_benchrun(body: Any) -> bool:
    return body.get("kind") == BENCHRUN_KIND and str(body.get("apiVersion", "")).startswith(f"{API_GROUP}/")


def handled(body: Any) -> bool:
    """Whether the run's create handler has written its first status (read as it is: this runs on
    every event, inside kopf's processing, where nothing may raise)."""
    status = body.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == COND_ACCEPTED for c in conditions
    )


class RunDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation for the kinds with update handlers; a run's state read from the run;
    an empty essence for everything else."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[FieldSpec] | None = None) -> kopf.BodyEssence:
        if body.get("kind") in UPDATED_KINDS:
            return super().build(body=body, extra_fields=extra_fields)
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        if body.get("kind") in UPDATED_KINDS:
            return super().fetch(body=body)
        if is_benchrun(body) and handled(body):
            return kopf.BodyEssence()
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if body.get("kind") in UPDATED_KINDS:
            super().store(body=body, patch=patch, essence=essence)


class QuietProgress(kopf.AnnotationsProgressStorage):
    """kopf's annotation progress storage without the branding marker."""

    def _store_marker(self, prefix: str, patch: kopf.Patch, body: kopf.Body) -> None:
        return None


def diffbase_storage() -> RunDiffBase:
    return RunDiffBase(prefix=API_GROUP, key=DIFFBASE_KEY)


def progress_storage() -> QuietProgress:
    return QuietProgress(prefix=API_GROUP)
