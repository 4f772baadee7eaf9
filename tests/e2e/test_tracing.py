"""One trace per run: W3C context, the store exporter, merging, OTLP, and a real local run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from a2rl_runner.run import run_benchrun

from a2rl.api.benchrun import BenchRun
from a2rl.constants import ANNOTATION_TRACE_CONTEXT, ENV_TRACEPARENT
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from a2rl.tracing import (
    ATTR_RUN_PREFIX,
    TraceParent,
    Tracing,
    carrier_json,
    collect_spans,
    current_trace_env,
    installed,
    merge_traces,
    new_traceparent,
    parse_traceparent,
    pod_trace_env,
    read_traces,
    run_traceparent,
    span,
    timeline,
    traceparent_from_annotations,
    traceparent_from_carrier,
    uid_traceparent,
)

LAYOUT = RunLayout("local", "demo", "0123456789ab")
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _parts(store_root: Path, layout: RunLayout = LAYOUT) -> list[Path]:
    return sorted((store_root / layout.trace_parts).glob("*.jsonl"))


# --- W3C context (pure) ------------------------------------------------------------------------
def test_traceparent_parse_and_format() -> None:
    tp = parse_traceparent(TP)
    assert tp == TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
    assert str(tp) == TP and tp.sampled
    assert parse_traceparent(f"  {TP}\n") == tp
    unsampled = parse_traceparent(TP[:-2] + "00")
    assert unsampled is not None and not unsampled.sampled
    # A later version may carry more fields; they are ignored.
    assert parse_traceparent("01" + TP[2:] + "-extra") == TraceParent(tp.trace_id, tp.span_id, 1)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "",
        "garbage",
        TP.upper(),  # W3C: lower-case hex only
        "ff" + TP[2:],  # version ff is invalid
        TP + "-extra",  # version 00 has exactly four fields
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # 31 digits
    ],
)
def test_traceparent_rejects(bad: str | None) -> None:
    assert parse_traceparent(bad) is None


def test_new_traceparent_is_random_and_valid() -> None:
    a, b = new_traceparent(), new_traceparent()
    assert parse_traceparent(str(a)) == a and a.sampled
    assert a.trace_id != b.trace_id and a.span_id != b.span_id


def test_a_runs_context_is_its_annotations_else_its_uids_and_pods_get_the_env() -> None:
    uid = "3f1c2b9e-7d4a-4e0b-9a51-c2d8e6f04b17"  # a Kubernetes uid
    derived = run_traceparent({"uid": uid, "annotations": {"other": "x"}})
    assert derived is not None and parse_traceparent(str(derived)) == derived and derived.sampled
    assert derived.trace_id == "3f1c2b9e7d4a4e0b9a51c2d8e6f04b17"  # the uid: a user finds the trace
    # The same ids for every reader, every time (an operator restart starts no second trace);
    # another run gets other ones.
    assert run_traceparent({"uid": uid}) == derived == uid_traceparent(uid)
    other = run_traceparent({"uid": "9d6f0e41-2c37-4b8a-8f15-0a7e3b5c9d22"})
    assert other is not None and other.trace_id != derived.trace_id and other.span_id != derived.span_id
    # A uid that is not a UUID still gives a valid context.
    odd = uid_traceparent("not-a-uuid")
    assert parse_traceparent(str(odd)) == odd
    # A context given in the annotation (a CI pipeline's own trace) is the run's.
    tp = new_traceparent()
    annotations = {ANNOTATION_TRACE_CONTEXT: carrier_json(tp)}
    assert json.loads(annotations[ANNOTATION_TRACE_CONTEXT]) == {"traceparent": str(tp)}
    assert run_traceparent({"uid": uid, "annotations": annotations}) == tp
    assert pod_trace_env({"uid": uid, "annotations": annotations}) == [
        {"name": ENV_TRACEPARENT, "value": str(tp)}
    ]
    # A malformed one is ignored: the uid's context; an object not created yet has none.
    broken = {ANNOTATION_TRACE_CONTEXT: '{"traceparent": "nope"}'}
    assert run_traceparent({"uid": uid, "annotations": broken}) == derived
    assert traceparent_from_annotations(broken) is None
    assert pod_trace_env({"uid": uid}) == [{"name": ENV_TRACEPARENT, "value": str(derived)}]
    assert pod_trace_env({"annotations": broken}) == [] and run_traceparent({}) is None
    # A bare traceparent in the annotation is tolerated.
    assert traceparent_from_carrier(TP) == parse_traceparent(TP)
    assert traceparent_from_carrier("{not json") is None


# --- spans into the store ------------------------------------------------------------------------
def test_spans_nest_and_land_in_the_run_store(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    tracing = Tracing("runner", store=store, run_prefix=LAYOUT.prefix, new_trace=True, environ={})
    with installed(tracing), span("benchrun") as root, span("child", {"k": 1}):
        with pytest.raises(RuntimeError), span("failing"):
            raise RuntimeError("boom")
        env = current_trace_env()
    tracing.shutdown()
    spans = {s["name"]: s for s in merge_traces(store, LAYOUT)}
    assert set(spans) == {"benchrun", "child", "failing"}
    trace_id = f"{root.get_span_context().trace_id:032x}"
    assert {s["trace_id"] for s in spans.values()} == {trace_id}
    assert spans["benchrun"]["parent_span_id"] is None
    assert spans["child"]["parent_span_id"] == spans["benchrun"]["span_id"]
    assert spans["failing"]["parent_span_id"] == spans["child"]["span_id"]
    assert spans["failing"]["status"] == "ERROR" and "boom" in spans["failing"]["status_message"]
    assert spans["failing"]["events"][0]["name"] == "exception"
    assert spans["child"]["attributes"] == {"k": 1}
    assert {s["service"] for s in spans.values()} == {"a2rl-runner"}
    assert spans["child"]["pid"] == os.getpid()
    child = spans["child"]
    assert child["end_time_unix_nano"] >= child["start_time_unix_nano"] > 0
    assert child["start"].endswith("Z") and child["duration_s"] >= 0
    # The env handed to a child process names the span that was current.
    assert set(env) == {ENV_TRACEPARENT}
    passed = parse_traceparent(env[ENV_TRACEPARENT])
    assert passed is not None and passed.sampled
    assert (passed.trace_id, passed.span_id) == (trace_id, spans["child"]["span_id"])
    # Parts are per process and never rewritten; traces.jsonl is their merge.
    assert [p.name.split("-")[0] for p in _parts(tmp_path / "store")] == ["runner"]
    assert read_traces(store, LAYOUT) == merge_traces(store, LAYOUT)


def test_no_parent_no_spans(tmp_path: Path) -> None:
    """A component outside any run (no A2RL_TRACEPARENT, no new trace) records nothing."""
    store = LocalStore(tmp_path / "store")
    tracing = Tracing("report", store=store, run_prefix=LAYOUT.prefix, environ={})
    with tracing.span("report") as sp:
        assert not sp.is_recording()
    tracing.shutdown()
    assert tracing.env() == {}
    assert not (tmp_path / "store").exists() or _parts(tmp_path / "store") == []
    disabled = Tracing("runner", new_trace=True, environ={"OTEL_SDK_DISABLED": "true"})
    with disabled.span("benchrun") as sp:
        assert not sp.is_recording()


CHILD = textwrap.dedent(
    """
    import sys
    from a2rl.store.local import LocalStore
    from a2rl.tracing import init_tracing, span
    tracing = init_tracing("eval", store=LocalStore(sys.argv[1]), run_prefix=sys.argv[2])
    with span("eval_submission"):
        with span("load_model"):
            pass
    tracing.shutdown()
    """
)


def test_child_process_joins_the_trace_through_the_env(tmp_path: Path) -> None:
    root_dir = tmp_path / "store"
    store = LocalStore(root_dir)
    tracing = Tracing("recorder", store=store, run_prefix=LAYOUT.prefix, new_trace=True, environ={})
    with tracing.span("dispatch") as dispatch:
        env = {**os.environ, **tracing.env()}
        subprocess.run([sys.executable, "-c", CHILD, str(root_dir), LAYOUT.prefix], env=env, check=True)
    # The same child without the variable records nothing.
    plain = {k: v for k, v in os.environ.items() if k != ENV_TRACEPARENT}
    subprocess.run([sys.executable, "-c", CHILD, str(root_dir), LAYOUT.prefix], env=plain, check=True)
    tracing.shutdown()

    spans = {s["name"]: s for s in merge_traces(store, LAYOUT)}
    assert set(spans) == {"dispatch", "eval_submission", "load_model"}
    ctx = dispatch.get_span_context()
    assert spans["eval_submission"]["trace_id"] == f"{ctx.trace_id:032x}" == spans["dispatch"]["trace_id"]
    assert spans["eval_submission"]["parent_span_id"] == f"{ctx.span_id:016x}"
    assert spans["load_model"]["parent_span_id"] == spans["eval_submission"]["span_id"]
    assert spans["eval_submission"]["service"] == "a2rl-eval"
    assert spans["eval_submission"]["pid"] != os.getpid()
    assert sorted(p.name.split("-")[0] for p in _parts(root_dir)) == ["eval", "recorder"]


def test_exporter_keeps_spans_until_the_store_can_take_them(tmp_path: Path) -> None:
    """Spans that end before the run is known, or while the store fails, are written later."""
    root_dir = tmp_path / "store"
    tracing = Tracing("runner", new_trace=True, environ={})
    with tracing.span("before_bind"):
        pass
    assert tracing.flush()
    assert tracing.written_keys == []  # no run yet: kept in memory
    tracing.bind(LocalStore(root_dir), LAYOUT.prefix)
    assert len(tracing.written_keys) == 1
    # The store breaks: its folder becomes a file, so every write fails with a real OSError.
    shutil.move(root_dir, tmp_path / "aside")
    root_dir.write_text("not a directory")
    with tracing.span("during_outage"):
        pass
    assert not tracing.flush()
    root_dir.unlink()
    shutil.move(tmp_path / "aside", root_dir)
    with tracing.span("after_outage"):
        pass
    tracing.shutdown()
    names = [s["name"] for s in merge_traces(LocalStore(root_dir), LAYOUT)]
    assert sorted(names) == ["after_outage", "before_bind", "during_outage"]
    assert [k.rsplit("-", 1)[1] for k in tracing.written_keys] == ["00000.jsonl", "00001.jsonl"]


def test_spans_route_to_their_run_by_attribute(tmp_path: Path) -> None:
    """One process serving many runs (the operator): each span goes to its run's folder."""
    store = LocalStore(tmp_path / "store")
    other = RunLayout("team", "other", "fedcba987654")
    tracing = Tracing("operator", store=store, new_trace=True, environ={})
    with tracing.span("reconcile", {ATTR_RUN_PREFIX: other.prefix}), tracing.span("create_job"):
        pass
    with tracing.span("reconcile", {ATTR_RUN_PREFIX: LAYOUT.prefix}):
        pass
    tracing.shutdown()
    assert sorted(s["name"] for s in collect_spans(store, other)) == ["create_job", "reconcile"]
    assert [s["name"] for s in collect_spans(store, LAYOUT)] == ["reconcile"]


