"""The workspace Jobs and their pods as the operator's watches last delivered them (an informer's
cache, fed by `benchrun.on_job` and `benchrun.on_pod`), and the BenchRuns (`WatchedRuns`).

`benchrun.refresh` mirrors a run's Job and pod into its conditions whenever either changes; read
from the API server, that is a GET of the Job and a LIST of pods per change — half the calls of a
refresh, and most of what the operator adds per run beyond the children it creates. The watches
deliver every state of both anyway; kept here, a refresh asks the API server only for what the
cache has not seen (an operator just started, a Job created a moment ago, a pod not created yet).

What the cache holds is never newer than the API server and may lag it: each change still reaches
its own watch event (and refresh) after it is stored, so a refresh that read an older state is
followed by one that reads the newer. Where a lagging read could end a run wrongly,
`WatchedChildren.children` reads the API server instead (see there).

Thread-safe (kopf runs sync handlers in a thread pool); kopf hands one object's events to its
handlers in order, so the last state stored for an object is its newest. It starts empty in
every operator process (a standby replica that takes over fills it from its watches' first list).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from a2rl.constants import LABEL_RUN_UID
from a2rl_operator import status as st
from a2rl_operator.kube import newest, owned_by

Obj = dict[str, Any]
Read = Callable[[], Obj | None]


def _key(meta: Mapping[str, Any]) -> tuple[str, str]:
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class WatchedChildren:
    """The last state of each workspace Job (by namespace and name) and each workspace pod (by
    namespace and run uid), as plain dicts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], Obj] = {}
        self._pods: dict[tuple[str, str], dict[str, Obj]] = {}

    def saw_job(self, job: Obj, event_type: str | None) -> None:
        """Store a Job as its watch event delivered it (a DELETED event removes it)."""
        key = _key(job["metadata"])
        with self._lock:
            if event_type == "DELETED":
                self._jobs.pop(key, None)
            else:
                self._jobs[key] = job

    def saw_pod(self, pod: Obj, event_type: str | None) -> None:
        """Store a pod of a run (labelled with its uid) as its watch event delivered it."""
        meta = pod["metadata"]
        run_uid = (meta.get("labels") or {}).get(LABEL_RUN_UID)
        pod_uid = meta.get("uid")
        if not run_uid or not pod_uid:
            return
        key = (str(meta.get("namespace") or ""), str(run_uid))
        with self._lock:
            pods = self._pods.setdefault(key, {})
            if event_type == "DELETED":
                pods.pop(pod_uid, None)
                if not pods:
                    del self._pods[key]
            else:
                pods[pod_uid] = pod

    def job(self, namespace: str, name: str) -> Obj | None:
        """The Job's last watched state; None: not seen (it may exist all the same)."""
        with self._lock:
            return self._jobs.get((namespace, name))

    def newest_pod(self, namespace: str, run_uid: str) -> Obj | None:
        """The run's newest watched pod (by creation time, as `Kube.newest_pod`); None: none seen."""
        with self._lock:
            pods = list((self._pods.get((namespace, run_uid)) or {}).values())
        return newest(pods)

    def children(
        self, namespace: str, run_uid: str, job_name: str, *, queued: bool, read_pod: Read, read_job: Read
    ) -> tuple[Obj | None, Obj | None]:
        """The run's newest workspace pod and its workspace Job (owned by `run_uid`; no Job: no pod
        either), from the cache where it has them, else through `read_pod` / `read_job` (the API
        server).

        The pod, then the Job: what says the budget clock started is read before the Job, so a Job
        read suspended was suspended after it (`st.Observation.budget_started`). Read from the API
        server even when cached, where a lagging state could end the run wrongly: a queued run's Job
        that says suspended (it may lag an admission the cached pod already shows: Preempted), and
        the pod of a finished Job, read after the Job (its last state says how the agent ended:
        `st.agent_finish`)."""
        cached_pod = self.newest_pod(namespace, run_uid)
        pod = cached_pod or read_pod()
        cached_job = owned_by(self.job(namespace, job_name), run_uid)
        job = cached_job
        if job is None or (queued and (job.get("spec") or {}).get("suspend")):
            job = owned_by(read_job(), run_uid)
        if job is None:
            return None, None
        # A pod read from the API server after the Job's end was cached is already its last state.
        if st.agent_finish(job) is not None and (cached_pod is not None or job is not cached_job):
            pod = read_pod()
        return pod, job

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs) + sum(len(p) for p in self._pods.values())


def _at_least_as_new(new: Obj, old: Obj) -> bool:
    """Whether `new` is the same or a later state of the object than `old` (by resourceVersion:
    etcd's revision, a number; anything else counts as newer)."""
    try:
        return int(new["metadata"]["resourceVersion"]) >= int(old["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return True


class WatchedRuns:
    """The last state of each BenchRun (by namespace and name): as its watch delivered it
    (`benchrun.on_run_seen`), or as the API server returned it after this operator's own status
    write (`status_writer.write_status`), whichever is newer.

    `benchrun.refresh` reads a run here instead of a GET per child event. A state that lags the
    API server is safe there: the status write is guarded by the resourceVersion read, so a lagging
    read costs a 409 and a GET (`Kube.update_custom_status`), never a lost write; and since every
    status write is this operator's and is stored here as soon as it is answered, a lagging read
    cannot hide a condition written before it. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], Obj] = {}

    def saw(self, run: Obj, event_type: str | None = None) -> None:
        """Store `run` unless a newer state of it is stored already (a DELETED event removes it)."""
        key = _key(run["metadata"])
        with self._lock:
            if event_type == "DELETED":
                self._runs.pop(key, None)
                return
            old = self._runs.get(key)
            if old is None or _at_least_as_new(run, old):
                self._runs[key] = run

    def get(self, namespace: str, name: str) -> Obj | None:
        """The run's newest state seen; None: not seen (it may exist all the same)."""
        with self._lock:
            return self._runs.get((namespace, name))

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)
