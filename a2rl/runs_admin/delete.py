"""Deleting runs (`a2rl runs rm`, `a2rl runs prune`): every object under the run's prefix, and its
workspace, scratch and logs folders on this machine. Shared areas of the store (`baselines/`,
`models/`, `data/`, `campaigns/`) are never touched, and a live run is refused without `force`
(`a2rl.runs_admin.state`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from a2rl.errors import A2rlError
from a2rl.runs import RunInfo
from a2rl.runs_admin.local_files import local_dirs, remove_tree, tree_bytes
from a2rl.runs_admin.state import is_live
from a2rl.runs_admin.summary import read_state
from a2rl.store.base import ObjectStore

#: Top-level folders of a store shared by every run: never a run's prefix.
SHARED_AREAS = frozenset({"baselines", "models", "data", "campaigns"})


@dataclass(frozen=True)
class LocalDir:
    path: Path
    bytes: int


@dataclass(frozen=True)
class DeletionPlan:
    """What deleting one run removes."""

    info: RunInfo
    state: str
    objects: int
    store_bytes: int
    local: tuple[LocalDir, ...]

    @property
    def ref(self) -> str:
        return self.info.ref

    @property
    def prefix(self) -> str:
        return self.info.prefix

    @property
    def total_bytes(self) -> int:
        return self.store_bytes + sum(d.bytes for d in self.local)

    @property
    def live(self) -> bool:
        return is_live(self.state)


def check_run_prefix(prefix: str) -> None:
    """Refuse a prefix that is not `<namespace>/<name>-<uid>` or lies in a shared area."""
    parts = prefix.split("/")
    if len(parts) != 2 or not all(parts) or parts[0] in SHARED_AREAS:
        raise A2rlError(f"refusing to delete {prefix!r}: not a run's prefix")


def plan_deletion(store: ObjectStore, info: RunInfo, now: datetime) -> DeletionPlan:
    """Measure what deleting `info`'s run removes (nothing is deleted)."""
    check_run_prefix(info.prefix)
    objects = 0
    size = 0
    for _key, n in store.sizes(info.prefix):
        objects += 1
        size += n
    local = tuple(LocalDir(path, tree_bytes(path)) for path in local_dirs(info.ref))
    return DeletionPlan(
        info=info, state=read_state(store, info, now), objects=objects, store_bytes=size, local=local
    )


def refuse_live(plans: Iterable[DeletionPlan]) -> None:
    """`A2rlError` naming the live runs among `plans`, if any."""
    live = [p for p in plans if p.live]
    if live:
        names = ", ".join(f"{p.ref} ({p.state})" for p in live)
        raise A2rlError(
            f"refusing to delete {len(live)} run(s) that may still be going: {names}; "
            "wait for them to end, or add --force if their runner is gone"
        )


def execute(store: ObjectStore, plan: DeletionPlan) -> int:
    """Delete the run's local folders, then its objects; returns the bytes freed (as planned)."""
    check_run_prefix(plan.prefix)
    for local in plan.local:
        remove_tree(local.path)
    store.delete_prefix(plan.prefix)
    return plan.total_bytes


def older_than(
    runs: Iterable[RunInfo], cutoff: datetime, written: dict[str, datetime | None]
) -> list[RunInfo]:
    """The runs that started before `cutoff` (a run not started yet: whose run.json was last
    written before it, per `written`, by prefix; a run of unknown age is never chosen)."""
    chosen = []
    for run in runs:
        when = run.started_at or written.get(run.prefix)
        if when is not None and when < cutoff:
            chosen.append(run)
    return chosen