def test_record_span_gives_the_annotated_context_a_real_root(tmp_path: Path) -> None:
    """The operator's flow: a new run's context, pods continue it, the root span is recorded last."""
    store = LocalStore(tmp_path / "store")
    meta = {"uid": "0f4e7c1a-58b2-4d69-b3e0-7a9c2d1f6e85"}
    root = run_traceparent(meta)
    assert root is not None
    pod = Tracing("recorder", store=store, run_prefix=LAYOUT.prefix, environ=pod_trace_env_map(meta))
    with pod.span("submission") as sub:
        pass
    pod.shutdown()
    operator = Tracing("operator", store=store, run_prefix=LAYOUT.prefix, environ={})
    t0 = sub.start_time - 5_000_000_000  # type: ignore[attr-defined]
    assert operator.record_span("benchrun", root, start_time_ns=t0, end_time_ns=sub.end_time + 1)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="another trace"):
        operator.record_span("x", root, start_time_ns=t0, end_time_ns=t0, parent=new_traceparent())
    operator.shutdown()
    spans = {s["name"]: s for s in merge_traces(store, LAYOUT)}
    assert spans["benchrun"]["trace_id"] == root.trace_id and spans["benchrun"]["span_id"] == root.span_id
    assert spans["benchrun"]["parent_span_id"] is None
    assert spans["submission"]["parent_span_id"] == root.span_id
    tl = timeline(spans.values())
    assert tl["trace_id"] == root.trace_id and tl["spans"] == 2
    assert [(s["name"], s["start_offset_s"]) for s in tl["steps"]] == [("submission", 5.0)]


