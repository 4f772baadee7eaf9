"""Which child watch events re-observe a run: only those that change what the conditions read."""

from __future__ import annotations

import copy
import threading
from typing import Any

from a2rl_operator.fingerprint import Deferred, SeenStates, job_fingerprint, pod_fingerprint


def job(**status: Any) -> dict[str, Any]:
    return {"metadata": {"uid": "j1", "resourceVersion": "1"}, "spec": {"suspend": False}, "status": status}


def pod(phase: str = "Running", state: str = "running") -> dict[str, Any]:
    return {
        "metadata": {"uid": "p1", "resourceVersion": "1"},
        "spec": {"nodeName": "kwok-gpu-0"},
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "agent", "state": {state: {"startedAt": "2025-01-01T00:00:00Z"}}}],
        },
    }


def test_job_counters_and_versions_do_not_matter_but_conditions_and_suspend_do() -> None:
    base = job(active=1)
    noise = copy.deepcopy(base)
    noise["status"].update(active=0, ready=1, uncountedTerminatedPods={})
    noise["metadata"]["resourceVersion"] = "2"
    assert job_fingerprint(noise) == job_fingerprint(base)
    done = job(conditions=[{"type": "Complete", "status": "True", "reason": "CompletionsReached"}])
    assert job_fingerprint(done) != job_fingerprint(base)
    unsuspended = copy.deepcopy(base)
    unsuspended["spec"]["suspend"] = True
    assert job_fingerprint(unsuspended) != job_fingerprint(base)


def test_pod_state_changes_matter() -> None:
    running = pod()
    assert pod_fingerprint(copy.deepcopy(running)) == pod_fingerprint(running)
    assert pod_fingerprint(pod(phase="Succeeded", state="terminated")) != pod_fingerprint(running)
    assert pod_fingerprint(pod(state="waiting")) != pod_fingerprint(running)
    moved = pod()
    moved["spec"]["nodeName"] = "kwok-gpu-1"
    assert pod_fingerprint(moved) != pod_fingerprint(running)


def test_seen_states_is_per_object_and_forgets() -> None:
    seen = SeenStates()
    assert seen.is_new("a", 1) and not seen.is_new("a", 1)
    assert seen.is_new("b", 1)
    assert seen.is_new("a", 2) and not seen.is_new("a", 2)
    seen.forget("a")
    assert seen.is_new("a", 2) and len(seen) == 2


def test_seen_states_lets_exactly_one_thread_through() -> None:
    seen, winners = SeenStates(), []
    barrier = threading.Barrier(8)

    def race() -> None:
        barrier.wait()
        if seen.is_new("x", ("same",)):
            winners.append(1)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert winners == [1]


def test_a_deferred_run_is_taken_once_and_only_when_deferred() -> None:
    deferred = Deferred()
    assert not deferred.take("run-a")  # nothing came before the first status: no second look
    deferred.add("run-a")
    deferred.add("run-a")  # the pod's and the Job's events: one look covers both
    assert deferred.take("run-a") and not deferred.take("run-a")
    assert len(deferred) == 0


def test_deferred_runs_are_taken_by_exactly_one_thread() -> None:
    deferred = Deferred()
    for i in range(50):
        deferred.add(f"run-{i}")
    taken: list[str] = []
    lock = threading.Lock()

    def take_all() -> None:
        for i in range(50):
            if deferred.take(f"run-{i}"):
                with lock:
                    taken.append(f"run-{i}")

    threads = [threading.Thread(target=take_all) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted(f"run-{i}" for i in range(50))


def test_a_childs_event_while_its_reconcile_writes_is_deferred_without_a_read() -> None:
    deferred = Deferred()
    assert not deferred.defer_if_writing("run-a")  # no reconcile writing: the event reads the run itself
    deferred.begin("run-a")
    assert deferred.defer_if_writing("run-a") and not deferred.defer_if_writing("run-b")
    deferred.end("run-a")
    assert not deferred.defer_if_writing("run-a")
    assert deferred.take("run-a") and not deferred.take("run-a")  # the reconcile's look after its write
    deferred.begin("run-c")
    deferred.end("run-c")  # a reconcile that failed before writing: nothing deferred, nothing kept
    assert not deferred.take("run-c") and len(deferred) == 0


def _child_event(deferred: Deferred, uid: str, accepted: threading.Event, seen: list[str]) -> None:
    """What `_refresh_on_change` does: defer to the writing reconcile, else read the run."""
    if deferred.defer_if_writing(uid):
        seen.append("deferred")
    else:
        seen.append("read accepted" if accepted.is_set() else "read not accepted")


def test_every_event_during_a_reconcile_is_observed_by_it_or_sees_the_first_status() -> None:
    """The reconcile: begin, write the first status, end, take. An event from another thread at
    any moment after begin is either deferred (and the reconcile's take finds it) or comes after
    end, when the first status is written and its own read sees it."""
    outcomes: set[str] = set()
    for i in range(300):
        deferred, uid, accepted = Deferred(), f"run-{i}", threading.Event()
        seen: list[str] = []
        deferred.begin(uid)
        child = threading.Thread(target=_child_event, args=(deferred, uid, accepted, seen))
        child.start()
        accepted.set()  # the first status written
        deferred.end(uid)
        took = deferred.take(uid)
        child.join()
        assert seen != ["read not accepted"]
        assert took == (seen == ["deferred"])
        outcomes.update(seen)
    assert "deferred" in outcomes  # the interleaving the deferral exists for did happen
