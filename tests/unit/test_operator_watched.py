"""The operator's cache of watched workspace Jobs and pods (`watched.WatchedChildren`): what a
refresh reads from memory, what it still asks the API server, and in which order."""

from __future__ import annotations

from typing import Any

from a2rl_operator import status as st
from a2rl_operator.watched import WatchedChildren, WatchedRuns

from a2rl.constants import LABEL_RUN_UID, REASON_AGENT_FAILED, REASON_DEADLINE_EXCEEDED

Obj = dict[str, Any]
NS, RUN_UID, JOB = "team-a", "3f1c9a2e-run", "gsm8k-sft-workspace"
BUDGET_S = 600


def job(*, uid: str = "job-1", owner: str = RUN_UID, suspend: bool = False, failed: bool = False) -> Obj:
    conditions = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                   "message": "Job has reached the specified backoff limit"}] if failed else []  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB, "namespace": NS, "uid": uid, "ownerReferences": [{"uid": owner}]},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions},
    }


def pod(
    name: str = "gsm8k-sft-workspace-x7k2p",
    *,
    created: str = "2026-11-29T06:00:00Z",
    run_uid: str = RUN_UID,
    agent: Obj | None = None,
) -> Obj:
    agent_state = agent or {"running": {"startedAt": "2026-11-29T06:00:05Z"}}
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": created}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**meta, "labels": {LABEL_RUN_UID: run_uid}},
        "spec": {"containers": [{"name": "agent", "livenessProbe": {"initialDelaySeconds": BUDGET_S}}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "agent", "state": agent_state}]},
    }


class Api:
    """What `refresh` passes as its reads: answers from a dict, every read in order."""

    def __init__(self, pod: Obj | None, job: Obj | None) -> None:
        self.pod, self.job = pod, job
        self.reads: list[str] = []

    def read_pod(self) -> Obj | None:
        self.reads.append("pod")
        return self.pod

    def read_job(self) -> Obj | None:
        self.reads.append("job")
        return self.job


def children(cache: WatchedChildren, api: Api, *, queued: bool = False) -> tuple[Obj | None, Obj | None]:
    return cache.children(NS, RUN_UID, JOB, queued=queued, read_pod=api.read_pod, read_job=api.read_job)


def test_what_the_watches_delivered_is_read_from_memory() -> None:
    cache = WatchedChildren()
    cache.saw_job(job(), "ADDED")
    cache.saw_pod(pod(), "ADDED")
    api = Api(pod(), job())
    got_pod, got_job = children(cache, api)
    assert api.reads == [] and got_job == job() and got_pod == pod()
    # The newest pod of the run (a Job re-admitted by Kueue has a second one), not another run's.
    cache.saw_pod(pod("gsm8k-sft-workspace-q9zzt", created="2026-11-29T06:10:00Z"), "ADDED")
    cache.saw_pod(pod("other-run-workspace-a1b2c", created="2026-11-29T07:00:00Z", run_uid="other"), "ADDED")
    assert cache.newest_pod(NS, RUN_UID)["metadata"]["name"] == "gsm8k-sft-workspace-q9zzt"  # type: ignore[index]
    # A pod without the run's uid label is not kept (nothing could find it).
    unlabelled = pod("stray")
    unlabelled["metadata"]["labels"] = {}
    cache.saw_pod(unlabelled, "ADDED")
    assert len(cache) == 4


def test_deleted_objects_leave_the_cache_and_are_asked_for_again() -> None:
    cache = WatchedChildren()
    cache.saw_job(job(), "ADDED")
    cache.saw_pod(pod(), "MODIFIED")
    cache.saw_pod(pod(), "DELETED")
    cache.saw_job(job(), "DELETED")
    assert len(cache) == 0 and cache.job(NS, JOB) is None and cache.newest_pod(NS, RUN_UID) is None
    api = Api(None, None)
    assert children(cache, api) == (None, None)
    assert api.reads == ["pod", "job"]  # the pod first: what says the budget clock started


def test_nothing_seen_yet_is_read_pod_first_then_job() -> None:
    api = Api(pod(), job())
    assert children(WatchedChildren(), api) == (pod(), job()) and api.reads == ["pod", "job"]


def test_a_previous_runs_job_of_the_same_name_is_not_taken_for_this_runs() -> None:
    cache = WatchedChildren()
    cache.saw_job(job(uid="old-job", owner="deleted-run"), "MODIFIED")  # its DELETED not seen yet
    cache.saw_pod(pod(), "ADDED")
    api = Api(pod(), job())
    assert children(cache, api) == (pod(), job()) and api.reads == ["job"]
    # Owned by no-one we know: no Job, and so no pod either.
    assert children(cache, Api(pod(), job(owner="someone-else"))) == (None, None)