def pod_trace_env_map(meta: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod_trace_env(meta)}


# --- merging and the timeline (pure) -------------------------------------------------------------
def _rec(name: str, span_id: str, parent: str | None, start: float, end: float, **kw: Any) -> dict[str, Any]:
    return {
        "trace_id": kw.pop("trace_id", "a" * 32),
        "span_id": span_id,
        "parent_span_id": parent,
        "name": name,
        "service": kw.pop("service", "a2rl-runner"),
        "start_time_unix_nano": int(start * 1e9),
        "end_time_unix_nano": int(end * 1e9),
        "status": "UNSET",
        "attributes": kw.pop("attributes", {}),
    }


def test_merge_dedupes_sorts_and_skips_garbage(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    a = _rec("a", "1" * 16, None, 10, 20)
    b = _rec("b", "2" * 16, "1" * 16, 12, 13)
    c = _rec("c", "3" * 16, "1" * 16, 11, 14)

    def lines(*recs: dict[str, Any]) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in recs).encode()

    store.put_bytes(LAYOUT.trace_part("runner", 1, "x", 0), lines(b, a) + b"not json\n[1]\n\n")
    store.put_bytes(LAYOUT.trace_part("recorder", 2, "y", 0), lines(c, b))  # b twice: kept once
    store.put_bytes(f"{LAYOUT.trace_parts}/README", b"ignored: not .jsonl")
    merged = merge_traces(store, LAYOUT)
    assert [s["name"] for s in merged] == ["a", "c", "b"]
    assert [s["name"] for s in read_traces(store, LAYOUT)] == ["a", "c", "b"]
    # traces.jsonl is itself an input: a part deleted later is not lost, and nothing repeats.
    store.delete(LAYOUT.trace_part("recorder", 2, "y", 0))
    assert [s["name"] for s in merge_traces(store, LAYOUT)] == ["a", "c", "b"]
    assert merge_traces(store, RunLayout("local", "empty", "000000000000")) == []
    assert not store.exists(RunLayout("local", "empty", "000000000000").traces)


