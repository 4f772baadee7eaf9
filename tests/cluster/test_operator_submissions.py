"""Grading in the cluster on the real control plane + real MinIO: eval Jobs per BenchSubmission,
status copied from `result.json`, the run's aggregate, and the end of the run (report Job).

The operator runs as `a2rl operator` as its own ServiceAccount (the chart's RBAC), with grading
on (`A2RL_GRADER_IMAGE`) and MinIO as its store. kwok does not run containers, so the test plays
them: it runs a container's program as a local process with exactly the command and the
environment of the generated pod spec (env, envFrom Secrets, secretKeyRefs; mount paths mapped
to local directories), or writes `result.json` the way the eval process does, and then lets the
kwok pod finish with the process's outcome.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.baseline import cluster_baseline_cache_key
from a2rl_grader.evaluate import write_result
from a2rl_tasks import get_task
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import ENV_POD_DEFAULTS, LABEL_COMPONENT, LABEL_RUN_UID
from a2rl.models.tiny import build_tiny_model
from a2rl.records.result import ResultRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import hash_tree
from a2rl.tracing.context import run_traceparent
from a2rl.tracing.spans import collect_spans
from tests.support.grading_fixtures import grading_operator
from tests.support.grading_support import (
    DRAIN_TIMEOUT_S,
    EVAL_LIMIT,
    container_env,
    create_run,
    eval_job,
    finish_pod,
    layout_of,
    play,
    record_submission,
    run_name,
    running_pod,
    submission_table,
    submit,
    wait_state,
)
from tests.support.operator_install import OperatorProcess
from tests.support.operator_support import RESTRICTED, condition, get_run, wait_run

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

# The fixtures `admin`, `minio_env`, `store` and `volumes`: tests/support/grading_fixtures.py.

# The chart's podDefaults of eval and report pods (A2RL_POD_DEFAULTS): what lets the kwok nodes
# still take them (a toleration, a preferred affinity, pull Secrets), each pod's kind its own.
POD_DEFAULTS = {
    kind: {
        "tolerations": [{"key": f"a2rl.dev/{kind}", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "tier", "operator": "In",
                                                               "values": [kind]}]}}]}},
        "imagePullSecrets": [{"name": f"{kind}-pull"}],
    }
    for kind in ("eval", "report")
}  # fmt: skip


@pytest.fixture(scope="module")
def operator(
    volumes: None, store: ObjectStore, admin: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The grading operator (tests/support/grading_fixtures.py) with the eval and report pods' defaults."""
    with grading_operator(admin, tmp_path_factory, env={ENV_POD_DEFAULTS: json.dumps(POD_DEFAULTS)}) as proc:
        yield proc


