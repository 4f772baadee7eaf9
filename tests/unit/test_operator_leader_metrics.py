"""The operator's leader election decisions (a2rl_operator.leader), its metrics tables and its
silence in namespaces being deleted (a2rl_operator.namespaces, Kube)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from a2rl_operator.kube import Kube
from a2rl_operator.leader import Action, LeaseSettings, Observation, decide, lease_body
from a2rl_operator.metrics import OperatorMetrics, timed
from a2rl_operator.namespaces import TerminatingNamespaces
from a2rl_operator.quiet_logs import RoutineSuccessFilter
from kubernetes import client

ME, OTHER = "operator-a_1234", "operator-b_5678"
SETTINGS = LeaseSettings(namespace="a2rl-system", identity=ME)


def spec(
    holder: str | None, renew: str = "2026-11-27T10:00:00.000000Z", transitions: int = 0
) -> dict[str, Any]:
    return {"holderIdentity": holder, "renewTime": renew, "leaseTransitions": transitions}


def test_a_candidate_creates_renews_waits_and_takes_over_by_its_own_clock() -> None:
    seen = Observation()
    assert decide(None, ME, seen, now=0, lease_duration_s=15) == Action.CREATE
    assert decide(spec(ME), ME, seen, now=1, lease_duration_s=15) == Action.RENEW
    assert decide(spec(None), ME, seen, now=2, lease_duration_s=15) == Action.TAKE
    # Another holder: fresh while its record keeps changing, whatever the renew time says (skew).
    seen = Observation()
    assert (
        decide(spec(OTHER, "1999-01-01T00:00:00.000000Z"), ME, seen, now=100, lease_duration_s=15)
        == Action.WAIT
    )
    assert (
        decide(spec(OTHER, "1999-01-01T00:00:00.000000Z"), ME, seen, now=114, lease_duration_s=15)
        == Action.WAIT
    )
    assert (
        decide(spec(OTHER, "1999-01-01T00:00:05.000000Z"), ME, seen, now=120, lease_duration_s=15)
        == Action.WAIT
    )
    assert (
        decide(spec(OTHER, "1999-01-01T00:00:05.000000Z"), ME, seen, now=134, lease_duration_s=15)
        == Action.WAIT
    )
    # Unchanged for a whole lease duration of our clock: expired.
    assert (
        decide(spec(OTHER, "1999-01-01T00:00:05.000000Z"), ME, seen, now=135, lease_duration_s=15)
        == Action.TAKE
    )


def test_lease_bodies_count_transitions_and_carry_the_resource_version() -> None:
    now = datetime(2026, 11, 27, 10, 0, 1, 250000, tzinfo=UTC)
    created = lease_body(SETTINGS, None, holder=ME, now=now)
    assert created["metadata"] == {"name": "a2rl-operator", "namespace": "a2rl-system"}
    assert created["spec"] == {
        "acquireTime": "2026-11-27T10:00:01.250000Z",
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "renewTime": "2026-11-27T10:00:01.250000Z",
        "leaseTransitions": 0,
    }
    theirs = {
        "metadata": {"resourceVersion": "42"},
        "spec": {**spec(OTHER, transitions=3), "acquireTime": "x"},
    }
    taken = lease_body(SETTINGS, theirs, holder=ME, now=now)
    assert taken["metadata"]["resourceVersion"] == "42"
    assert (
        taken["spec"]["leaseTransitions"] == 4
        and taken["spec"]["acquireTime"] == "2026-11-27T10:00:01.250000Z"
    )
    ours = {"metadata": {"resourceVersion": "43"}, "spec": taken["spec"]}
    renewed = lease_body(SETTINGS, ours, holder=ME, now=now.replace(second=3))
    assert (
        renewed["spec"]["leaseTransitions"] == 4
        and renewed["spec"]["acquireTime"] == "2026-11-27T10:00:01.250000Z"
    )
    released = lease_body(SETTINGS, ours, holder="", now=now)
    assert released["spec"]["holderIdentity"] is None and released["spec"]["leaseTransitions"] == 4


def test_settings_refuse_a_deadline_past_the_lease() -> None:
    assert LeaseSettings("ns", ME).problems() == []
    (problem,) = LeaseSettings("ns", ME, lease_duration_s=5, renew_deadline_s=6).problems()
    assert "renew deadline < lease duration" in problem


def _run(uid: str, phase: str, failed: bool = False, **status: Any) -> dict[str, Any]:
    conditions = (
        [{"type": "Failed", "status": "True", "reason": "Preempted", "message": "m"}] if failed else []
    )
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": f"run-{uid}"},
        "status": {"phase": phase, "conditions": conditions, **status},
    }


def test_run_and_submission_series_follow_the_watch() -> None:
    m = OperatorMetrics()
    m.observe_run(_run("a", "Running", driverTokens=1200, driverCostUSD=0.5, queueWaitSeconds=12), "ADDED")
    m.observe_run(
        _run("a", "Running", driverTokens=1500, driverCostUSD=0.75, queueWaitSeconds=12), "MODIFIED"
    )
    m.observe_run(_run("b", "Failed", failed=True), "ADDED")
    m.observe_submission(
        {"metadata": {"uid": "s", "creationTimestamp": "2026-11-27T10:00:00Z"},
         "status": {"state": "Evaluating", "startedAt": "2026-11-27T10:00:42Z"}},
        "MODIFIED",
    )  # fmt: skip
    text = m.render()
    assert 'a2rl_benchruns{phase="Running",reason=""} 1\n' in text
    assert 'a2rl_benchruns{phase="Failed",reason="Preempted"} 1\n' in text
    assert 'a2rl_benchrun_driver_tokens{namespace="ns",run="run-a"} 1500\n' in text
    assert 'a2rl_benchrun_driver_cost_usd{namespace="ns",run="run-a"} 0.75\n' in text
    assert "a2rl_benchrun_queue_wait_seconds_count 1\n" in text  # once per run, not per event
    assert "a2rl_benchrun_queue_wait_seconds_sum 12\n" in text
    assert 'a2rl_benchsubmissions{state="Evaluating"} 1\n' in text
    assert "a2rl_benchsubmission_eval_wait_seconds_sum 42\n" in text
    m.observe_run(_run("a", "Running"), "DELETED")
    text = m.render()
    assert 'phase="Running"' not in text and 'run="run-a"' not in text


def test_timed_handlers_count_latency_and_failures_under_their_own_name() -> None:
    m = OperatorMetrics()
    memo = kopf.Memo(metrics=m)

    def on_benchrun(**_: Any) -> str:
        return "done"

    def resync(**_: Any) -> None:
        raise kopf.TemporaryError("later", delay=1)

    assert timed(on_benchrun)(memo=memo) == "done"
    with pytest.raises(kopf.TemporaryError):
        timed(resync)(memo=memo)
    assert m.handler_seconds.count(handler="on_benchrun") == 1
    assert m.handler_errors.value(handler="resync", kind="temporary") == 1
    assert m.handler_errors.value(handler="on_benchrun", kind="temporary") == 0
    assert timed(on_benchrun).__wrapped__ is on_benchrun  # type: ignore[attr-defined]  # kopf's handler id


def test_terminating_namespaces_follow_the_namespace_watch() -> None:
    seen = TerminatingNamespaces()
    seen.observe({"metadata": {"name": "team-a"}, "status": {"phase": "Active"}}, "ADDED")
    assert "team-a" not in seen
    seen.observe({"metadata": {"name": "team-a", "deletionTimestamp": "2026-11-27T10:00:00Z"}}, "MODIFIED")
    assert "team-a" in seen
    seen.observe({"metadata": {"name": "team-b"}, "status": {"phase": "Terminating"}}, None)
    assert "team-b" in seen
    seen.observe({"metadata": {"name": "team-a"}, "status": {"phase": "Terminating"}}, "DELETED")
    assert "team-a" not in seen and "team-b" in seen


def test_kube_writes_no_status_and_posts_no_event_in_a_terminating_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    posted: list[str] = []
    monkeypatch.setattr(kopf, "event", lambda _ref, *, type, reason, message: posted.append(reason))
    # An API server nobody listens on: any request would fail the test with a connection error.
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    kube = Kube(api)
    kube.terminating.mark("dying")
    ref = {"metadata": {"name": "run", "namespace": "dying", "uid": "u"}}
    assert kube.update_status("dying", "run", lambda _run: {"phase": "Failed"}) is None
    kube.post_event(ref, "Normal", "CreatedWorkspace", "created")
    kube.post_event({"metadata": {**ref["metadata"], "namespace": "alive"}}, "Normal", "Accepted", "ok")
    assert posted == ["Accepted"]


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("Handler 'on_pod' succeeded.", False),
        ("Timer 'resync' succeeded.", False),
        ("Creation is processed: 2 succeeded; 0 failed.", False),
        ("Deletion is processed: 1 succeeded; 0 failed.", False),
        ("Creation is processed: 1 succeeded; 1 failed.", True),
        ("Handler 'on_benchrun' failed temporarily: later", True),
        ("BenchRun ns/run: created PersistentVolumeClaim run-workspace", True),
    ],
)
def test_routine_kopf_successes_are_dropped_and_the_rest_kept(message: str, kept: bool) -> None:
    record = logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, message, None, None)
    assert RoutineSuccessFilter().filter(record) is kept