def test_timeline_lists_top_level_steps() -> None:
    root = _rec("benchrun", "1" * 16, None, 100, 200)
    spans = [
        root,
        _rec("baseline_eval", "2" * 16, "1" * 16, 101, 105),
        _rec("eval_baseline", "3" * 16, "2" * 16, 102, 104, service="a2rl-eval"),
        _rec("load_model", "4" * 16, "3" * 16, 102, 103, service="a2rl-eval"),
        _rec("submission", "5" * 16, "1" * 16, 150, 160.5, attributes={"a2rl.submission.index": 1}),
        _rec("stray", "6" * 16, None, 0, 1, trace_id="b" * 32),
    ]
    tl = timeline(spans)
    assert tl["trace_id"] == "a" * 32 and tl["spans"] == 5 and tl["duration_s"] == 100.0
    assert [(s["name"], s["start_offset_s"], s["duration_s"], s["child_spans"]) for s in tl["steps"]] == [
        ("baseline_eval", 1.0, 4.0, 2),
        ("submission", 50.0, 10.5, 0),
    ]
    assert tl["steps"][1]["submission"] == 1
    # While the report is written the root is still open: its children are the top level and
    # the origin is the earliest span.
    open_root = timeline(s for s in spans if s["name"] not in ("benchrun", "stray"))
    assert [s["name"] for s in open_root["steps"]] == ["baseline_eval", "submission"]
    assert open_root["steps"][0]["start_offset_s"] == 0.0
    assert timeline([])["steps"] == []


