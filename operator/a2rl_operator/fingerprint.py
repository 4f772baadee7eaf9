"""Skip watch events that change nothing the run's conditions depend on.

A workspace Job and its pod produce many watch events (ready/active counters, resource
versions, managed fields); a run's conditions depend only on a few fields of each. Every event
whose object has the same fingerprint as the last one handled for that object is skipped, so
each relevant change still triggers exactly one re-observation, made after the change.

`job_fingerprint` and `pod_fingerprint` are pure; `SeenStates` is the thread-safe memory
(kopf runs sync handlers in a thread pool). It starts empty in every operator process, so a
restarted operator re-observes everything once.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from typing import Any


def _conditions(obj: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return tuple(sorted((str(c.get("type")), str(c.get("status")), str(c.get("reason"))) for c in conds))


def job_fingerprint(job: Mapping[str, Any]) -> Hashable:
    """What `status.observe` reads from a Job: suspension and its conditions."""
    return (bool((job.get("spec") or {}).get("suspend")), _conditions(job))


def _container_states(statuses: list[dict[str, Any]] | None) -> tuple[tuple[str, str, str], ...]:
    out = []
    for status in statuses or []:
        state = status.get("state") or {}
        key = next(iter(state), "")
        started = str((state.get(key) or {}).get("startedAt") or "")
        out.append((str(status.get("name")), key, started))
    return tuple(sorted(out))


def pod_fingerprint(pod: Mapping[str, Any]) -> Hashable:
    """What `status.observe` reads from a pod: phase, scheduling, node and container states."""
    status = pod.get("status") or {}
    return (
        status.get("phase"),
        (pod.get("spec") or {}).get("nodeName"),
        _conditions(pod),
        _container_states(status.get("containerStatuses")),
        _container_states(status.get("initContainerStatuses")),
    )


class SeenStates:
    """Last handled fingerprint per object uid."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, Hashable] = {}

    def is_new(self, uid: str, fingerprint: Hashable) -> bool:
        """True (and remembered) when `fingerprint` differs from the last one seen for `uid`."""
        with self._lock:
            if self._seen.get(uid) == fingerprint:
                return False
            self._seen[uid] = fingerprint
            return True

    def forget(self, uid: str) -> None:
        with self._lock:
            self._seen.pop(uid, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)


class Deferred:
    """Runs whose children's events came before their first status (`refresh` leaves such a run
    alone, its reconcile writes `Accepted` first) and were marked seen all the same: the reconcile
    re-observes them once the first status is written, or the change would wait for the next
    resync (a minute) with nothing else to trigger it.

    While this process's reconcile of a run is writing its children and first status (`begin` ..
    `end`), a child's event is deferred without reading anything (`defer_if_writing`): the Job's
    pod usually appears before the first status is written. Otherwise race-free with one re-read:
    `refresh` adds the run and then reads it again; the reconcile takes it out after its write.
    Either the reconcile finds it, or the re-read sees `Accepted`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uids: set[str] = set()
        self._writing: set[str] = set()

    def add(self, uid: str) -> None:
        with self._lock:
            self._uids.add(uid)

    def take(self, uid: str) -> bool:
        """True when `uid` was deferred (and no longer is)."""
        with self._lock:
            if uid not in self._uids:
                return False
            self._uids.discard(uid)
            return True

    def begin(self, uid: str) -> None:
        """The run's reconcile starts creating its children and writing its first status."""
        with self._lock:
            self._writing.add(uid)

    def end(self, uid: str) -> None:
        """The reconcile is done (its first status written or not); it `take`s the run next."""
        with self._lock:
            self._writing.discard(uid)

    def defer_if_writing(self, uid: str) -> bool:
        """True (and the run deferred) when its reconcile is between `begin` and `end`: the
        reconcile's `take` after its write will find it."""
        with self._lock:
            if uid not in self._writing:
                return False
            self._uids.add(uid)
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._uids)