def assert_pod_defaults(pod: dict[str, Any], kind: str) -> None:
    """`pod` (as the API server stored it) carries the chart's defaults of its kind."""
    want, spec = POD_DEFAULTS[kind], pod["spec"]
    assert want["tolerations"][0] in spec["tolerations"], kind
    assert spec["affinity"] == want["affinity"], kind
    assert spec["imagePullSecrets"] == want["imagePullSecrets"], kind


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"base": build_tiny_model(root / "base", seed=0), "v1": build_tiny_model(root / "v1", seed=1)}


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_submissions_are_evaluated_in_eval_jobs_and_the_run_is_graded(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    models: dict[str, Path],
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    from tests.testenv.controlplane import wait_for

    ns = make_namespace(labels=RESTRICTED)
    core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "judge"}, "stringData": {"api-key": "judge-secret"}}
    )
    name = run_name()
    judge_ref = {"name": "judge", "key": "api-key"}
    run = create_run(
        admin,
        ns,
        name,
        evaluation={
            "cpu": "1",
            "memory": "2Gi",
            "gpus": 1,
            "backend": "transformers",
            "limit": EVAL_LIMIT,
            "judgeSecretRef": judge_ref,
        },
    )
    uid = run["metadata"]["uid"]
    run = wait_run(admin, ns, name, "Graded", "False", "AwaitingAgent")
    run = wait_run(admin, ns, name, "AgentRunning")
    layout = layout_of(run)

    # --- the baseline: an eval Job, played for real (init container, then `a2rl eval submission`)
    sub0 = submit(admin, record_submission(store, run, 0, models["base"]))
    wait_state(admin, ns, f"{name}-00000", "Evaluating")
    job = eval_job(admin, ns, f"{name}-eval-00000")
    (owner,) = job.metadata.owner_references
    assert (owner.kind, owner.uid, owner.controller) == ("BenchSubmission", sub0["metadata"]["uid"], True)
    pod = running_pod(
        admin, ns, f"batch.kubernetes.io/job-name={name}-eval-00000"
    )  # admitted as `restricted`
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert_pod_defaults(pod, "eval")
    eval_c = spec["containers"][0]
    want = {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "60Gi"}
    assert eval_c["resources"]["limits"] == want
    assert {"name": "heldout", "mountPath": "/var/run/a2rl/heldout", "readOnly": True} in eval_c[
        "volumeMounts"
    ]
    assert any(e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "judge" for e in eval_c["env"])
    workspace = admin.sanitize_for_serialization(
        core.list_namespaced_pod(ns, label_selector=f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent").items[0]
    )
    assert "judge" not in json.dumps(workspace) and "heldout" not in json.dumps(workspace)

    mounts = {"/var/run/a2rl/heldout": tmp_path / "heldout", "/tmp": tmp_path / "scratch"}
    fetched = play(admin, pod, "fetch-heldout", mounts)
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.startswith("held-out data data/arith/")  # `a2rl eval fetch-heldout`
    assert (tmp_path / "heldout" / "manifest.json").is_file()
    evaluated = play(admin, pod, "eval", mounts)
    assert evaluated.returncode == 0, evaluated.stderr
    finish_pod(admin, pod, evaluated)
    sub0 = wait_state(admin, ns, f"{name}-00000", "Succeeded", timeout=60)
    result0 = store.get_json(layout.submission_result(0))
    status0 = sub0["status"]
    assert status0["score"] == result0["score"] and status0["reason"] == "Evaluated"
    assert status0["evaluatorVersion"] == result0["evaluator_version"] and status0["cached"] is False
    assert status0["resultUri"] == store.url_for(layout.submission_result(0))
    assert status0["durationSeconds"] == result0["duration_s"] and status0["evalJob"] == f"{name}-eval-00000"
    assert condition(sub0, "Evaluated")["status"] == "True"  # type: ignore[index]
    assert result0["n"] == EVAL_LIMIT and result0["backend"] == "transformers"
    # The scored baseline is cached per (task, model digest, evaluator version, held-out data).
    base_digest = hash_tree(models["base"]).digest
    key = cluster_baseline_cache_key(get_task("arith"), base_digest, EVAL_LIMIT, store, 0)
    assert store.get_json(key)["score"] == result0["score"]
    base = float(result0["score"])

    # --- submission 1: the test plays the eval container by writing result.json as it does
    submit(admin, record_submission(store, run, 1, models["v1"]))
    pod1 = running_pod(admin, ns, f"batch.kubernetes.io/job-name={name}-eval-00001")
    result1 = {
        "index": 1,
        "task": "arith",
        "score": base + 25.0,
        "error": None,
        "evaluator_version": "x1",
        "backend": "transformers",
        "n": EVAL_LIMIT,
        "correct": 2,
        "metrics": {},
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:07Z",
        "duration_s": 7.0,
        "model_digest": hash_tree(models["v1"]).digest,
    }
    write_result(store, layout, 1, ResultRecord.from_json(result1), [])
    finish_pod(admin, pod1, None)
    sub1 = wait_state(admin, ns, f"{name}-00001", "Succeeded")
    assert sub1["status"]["score"] == base + 25.0 and sub1["status"]["startedAt"] == "2026-01-01T00:00:00Z"

    # --- submission 2: the eval container crashes without a result → Failed, the run goes on
    submit(admin, record_submission(store, run, 2, models["v1"]))
    pod2 = running_pod(admin, ns, f"batch.kubernetes.io/job-name={name}-eval-00002")
    finish_pod(admin, pod2, subprocess.CompletedProcess([], 3, "", ""))
    sub2 = wait_state(admin, ns, f"{name}-00002", "Failed")
    assert sub2["status"]["reason"] == "EvalJobFailed"
    assert "container eval exited with code 3" in sub2["status"]["error"]
    assert "score" not in sub2["status"]

    # --- submission 3: over spec.budget.maxSubmissions=2 → Rejected, no eval Job
    submit(admin, record_submission(store, run, 3, models["v1"]))
    sub3 = wait_state(admin, ns, f"{name}-00003", "Rejected")
    assert sub3["status"]["reason"] == "MaxSubmissionsExceeded"
    assert eval_job(admin, ns, f"{name}-eval-00003") is None

    run = wait_for(
        lambda: (r := get_run(admin, ns, name))["status"].get("submissionCount") == 2 and r,
        timeout=30,
        what="aggregate",
    )
    st_ = run["status"]
    assert (st_["baselineScore"], st_["bestScore"], st_["bestSubmission"]) == (base, base + 25.0, 1)
    assert st_["improvement"] == 25.0 and condition(run, "Failed") is None and st_["phase"] == "Running"
    table = submission_table(admin, ns)
    assert [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0] == [
        "Name",
        "Run",
        "Index",
        "State",
        "Score",
        "Age",
    ]
    rows = {r["cells"][2]: r["cells"][3:5] for r in table["rows"]}
    assert rows == {
        0: ["Succeeded", base],
        1: ["Succeeded", base + 25.0],
        2: ["Failed", None],
        3: ["Rejected", None],
    }

    # --- end of run: the agent finishes → run.json, logs, report Job → status.report, terminal
    agent = running_pod(admin, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent")
    finish_pod(admin, agent, None)
    run = wait_run(admin, ns, name, "Graded", "False", "Reporting", timeout=30)
    assert run["status"]["phase"] == "Grading" and condition(run, "Succeeded") is None
    run_json = store.get_json(layout.run_json)
    assert run_json["mode"] == "cluster" and run_json["end_reason"] == "completed" and run_json["ended_at"]
    assert run_json["base_model"]["digest"] == hash_tree(models["base"]).digest
    assert {store.exists(layout.log(c)) for c in ("agent", "recorder", "eval-00000", "eval-00002")} == {True}
    eval_log = store.get_bytes(layout.log("eval-00000")).decode()
    assert f"===== pod {pod['metadata']['name']} container fetch-heldout =====" in eval_log
    assert f"===== pod {pod['metadata']['name']} container eval =====" in eval_log
    print("logs/agent.log:", store.get_bytes(layout.log("agent")).decode()[:300])
    rjob = batch.read_namespaced_job(f"{name}-report", ns)
    assert rjob.metadata.owner_references[0].uid == uid
    rpod = running_pod(admin, ns, f"batch.kubernetes.io/job-name={name}-report")
    assert_pod_defaults(rpod, "report")
    reported = play(admin, rpod, "report", {"/tmp": tmp_path / "report-scratch"})
    assert reported.returncode == 0, reported.stderr
    finish_pod(admin, rpod, reported)
    run = wait_run(admin, ns, name, "Succeeded", reason="AgentCompleted", timeout=60)
    assert condition(run, "Graded")["reason"] == "ReportWritten"  # type: ignore[index]
    report = run["status"]["report"]
    stored = store.get_json(f"{layout.report_dir}/report.json")
    assert report["uri"] == store.url_for(f"{layout.report_dir}/report.json")
    assert report["bestScore"] == stored["best_score"] == base + 25.0
    assert report["baselineScore"] == base and report["validSubmissions"] == 1
    assert report["summary"].startswith(
        f"baseline {base:.1f}, best {base + 25.0:.1f} (submission 1), improvement +25.0"
    )
    assert run["status"]["phase"] == "Succeeded" and run["status"]["completionTime"]
    assert store.exists(layout.log("report")) and store.exists(f"{layout.report_dir}/report.html")

    # --- one trace for the run: the operator's spans, the played eval and report processes, and
    # the root span (recorded at the end) all carry the run's trace id.
    root = run_traceparent(run["metadata"])
    assert root is not None
    spans = collect_spans(store, layout)
    assert spans and {s["trace_id"] for s in spans} == {root.trace_id}
    services = {s["service"] for s in spans}
    assert {"a2rl-operator", "a2rl-eval", "a2rl-report"} <= services, services
    (benchrun_span,) = [s for s in spans if s["name"] == "benchrun"]
    assert benchrun_span["span_id"] == root.span_id and benchrun_span["parent_span_id"] is None
    names = {s["name"] for s in spans if s["service"] == "a2rl-operator"}
    assert {"operator.reconcile", "operator.eval_job", "operator.end_of_run"} <= names
    ids = {s["span_id"] for s in spans}
    assert all(s["parent_span_id"] in ids for s in spans if s is not benchrun_span)


def test_late_over_budget_orphan_and_unstaged_submissions_are_not_evaluated(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    models: dict[str, Path],
    namespace: str,
) -> None:
    name = run_name()
    create_run(
        admin, namespace, name, budget={"wallTimeSeconds": 3600, "graceSeconds": 5, "maxSubmissions": 5}
    )
    run = wait_run(admin, namespace, name, "AgentRunning")
    late = record_submission(store, run, 1, models["v1"], submitted=datetime.now(UTC) + timedelta(hours=2))
    submit(admin, late)
    sub = wait_state(admin, namespace, f"{name}-00001", "Rejected")
    assert sub["status"]["reason"] == "AfterDeadline" and "after the budget ended" in sub["status"]["error"]
    orphan = record_submission(store, run, 2, models["v1"])
    orphan["metadata"]["name"] = "orphan-00002"
    orphan["metadata"].pop("ownerReferences")
    orphan["spec"]["runName"] = "no-such-run"
    submit(admin, orphan)
    assert wait_state(admin, namespace, "orphan-00002", "Rejected")["status"]["reason"] == "UnknownRun"
    # Seed 7 of arith was never staged: the submission fails with the staging command to run.
    other = run_name()
    create_run(admin, namespace, other, seed=7)
    run7 = wait_run(admin, namespace, other, "AgentRunning")
    submit(admin, record_submission(store, run7, 1, models["v1"]))
    sub = wait_state(admin, namespace, f"{other}-00001", "Failed")
    assert (
        sub["status"]["reason"] == "HeldoutDataMissing"
        and "a2rl data stage arith --seed 7" in sub["status"]["error"]
    )
    for job in (f"{name}-eval-00001", "no-such-run-eval-00002", f"{other}-eval-00001"):
        assert eval_job(admin, namespace, job) is None
    events = (
        client.CoreV1Api(admin)
        .list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=BenchSubmission,involvedObject.name={name}-00001"
        )
        .items
    )
    assert any(e.type == "Warning" and e.reason == "AfterDeadline" for e in events)


def test_cached_baseline_needs_no_eval_job(
    operator: OperatorProcess, admin: client.ApiClient, store: ObjectStore, namespace: str, tmp_path: Path
) -> None:
    model = build_tiny_model(tmp_path / "m", seed=11)
    digest = hash_tree(model).digest
    key = cluster_baseline_cache_key(get_task("arith"), digest, EVAL_LIMIT, store, 0)
    assert "-data-" in key, key  # keyed by the staged held-out data too
    # What an earlier run's baseline evaluation left in the cache.
    store.put_json(
        key,
        {
            "index": 0,
            "task": "arith",
            "score": 42.5,
            "error": None,
            "evaluator_version": "v",
            "n": EVAL_LIMIT,
            "correct": 3,
            "metrics": {},
            "started_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:00:03Z",
            "duration_s": 3.0,
            "model_digest": digest,
            "details": [{"id": "a", "correct": True}],
        },
    )
    name = run_name()
    create_run(admin, namespace, name)
    run = wait_run(admin, namespace, name, "Graded", "False", "AwaitingAgent")
    submit(admin, record_submission(store, run, 0, model))
    sub = wait_state(admin, namespace, f"{name}-00000", "Succeeded")
    assert sub["status"]["cached"] is True and sub["status"]["reason"] == "Cached"
    assert sub["status"]["score"] == 42.5 and "evalJob" not in sub["status"]
    assert eval_job(admin, namespace, f"{name}-eval-00000") is None
    layout = layout_of(run)
    result = store.get_json(layout.submission_result(0))
    assert result["cached"] is True and result["score"] == 42.5 and result["model_digest"] == digest
    assert store.get_bytes(layout.submission_details(0)).decode().strip() == '{"correct": true, "id": "a"}'
    from tests.testenv.controlplane import wait_for

    wait_for(
        lambda: get_run(admin, namespace, name)["status"].get("baselineScore") == 42.5,
        timeout=30,
        what="baseline in the run status",
    )


def test_end_of_run_waits_bounded_for_evaluations_and_a_failed_report_fails_the_run(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    models: dict[str, Path],
    namespace: str,
) -> None:
    name = run_name()
    uid = create_run(admin, namespace, name)["metadata"]["uid"]
    run = wait_run(admin, namespace, name, "AgentRunning")
    wait_run(admin, namespace, name, "Graded", "False", "AwaitingAgent")
    submit(admin, record_submission(store, run, 1, models["v1"]))
    wait_state(admin, namespace, f"{name}-00001", "Evaluating")
    agent = running_pod(admin, namespace, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent")
    finish_pod(admin, agent, subprocess.CompletedProcess([], 2, "", ""))  # the agent fails
    run = wait_run(admin, namespace, name, "Graded", "False", "WaitingForEvaluations", timeout=30)
    assert "1 evaluation(s) in flight" in condition(run, "Graded")["message"]  # type: ignore[index]
    assert run["status"]["phase"] == "Grading" and condition(run, "Failed") is None
    # The eval never finishes: after the drain timeout the report is written without it.
    run = wait_run(admin, namespace, name, "Graded", "False", "Reporting", timeout=DRAIN_TIMEOUT_S + 30)
    assert "1 evaluation(s) still running" in condition(run, "Graded")["message"]  # type: ignore[index]
    ended = datetime.fromisoformat(condition(run, "AgentFinished")["lastTransitionTime"])  # type: ignore[index]
    report_job = client.BatchV1Api(admin).read_namespaced_job(f"{name}-report", namespace)
    assert (report_job.metadata.creation_timestamp - ended).total_seconds() >= DRAIN_TIMEOUT_S - 1
    assert store.get_json(layout_of(run).run_json)["end_reason"] == "failed"
    rpod = running_pod(admin, namespace, f"batch.kubernetes.io/job-name={name}-report")
    finish_pod(admin, rpod, subprocess.CompletedProcess([], 1, "", ""))
    # backoffLimit 1: the Job controller tries once more; that pod fails too.
    from tests.testenv.controlplane import wait_for

    core = client.CoreV1Api(admin)

    def second_pod() -> Any:
        pods = core.list_namespaced_pod(
            namespace, label_selector=f"batch.kubernetes.io/job-name={name}-report"
        ).items
        fresh = [
            p for p in pods if p.metadata.name != rpod["metadata"]["name"] and p.status.phase == "Running"
        ]
        return fresh[0] if fresh else None

    retry = admin.sanitize_for_serialization(wait_for(second_pod, timeout=60, what="report retry pod"))
    finish_pod(admin, retry, subprocess.CompletedProcess([], 1, "", ""))
    run = wait_run(admin, namespace, name, "Failed", reason="ReportFailed", timeout=60)
    assert condition(run, "Graded")["reason"] == "ReportFailed"  # type: ignore[index]
    assert run["status"]["phase"] == "Failed" and "report" not in run["status"]
    assert condition(run, "AgentFinished")["reason"] == "Failed"  # type: ignore[index]
    # The evaluation still finishes later and is recorded, though the run is over.
    pod = running_pod(admin, namespace, f"batch.kubernetes.io/job-name={name}-eval-00001")
    write_result(store, layout_of(run), 1, ResultRecord(index=1, score=12.0, error=None), [])
    finish_pod(admin, pod, None)
    assert wait_state(admin, namespace, f"{name}-00001", "Succeeded")["status"]["score"] == 12.0


def test_grading_network_policy_and_the_runs_own_judge(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    models: dict[str, Path],
    namespace: str,
    make_namespace: Any,
    tmp_path: Path,
) -> None:
    """The first submission gets the run's `<run>-grading` NetworkPolicy (before its eval Job):
    no ingress; egress to the store and the run's judge only, no DNS: the eval pod has no resolver
    and the judge Service's name pinned to its ClusterIP. The judge's URL and model reach the eval
    container and not the workspace pod."""
    from a2rl_tasks.artifacts import stage_to_store

    from tests.support.task_data import make_alpaca_dir
    from tests.testenv.controlplane import wait_for

    stage_to_store(get_task("alpacaeval"), store, source=str(make_alpaca_dir(tmp_path / "alpaca")), seed=0)
    judge_ns = make_namespace(prefix="llm")
    judge_service = client.CoreV1Api(admin).create_namespaced_service(
        judge_ns,
        {"metadata": {"name": "judge"}, "spec": {"ports": [{"port": 8000}], "selector": {"app": "j"}}},
    )
    judge = {"baseUrl": f"http://judge.{judge_ns}:8000/v1", "model": "judge-7b"}
    name = run_name()
    evaluation = {"cpu": "1", "memory": "2Gi", "backend": "transformers", "limit": 2, "judge": judge}
    uid = create_run(admin, namespace, name, task="alpacaeval", evaluation=evaluation)["metadata"]["uid"]
    run = wait_run(admin, namespace, name, "AgentRunning")
    net, core = client.NetworkingV1Api(admin), client.CoreV1Api(admin)
    with pytest.raises(ApiException) as absent:  # nothing to grade yet: no policy
        net.read_namespaced_network_policy(f"{name}-grading", namespace)
    assert absent.value.status == 404

    submit(admin, record_submission(store, run, 1, models["v1"]))
    wait_state(admin, namespace, f"{name}-00001", "Evaluating")
    policy = admin.sanitize_for_serialization(
        net.read_namespaced_network_policy(f"{name}-grading", namespace)
    )
    (owner,) = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("BenchRun", name, uid, True)
    job = eval_job(admin, namespace, f"{name}-eval-00001")
    assert (
        policy["metadata"]["creationTimestamp"]
        <= admin.sanitize_for_serialization(job)["metadata"]["creationTimestamp"]
    )
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and not spec.get("ingress")
    store_rule = {"to": [{"ipBlock": {"cidr": "127.0.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    judge_rule = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": judge_ns}}}]}
    # No DNS; no API server: these pods have no token.
    assert spec["egress"] == [store_rule, judge_rule]
    # The API server's own reading of the selector: the run's eval pod, not its workspace pod.
    sel = spec["podSelector"]
    (expr,) = sel["matchExpressions"]
    selector = ",".join(
        [f"{k}={v}" for k, v in sel["matchLabels"].items()]
        + [f"{expr['key']} {expr['operator'].lower()} ({','.join(expr['values'])})"]
    )
    pod = running_pod(admin, namespace, f"batch.kubernetes.io/job-name={name}-eval-00001")
    selected = {p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=selector).items}
    agent = core.list_namespaced_pod(
        namespace, label_selector=f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent"
    )
    assert selected == {pod["metadata"]["name"]} and agent.items[0].metadata.name not in selected
    # The run's judge in the eval container, its name pinned to the Service's ClusterIP (the only
    # name the pod resolves: the store is an IP here); nothing of it in the workspace pod.
    env = container_env(admin, namespace, pod["spec"]["containers"][0])
    assert env["A2RL_JUDGE_BASE_URL"] == judge["baseUrl"] and env["A2RL_JUDGE_MODEL"] == "judge-7b"
    assert pod["spec"]["dnsPolicy"] == "None" and pod["spec"]["dnsConfig"] == {"nameservers": ["127.0.0.1"]}
    (alias,) = pod["spec"]["hostAliases"]
    assert alias["ip"] == judge_service.spec.cluster_ip and f"judge.{judge_ns}" in alias["hostnames"]
    workspace = json.dumps(admin.sanitize_for_serialization(agent.items[0]))
    assert "judge" not in workspace and "A2RL_JUDGE" not in workspace

    # A second submission reuses the policy (get-or-create: no second one, no change).
    submit(admin, record_submission(store, run, 2, models["base"]))
    wait_state(admin, namespace, f"{name}-00002", "Evaluating")
    again = net.read_namespaced_network_policy(f"{name}-grading", namespace)
    assert again.metadata.uid == policy["metadata"]["uid"]
    assert again.metadata.resource_version == policy["metadata"]["resourceVersion"]
    wait_for(
        lambda: len(net.list_namespaced_network_policy(namespace).items) == 2,  # workspace + grading
        timeout=10,
        what="two NetworkPolicies",
    )