# --- OTLP ----------------------------------------------------------------------------------------
@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback HTTP endpoint that keeps the bodies POSTed to /v1/traces."""
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/traces":
                bodies.append(body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_otlp_export_when_the_endpoint_is_set(
    tmp_path: Path, otlp_receiver: tuple[str, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    endpoint, bodies = otlp_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    store = LocalStore(tmp_path / "store")
    tracing = Tracing("recorder", store=store, run_prefix=LAYOUT.prefix, parent=TP)
    with tracing.span("submission"):
        pass
    tracing.shutdown()
    assert bodies, "no OTLP request arrived"
    request = ExportTraceServiceRequest()
    request.ParseFromString(bodies[0])
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    (otlp_span,) = [s for ss in resource_spans.scope_spans for s in ss.spans]
    assert service == "a2rl-recorder" and otlp_span.name == "submission"
    assert otlp_span.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert otlp_span.parent_span_id.hex() == "00f067aa0ba902b7"
    # The store gets the same span as well.
    (stored,) = merge_traces(store, LAYOUT)
    assert stored["span_id"] == otlp_span.span_id.hex()


# --- a real local run ----------------------------------------------------------------------------
AGENT = textwrap.dedent(
    """
    import json, os, shutil, urllib.request
    os.makedirs("code", exist_ok=True)
    with open("code/train.py", "w") as f:
        f.write("print('pretend training')\\n")
    shutil.copytree(os.environ["MODEL_PATH"], "output/v1")
    os.chmod("output/v1", 0o755)  # copied from the read-only base model
    with open("output/v1/NOTES.txt", "w") as f:  # not the base model's bytes: really evaluated
        f.write("submitted by the tracing test\\n")
    req = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + "/submit",
        data=json.dumps({"model_path": "output/v1"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    print("agent: submit ->", urllib.request.urlopen(req, timeout=300).read().decode())
    print("agent: traceparent visible:", "A2RL_TRACEPARENT" in os.environ)
    """
)


@pytest.mark.slow
def test_local_run_writes_one_trace(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    run = BenchRun.model_validate(
        {
            "metadata": {"name": "traced"},
            "spec": {
                "task": "arith",
                "baseModel": {"name": "tiny", "source": "builtin:tiny"},
                "agent": {"command": ["python", str(agent)]},
                "budget": {"wallTimeSeconds": 120, "graceSeconds": 2},
                "evaluation": {"backend": "transformers", "limit": 8},
            },
        }
    )
    store_dir = tmp_path / "store"
    outcome = run_benchrun(run, store_uri=str(store_dir), progress=False)
    assert outcome.end_reason == "completed", outcome
    run_dir = store_dir / outcome.prefix
    assert "agent: traceparent visible: False" in (run_dir / "logs" / "agent.log").read_text()

    spans = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text().splitlines()]
    assert len({s["trace_id"] for s in spans}) == 1, "more than one trace in the run"
    services = {s["service"] for s in spans}
    assert {"a2rl-runner", "a2rl-recorder", "a2rl-eval", "a2rl-report"} <= services
    by_id = {s["span_id"]: s for s in spans}
    (root,) = [s for s in spans if s["parent_span_id"] is None]
    assert root["name"] == "benchrun" and root["service"] == "a2rl-runner"
    assert all(s["parent_span_id"] in by_id for s in spans if s is not root), "a span's parent is missing"
    names = {(s["service"], s["name"]) for s in spans}
    for expected in [
        ("a2rl-runner", "workspace_setup"),
        ("a2rl-runner", "baseline_eval"),
        ("a2rl-runner", "agent"),
        ("a2rl-recorder", "submission"),
        ("a2rl-recorder", "snapshot_model"),
        ("a2rl-recorder", "snapshot_code"),
        ("a2rl-recorder", "dispatch"),
        ("a2rl-recorder", "recorder_drain"),
        ("a2rl-eval", "eval_submission"),
        ("a2rl-eval", "restore_snapshot"),
        ("a2rl-eval", "load_model"),
        ("a2rl-eval", "generate"),
        ("a2rl-eval", "score"),
        ("a2rl-report", "report"),
    ]:
        assert expected in names, expected

    def parent(name: str, service: str) -> dict[str, Any]:
        (s,) = [x for x in spans if x["name"] == name and x["service"] == service]
        return by_id[s["parent_span_id"]]

    assert parent("submission", "a2rl-recorder") is root
    assert parent("report", "a2rl-report") is root
    assert parent("eval_submission", "a2rl-eval")["name"] == "dispatch"
    assert parent("eval_baseline", "a2rl-eval")["name"] == "baseline_eval"
    submission = next(s for s in spans if s["name"] == "submission")
    assert submission["attributes"]["a2rl.submission.index"] == 1

    # The report shows the timeline it saw (the root and the report itself were still open).
    report = json.loads((run_dir / "report" / "report.json").read_text())
    steps = report["timeline"]["steps"]
    assert report["timeline"]["trace_id"] == root["trace_id"]
    step_names = [s["name"] for s in steps]
    assert {"baseline_eval", "workspace_setup", "agent", "submission", "recorder_drain"} <= set(step_names)
    offsets = [s["start_offset_s"] for s in steps]
    assert offsets == sorted(offsets) and offsets[0] >= 0
    assert next(s for s in steps if s["name"] == "submission")["submission"] == 1
    md = (run_dir / "report" / "report.md").read_text()
    assert "## Timeline" in md and "| submission #1 | a2rl-recorder |" in md
