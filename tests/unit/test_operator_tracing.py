"""The operator's spans of a run (a2rl_operator.run_tracing) in a local store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from a2rl_operator.run_tracing import ROOT_SPAN, operator_tracing, record_root_span, record_run_span

from a2rl.constants import ANNOTATION_TRACE_CONTEXT
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store
from a2rl.tracing.context import carrier_json, new_traceparent
from a2rl.tracing.spans import ATTR_RUN_PREFIX, collect_spans

UID = "0b7c1f7e-1111-2222-3333-444455556666"


def run_body(annotations: dict[str, str] | None = None) -> dict[str, object]:
    meta = {"name": "demo", "namespace": "team-a", "uid": UID, "creationTimestamp": "2026-01-01T12:00:00Z"}
    if annotations is not None:
        meta["annotations"] = annotations  # type: ignore[assignment]
    return {"metadata": meta}


def test_operator_spans_and_the_root_span_belong_to_the_runs_trace(tmp_path: Path) -> None:
    uri = str(tmp_path / "store")
    tracing = operator_tracing(uri)
    assert tracing is not None and operator_tracing(uri) is tracing  # one per store
    assert operator_tracing(None) is None
    root = new_traceparent()
    run = run_body({ANNOTATION_TRACE_CONTEXT: carrier_json(root)})
    created = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    end = int(created.timestamp()) * 10**9 + 5 * 10**9  # 5 s after the creation timestamp
    assert record_run_span(tracing, run, "operator.reconcile", start_ns=end - 10, end_ns=end - 5)
    assert record_root_span(tracing, run, end)
    # An object without a uid (never created) has no trace context: no span.
    unborn: dict[str, object] = {"metadata": {"name": "demo", "namespace": "team-a"}}
    assert not record_run_span(tracing, unborn, "operator.reconcile", start_ns=0, end_ns=1)
    assert not record_root_span(tracing, unborn, end)

    spans = collect_spans(open_store(uri), RunLayout("team-a", "demo", UID))
    by_name = {s["name"]: s for s in spans}
    assert set(by_name) == {ROOT_SPAN, "operator.reconcile"}
    benchrun, child = by_name[ROOT_SPAN], by_name["operator.reconcile"]
    assert (benchrun["trace_id"], benchrun["span_id"]) == (root.trace_id, root.span_id)
    assert benchrun["parent_span_id"] is None and benchrun["service"] == "a2rl-operator"
    assert benchrun["duration_s"] == 5.0  # from the BenchRun's creation to the end
    assert child["trace_id"] == root.trace_id and child["parent_span_id"] == root.span_id
    assert child["span_id"] != root.span_id
    assert child["attributes"][ATTR_RUN_PREFIX] == f"team-a/demo-{UID}"
