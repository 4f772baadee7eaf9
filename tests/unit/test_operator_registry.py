"""The operator's explicit kopf registry and its one writer of BenchRun status (no cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf
import pytest
from a2rl_operator import status as st
from a2rl_operator import status_writer
from a2rl_operator.benchrun import _is_quota_event, first_changes
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.registry import build_registry, configure
from kopf._cogs.structs.references import Resource
from kopf._core.intents.registries import get_default_registry

from a2rl.api.benchrun import ReportRef
from a2rl.constants import (
    COND_ACCEPTED,
    COND_ADMITTED,
    COND_FAILED,
    COND_GRADED,
    COND_QUOTA_EXCEEDED,
    COND_SUCCEEDED,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)

Body = dict[str, Any]


def handler_ids(handlers: Any) -> list[str]:
    return [str(h.id) for h in handlers.get_all_handlers()]


def test_every_handler_is_on_the_explicit_registry_in_order_and_none_on_kopfs_default() -> None:
    registry = build_registry(OperatorConfig(grading=GradingConfig(grader_image="g:1", resync_s=7)))
    assert handler_ids(registry._activities) == ["login_via_client", "_startup"]
    # A BenchRun has one create/resume handler (each more costs every run a PATCH of kopf's
    # progress annotations) and its finalizer's; no update or field handler (`kopf_state`
    # gives runs an empty essence: kopf only learns whether a run was handled).
    changing = handler_ids(registry._changing)
    assert {h for h in changing if not h.startswith("campaign-")} == {"on_benchrun", "on_benchrun_delete"}
    watching = set(handler_ids(registry._watching))
    assert {"on_job", "on_pod", "on_quota_event", "on_run_finished", "on_report_job"} <= watching
    assert "on_workload" in watching  # Kueue's Workloads of the workspace Jobs
    assert {"on_submission", "on_eval_job"} <= watching
    timers = {str(h.id): h for h in registry._spawning.get_all_handlers()}
    assert set(timers) == {"resync", "grading-resync", "campaign-resync"}
    # BenchCampaigns: create/resume/update (spec only), a delete without a finalizer, their runs
    # and their report Job watched.
    assert {"campaign-create", "campaign-resume", "campaign-update/spec", "campaign-delete"} <= set(changing)
    assert {"campaign-runs", "campaign-report-job"} <= watching
    assert getattr(timers["grading-resync"], "interval", None) == 7  # from the config, not the env
    # Importing the operator's modules registers nothing on kopf's default registry.
    default = get_default_registry()
    ours = {"_startup", "resync", "grading-resync", "on_benchrun", "on_submission", "on_job"}
    for handlers in (default._activities, default._changing, default._watching, default._spawning):
        assert not ours & set(handler_ids(handlers))


def test_job_pod_and_event_watches_are_filtered_by_the_api_server_never_hiding_a_handlers_objects() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    jobs, pods, events = (
        Resource(g, "v1", p, namespaced=True) for g, p in (("batch", "jobs"), ("", "pods"), ("", "events"))
    )
    ours = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    assert settings.watching.label_selectors.collect(jobs) == [ours]
    assert settings.watching.label_selectors.collect(pods) == [ours]
    assert settings.watching.field_selectors.collect(events) == [
        "involvedObject.kind=Job,reason=FailedCreate"
    ]
    # Every Job and pod handler's own label filter includes the selector: none misses its objects.
    registry = build_registry(OperatorConfig(grading=GradingConfig(grader_image="g:1")))
    watched = [
        h
        for h in registry._watching.get_all_handlers()
        if h.selector and h.selector.any_name in ("jobs", "pods")
    ]
    assert {str(h.id) for h in watched} >= {
        "on_job",
        "on_pod",
        "on_report_job",
        "on_eval_job",
        "campaign-report-job",
    }
    for handler in watched:
        assert (handler.labels or {}).get(LABEL_MANAGED_BY) == MANAGED_BY, handler.id
    # The quota Event filter asks for no more than the selector lets through.
    message = 'pods "w-1" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1'
    refused = {"reason": "FailedCreate", "involvedObject": {"kind": "Job"}, "message": message}
    assert _is_quota_event(kopf.Body(refused))
    assert not _is_quota_event(kopf.Body({**refused, "reason": "SuccessfulCreate"}))


class FakeKube:
    """`Kube.update_status` over one in-memory BenchRun, with `conflicts` 409s first."""

    def __init__(self, run: Body, conflicts: int = 0) -> None:
        self.run = run
        self.conflicts = conflicts
        self.writes = 0

    def update_status(
        self,
        namespace: str,
        name: str,
        mutate: Callable[[Body], Body | None],
        *,
        initial: Body | None = None,
        written: Callable[[Body], None] | None = None,
    ) -> Body | None:
        while True:
            status = mutate(self.run)
            if status is None:
                return None
            if self.conflicts:
                self.conflicts -= 1
                continue
            self.run = {**self.run, "status": status}
            self.writes += 1
            if written is not None:
                written(self.run)
            return status

    def post_event(self, ref: Body, type_: str, reason: str, message: str) -> None:
        kopf.event(ref, type=type_, reason=reason, message=message)  # as Kube does outside a dying namespace


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(kopf, "event", lambda _obj, *, type, reason, message: posted.append((type, reason)))
    return posted


def run_body() -> Body:
    return {"metadata": {"name": "demo", "namespace": "ns", "uid": "u1", "generation": 2}, "status": {}}


def test_write_status_derives_phase_and_posts_one_event_per_transition(events: list[tuple[str, str]]) -> None:
    kube = FakeKube(run_body(), conflicts=1)
    written = status_writer.write_status(kube, "ns", "demo", lambda _c: st.rejection("UnknownTask", "nope"))
    assert [c.type for c in written] == [COND_ACCEPTED, COND_FAILED]
    status = kube.run["status"]
    assert status["phase"] == "Failed" and status["observedGeneration"] == 2 and status["completionTime"]
    assert events == [("Warning", "UnknownTask")]  # one reason, one Event
    # The same changes again: no write, no Event.
    assert (
        status_writer.write_status(kube, "ns", "demo", lambda _c: st.rejection("UnknownTask", "nope")) == []
    )
    assert kube.writes == 1 and len(events) == 1


def test_every_status_write_keeps_the_run_as_written_for_refresh(events: list[tuple[str, str]]) -> None:
    """`refresh` reads runs from `status_writer.RUNS`: each write is kept there as answered, so a
    read between the write and its watch event still sees what was written."""
    kube = FakeKube({**run_body(), "metadata": {**run_body()["metadata"], "name": "kept-as-written"}})
    status_writer.write_status(kube, "ns", "kept-as-written", lambda _c: [st.accepted()])
    kept = status_writer.RUNS.get("ns", "kept-as-written")
    assert kept is not None and kept["status"] == kube.run["status"]
    assert st.get_condition(st.run_conditions(kept), COND_ACCEPTED) is not None
    status_writer.RUNS.saw(kept, "DELETED")


def test_write_status_edits_fields_and_respects_only_if(events: list[tuple[str, str]]) -> None:
    kube = FakeKube(run_body())
    status_writer.write_status(
        kube, "ns", "demo", edit=lambda _r, s: s.model_copy(update={"best_score": 1.5})
    )
    assert kube.run["status"] == {"bestScore": 1.5} and events == []
    status_writer.write_status(
        kube,
        "ns",
        "demo",
        lambda _c: [st.accepted()],
        edit=lambda _r, s: s.model_copy(update={"report": ReportRef(uri="x", schema_version="1")}),
        only_if=bool,  # no conditions yet: nothing is written
    )
    assert kube.run["status"] == {"bestScore": 1.5} and kube.writes == 1


def test_progress_gets_no_event_a_warning_and_the_end_do(events: list[tuple[str, str]]) -> None:
    kube = FakeKube(run_body())
    status_writer.write_status(kube, "ns", "demo", lambda _c: [st.accepted()])
    assert kube.writes == 1 and events == []  # a step: in the conditions only
    quota = st.Change(COND_QUOTA_EXCEEDED, st.TRUE, st.R_EXCEEDED_QUOTA, 'exceeded quota: "gpus"')
    status_writer.write_status(kube, "ns", "demo", lambda _c: [quota])
    done = st.Change(COND_SUCCEEDED, st.TRUE, st.R_AGENT_COMPLETED, "the agent exited 0")
    status_writer.write_status(kube, "ns", "demo", lambda _c: [done])
    assert kube.writes == 3
    assert events == [("Warning", st.R_EXCEEDED_QUOTA), ("Normal", st.R_AGENT_COMPLETED)]


@pytest.mark.parametrize("grading", [False, True])
def test_an_accepted_runs_first_status_is_one_write_with_its_new_jobs_state(grading: bool) -> None:
    config = OperatorConfig(grading=GradingConfig(grader_image="grader:1" if grading else None))
    new_job = {"metadata": {"name": "demo-workspace", "uid": "j1"}, "spec": {"suspend": False}, "status": {}}
    kube = FakeKube(run_body())
    written = status_writer.write_status(kube, "ns", "demo", first_changes(config, new_job, None))
    types = [c.type for c in written]
    assert types[0] == COND_ACCEPTED and (COND_GRADED in types) is grading
    assert COND_ADMITTED in types  # no Kueue queue: the Job runs directly, said at once
    assert kube.writes == 1 and kube.run["status"]["phase"] not in ("Failed", "Succeeded")
    # A resumed run (its Job existed): the same again changes nothing; `refresh` observes the rest.
    again = status_writer.write_status(kube, "ns", "demo", first_changes(config, None, None))
    assert again == [] and kube.writes == 1
