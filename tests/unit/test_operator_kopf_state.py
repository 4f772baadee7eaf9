"""kopf's per-object state as the operator keeps it (`kopf_state`), through kopf's own cause
detection and patches: a handled run costs no PATCH, campaigns keep their update detection."""

from __future__ import annotations

from typing import Any

import kopf
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.kopf_state import UPDATED_KINDS, diffbase_storage, progress_storage
from a2rl_operator.registry import build_registry
from kopf._cogs.structs.diffs import diff as kopf_diff
from kopf._core.intents.causes import Reason, detect_changing_cause

from a2rl.constants import (
    API_GROUP_VERSION,
    BENCHCAMPAIGN_KIND,
    BENCHCAMPAIGN_PLURAL,
    BENCHRUN_KIND,
    COND_ACCEPTED,
    FINALIZER,
)

Body = dict[str, Any]


def meta(name: str, annotations: dict[str, str] | None) -> Body:
    return {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "finalizers": [FINALIZER],
            "annotations": dict(annotations or {})}  # fmt: skip


def run(*, accepted: bool, annotations: dict[str, str] | None = None) -> Body:
    body: Body = {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHRUN_KIND,
        "metadata": meta("r1", annotations),
        "spec": {"task": "gsm8k", "agent": {"image": "agent:1"}},
    }
    if accepted:
        body["status"] = {"conditions": [{"type": COND_ACCEPTED, "status": "True", "reason": "Accepted"}]}
    return body


def campaign(spec: Body, annotations: dict[str, str] | None = None) -> Body:
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHCAMPAIGN_KIND,
        "metadata": meta("c1", annotations),
        "spec": spec,
    }


def cause_of(raw: Body, *, initial: bool = False) -> Reason:
    """What kopf's processing decides for this object (its `_detect_causes`, changing part)."""
    body = kopf.Body(raw)
    diffbase, progress = diffbase_storage(), progress_storage()
    old = diffbase.fetch(body=body)
    new = diffbase.build(body=body)
    old = progress.clear(essence=old) if old is not None else None
    new = progress.clear(essence=new)
    diff = kopf_diff(old, new)
    event = {"type": "MODIFIED", "object": raw}
    context: Any = {"resource": None, "indices": None, "logger": None, "patch": kopf.Patch(), "memo": None}
    states: Any = {"old": old, "new": new, "diff": diff, "initial": initial}
    cause = detect_changing_cause(finalizer=FINALIZER, raw_event=event, body=body, **states, **context)
    return cause.reason


def test_a_run_is_a_create_until_its_first_status_then_nothing_but_a_resume() -> None:
    assert cause_of(run(accepted=False)) is Reason.CREATE
    assert cause_of(run(accepted=False), initial=True) is Reason.CREATE  # a failed create, retried
    assert cause_of(run(accepted=True)) is Reason.NOOP
    assert cause_of(run(accepted=True), initial=True) is Reason.RESUME  # an operator restart
    # Later writes (a user's annotation, kopf's progress) are not updates: a run has no update handler.
    assert cause_of(run(accepted=True, annotations={"team": "nlp"})) is Reason.NOOP


def test_a_handled_run_gets_no_diff_base_written() -> None:
    body = kopf.Body(run(accepted=True))
    patch = kopf.Patch()
    storage = diffbase_storage()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch


def test_a_campaign_keeps_its_diff_base_annotation_so_spec_changes_are_updates() -> None:
    storage = diffbase_storage()
    first = kopf.Body(campaign({"concurrency": 2}))
    assert cause_of(dict(first)) is Reason.CREATE
    patch = kopf.Patch()
    storage.store(body=first, patch=patch, essence=storage.build(body=first))
    annotations = dict(patch["metadata"]["annotations"])
    assert "a2rl.dev/last-handled-configuration" in annotations
    assert cause_of(campaign({"concurrency": 2}, annotations)) is Reason.NOOP
    assert cause_of(campaign({"concurrency": 4}, annotations)) is Reason.UPDATE


def test_a_handler_that_succeeds_at_once_leaves_an_empty_patch() -> None:
    # What kopf does after a handler's first run: store its progress, then purge it when all are done.
    body = kopf.Body(run(accepted=False))
    patch = kopf.Patch()
    storage = progress_storage()
    key = kopf.HandlerId("on_benchrun")
    record: Any = {"started": "2026-11-28T10:00:00", "stopped": "2026-11-28T10:00:01", "retries": 1}
    storage.store(key=key, record={**record, "success": True}, body=body, patch=patch)
    assert patch  # the record, until the purge
    storage.purge(key=key, body=body, patch=patch)
    assert not patch
    # Retries in flight are still kept in the run's annotations.
    storage.store(key=key, record={**record, "success": False}, body=body, patch=patch)
    assert list(patch["metadata"]["annotations"]) == ["a2rl.dev/on_benchrun"]


def test_watched_kinds_cost_no_copy_and_only_campaigns_have_update_handlers() -> None:
    pod = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
                     "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}})  # fmt: skip
    storage = diffbase_storage()
    assert storage.build(body=pod) == {} and storage.fetch(body=pod) is None
    # The essence is what kopf compares for update handlers: only the kinds listed keep it.
    registry = build_registry(OperatorConfig(grading=GradingConfig(grader_image="g:1")))
    updated = {h.selector.any_name for h in registry._changing.get_all_handlers()
               if h.selector and (h.field or str(h.reason) == "update")}  # fmt: skip
    assert updated == {BENCHCAMPAIGN_PLURAL}
    assert set(UPDATED_KINDS) == {BENCHCAMPAIGN_KIND}