def test_a_queued_runs_suspended_job_is_read_again_after_its_pod() -> None:
    """The cached Job still says suspended (Kueue's admission not seen yet) while the cached pod
    already runs: taken as is, a started budget clock and a suspended Job read as a preemption."""
    cache = WatchedChildren()
    cache.saw_job(job(suspend=True), "MODIFIED")
    cache.saw_pod(pod(), "ADDED")
    api = Api(pod(), job(suspend=False))
    got_pod, got_job = children(cache, api, queued=True)
    assert api.reads == ["job"] and got_job == job(suspend=False) and got_pod == pod()
    obs = st.Observation(got_job, got_pod, "gpus", budget_started=st.budget_started([], got_pod))
    assert st.preemption(obs, []) == []
    # Without a queue, a cached Job is taken as it is.
    plain_api = Api(pod(), job())
    assert children(cache, plain_api, queued=False)[1] == job(suspend=True) and plain_api.reads == []


def test_a_finished_jobs_pod_is_read_after_the_job() -> None:
    """The Job's Failed event came first; the cached pod still shows the agent running. Its last
    state (killed by the deadline probe after its budget) says the run ran out of budget, not
    that the agent failed."""
    cache = WatchedChildren()
    cache.saw_job(job(failed=True), "MODIFIED")
    cache.saw_pod(pod(), "MODIFIED")
    killed = {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": "2026-11-29T06:00:05Z",
                             "finishedAt": "2026-11-29T06:10:06Z"}}  # fmt: skip
    api = Api(pod(agent=killed), job(failed=True))
    got_pod, got_job = children(cache, api)
    assert api.reads == ["pod"] and got_pod == pod(agent=killed)
    assert got_job is not None
    finish = st.agent_finish(got_job, got_pod)
    assert finish is not None and finish.reason == REASON_DEADLINE_EXCEEDED
    assert st.terminal_for(finish).reason == st.R_BUDGET_EXHAUSTED
    # No pod in the cache: the one read after the cached Job's end is its last state, read once.
    only_job = WatchedChildren()
    only_job.saw_job(job(failed=True), "MODIFIED")
    once = Api(pod(agent=killed), job(failed=True))
    assert children(only_job, once) == (pod(agent=killed), job(failed=True)) and once.reads == ["pod"]
    # Nothing cached: the pod, then the Job, then the pod again (the first read may predate the end).
    fresh = Api(pod(agent=killed), job(failed=True))
    assert children(WatchedChildren(), fresh)[0] == pod(agent=killed) and fresh.reads == ["pod", "job", "pod"]
    # What the stale pod would have said:
    stale = st.agent_finish(got_job, pod())
    assert stale is not None and stale.reason == REASON_AGENT_FAILED


def run(rv: str, phase: str = "Pending", name: str = "gsm8k-sft") -> Obj:
    meta = {"name": name, "namespace": NS, "uid": RUN_UID, "resourceVersion": rv}
    return {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchRun", "metadata": meta,
            "status": {"phase": phase}}  # fmt: skip


def test_a_run_is_kept_at_its_newest_state_whichever_way_it_arrives() -> None:
    runs = WatchedRuns()
    assert runs.get(NS, "gsm8k-sft") is None  # never seen: `refresh` reads the API server
    runs.saw(run("1041"), "ADDED")
    # The operator's own status write (the API server's answer) comes before its watch event ...
    runs.saw(run("1057", "Running"))
    # ... and a watch event that lags it changes nothing (numeric, not string, order: 998 < 1057).
    runs.saw(run("1049", "Pending"), "MODIFIED")
    runs.saw(run("998", "Pending"), "MODIFIED")
    assert runs.get(NS, "gsm8k-sft")["status"]["phase"] == "Running"  # type: ignore[index]
    runs.saw(run("1057", "Running"), "MODIFIED")  # the write's own event: the same state
    runs.saw(run("1102", "Succeeded"), "MODIFIED")
    assert runs.get(NS, "gsm8k-sft")["metadata"]["resourceVersion"] == "1102"  # type: ignore[index]
    # A resourceVersion that is not a number (another storage): the latest arrival counts.
    runs.saw(run("opaque-7", "Failed"), "MODIFIED")
    assert runs.get(NS, "gsm8k-sft")["status"]["phase"] == "Failed"  # type: ignore[index]
    runs.saw(run("1200"), "DELETED")
    assert runs.get(NS, "gsm8k-sft") is None and len(runs) == 0
