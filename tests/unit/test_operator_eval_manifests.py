"""Grading in the cluster, pure parts: the eval and report Job builders, submission admission and
status, the run's aggregate scores, and the steps of the end of a run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from a2rl_operator import status as st
from a2rl_operator.benchrun import problem
from a2rl_operator.config import Egress, OperatorConfig
from a2rl_operator.grading import decisions as gr
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests import children, parse_spec
from a2rl_operator.manifests.eval_job import (
    HELDOUT_DIR,
    EvalTarget,
    eval_job,
    eval_job_name,
)
from a2rl_operator.manifests.grading_network import (
    UrlPeerError,
    egress_problems,
    endpoint_urls,
    grading_network_policy,
    grading_policy_name,
    url_peer,
)
from a2rl_operator.manifests.network import NS_NAME_LABEL, GatewayPeer
from a2rl_operator.manifests.report_job import report_job
from a2rl_recorder.dispatch import LocalDispatcher
from a2rl_tasks import TASKS, get_task, task_class

from a2rl.api.benchrun import BenchRunStatus
from a2rl.api.benchsubmission import BenchSubmissionSpec, BenchSubmissionStatus, SubmissionState
from a2rl.api.common import quantity_value
from a2rl.constants import (
    ANNOTATION_TRACE_CONTEXT,
    ENV_JUDGE_API_KEY,
    ENV_JUDGE_BASE_URL,
    ENV_JUDGE_MODEL,
    ENV_SEARCH_URL,
    ENV_TRACEPARENT,
    LABEL_RUN_UID,
    LABEL_SUBMISSION_INDEX,
)
from a2rl.errors import A2rlError
from a2rl.records.report import ReportRecord
from a2rl.records.result import ResultRecord
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store
from a2rl.tracing.context import carrier_json, new_traceparent, run_traceparent
from tests.support.pss import restricted_violations

UID = "0b7c1f7e-1111-2222-3333-444455556666"
SUB_UID = "9d9d9d9d-1111-2222-3333-444455556666"
STORE = "s3://runs/a2rl"
# The staged layout data/<task>/<data version>-seed<seed>/heldout, at arith's current data version.
HELDOUT_KEY = f"data/arith/{get_task('arith').data_version}-seed0/heldout"
GRADING = GradingConfig(grader_image="ghcr.io/a2rl/grader:0.1.0", eval_timeout_s=900,
                        eval_env={ENV_JUDGE_BASE_URL: "http://judge:8000/v1"})  # fmt: skip
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def benchrun(name: str = "demo", conds: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["python", "-m", "agent"]},
        "budget": {"wallTimeSeconds": 3600, "graceSeconds": 30, "maxSubmissions": 3},
        "evaluation": {"cpu": "4", "memory": "16Gi", "gpus": 1, "limit": 50, "backend": "vllm",
                       "judgeSecretRef": {"name": "judge", "key": "api-key"}},
    }  # fmt: skip
    base.update(spec)
    status: dict[str, Any] = {"startTime": T0.strftime("%Y-%m-%dT%H:%M:%SZ"), "conditions": conds or []}
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": name, "namespace": "team-a", "uid": UID, "generation": 1},
        "spec": base,
        "status": status,
    }


def submission(index: int = 2, submitted: datetime = T0 + timedelta(minutes=5)) -> dict[str, Any]:
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchSubmission",
        "metadata": {"name": f"demo-{index:05d}", "namespace": "team-a", "uid": SUB_UID},
        "spec": {"runName": "demo", "index": index, "modelPath": "output/v2", "modelDigest": "a" * 64,
                 "manifestUri": "s3://runs/a2rl/x/manifest.json", "submittedAt": submitted.isoformat()},
    }  # fmt: skip


def build(
    run: dict[str, Any] | None = None, grading: GradingConfig = GRADING, index: int = 2
) -> dict[str, Any]:
    run = run or benchrun()
    target = EvalTarget(index=index, store_uri=STORE, heldout_key=HELDOUT_KEY)
    return eval_job(run, submission(index), parse_spec(run), target, grading)


def containers(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    pod = job["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod.get("initContainers", []) + pod["containers"]}


# --- the eval Job -------------------------------------------------------------------------------


def test_eval_job_is_owned_by_the_submission_and_labelled() -> None:
    job = build()
    meta = job["metadata"]
    assert meta["name"] == "demo-eval-00002" == eval_job_name("demo", 2)
    (ref,) = meta["ownerReferences"]
    assert ref == {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchSubmission", "name": "demo-00002",
                   "uid": SUB_UID, "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    for labels in (meta["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels[LABEL_RUN_UID] == UID and labels[LABEL_SUBMISSION_INDEX] == "2"
        assert labels["app.kubernetes.io/component"] == "eval"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 900
    assert "ttlSecondsAfterFinished" not in job["spec"]  # logs are archived first
    long = build(benchrun(name="r" * 63))
    assert len(long["metadata"]["name"]) <= 63 and long["metadata"]["name"].endswith("-eval-00002")


def test_eval_command_is_the_local_dispatchers(tmp_path: Path) -> None:
    """The cluster runs exactly the program and arguments the local mode runs."""
    run = benchrun()
    store = open_store(str(tmp_path / "store"))
    layout = RunLayout("team-a", "demo", UID)
    local = LocalDispatcher(store, layout, task="arith", heldout=Path(HELDOUT_DIR), backend="vllm", limit=50)
    target = EvalTarget(index=2, store_uri=store.uri, heldout_key=HELDOUT_KEY)
    job = eval_job(run, submission(), parse_spec(run), target, GRADING)
    cmd = containers(job)["eval"]["command"]
    assert cmd[0] == "a2rl" and cmd[1:] == local.command(2)  # local: python -m a2rl_cli eval …
    assert "trust_remote_code" not in json.dumps(job).lower()


def test_eval_pod_is_restricted_with_its_own_resources_gpu_and_no_token() -> None:
    job = build()
    pod = job["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["restartPolicy"] == "Never"
    by_name = containers(job)
    secrets = {"fetch-heldout": "demo-grading-store", "eval": "demo-eval-00002-store"}  # each its own keys
    for c in by_name.values():
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["image"] == GRADING.grader_image
        assert c["envFrom"] == [{"secretRef": {"name": secrets[c["name"]]}}]
    ev = by_name["eval"]
    want = {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "60Gi", "nvidia.com/gpu": "1"}
    assert ev["resources"] == {"requests": want, "limits": want}
    assert "nvidia.com/gpu" not in by_name["fetch-heldout"]["resources"]["limits"]
    assert job["spec"]["template"]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    env = {e["name"]: e.get("value") for e in ev["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1" and env["HOME"] == "/tmp"
    assert env[ENV_JUDGE_BASE_URL] == "http://judge:8000/v1"
    other = benchrun(resources={"gpuResourceName": "amd.com/gpu"},
                     evaluation={"gpus": 2, "cpu": "1", "memory": "1Gi"})  # fmt: skip
    ev2 = containers(build(other))["eval"]
    assert ev2["resources"]["limits"]["amd.com/gpu"] == "2"
    cpu_only = build(benchrun(evaluation={"gpus": 0}))
    assert "annotations" not in cpu_only["spec"]["template"]["metadata"]
    assert set(containers(cpu_only)["eval"]["resources"]["limits"]) == {"cpu", "memory", "ephemeral-storage"}


def test_heldout_and_judge_key_are_mounted_only_in_the_eval_pod() -> None:
    run = benchrun()
    by_name = containers(build(run))
    ev, fetch = by_name["eval"], by_name["fetch-heldout"]
    judge = [e for e in ev["env"] if e["name"] == ENV_JUDGE_API_KEY]
    assert judge == [
        {"name": ENV_JUDGE_API_KEY, "valueFrom": {"secretKeyRef": {"name": "judge", "key": "api-key"}}}
    ]
    assert not any(e["name"] == ENV_JUDGE_API_KEY for e in fetch["env"])
    assert {"name": "heldout", "mountPath": HELDOUT_DIR, "readOnly": True} in ev["volumeMounts"]
    assert fetch["command"] == ["a2rl", "eval", "fetch-heldout", "--task", "arith", "--seed", "0",
                                "--protocol", "reference",
                                "--store", STORE, "--dest", HELDOUT_DIR]  # fmt: skip
    # The workspace (agent + recorder) has neither the held-out data nor the judge key.
    workspace = json.dumps(children(run, OperatorConfig(store_uri=STORE)))
    assert "judge" not in workspace and "heldout" not in workspace and HELDOUT_DIR not in workspace
    # The judge's endpoint (from the operator's grading settings) is set in the eval pod only.
    assert {"name": ENV_JUDGE_BASE_URL, "value": "http://judge:8000/v1"} in ev["env"]
    assert ENV_JUDGE_BASE_URL not in workspace and ENV_JUDGE_MODEL not in workspace
    # From a PVC: read-only, the task's artifact as subPath, no init container.
    pvc = build(run, GradingConfig(grader_image="g:1", heldout_pvc="heldout-data"))
    pod = pvc["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    vol = next(v for v in pod["volumes"] if v["name"] == "heldout")
    assert vol == {
        "name": "heldout",
        "persistentVolumeClaim": {"claimName": "heldout-data", "readOnly": True},
    }
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "heldout")
    assert mount == {"name": "heldout", "mountPath": HELDOUT_DIR, "readOnly": True, "subPath": HELDOUT_KEY}
    assert restricted_violations(pod) == []


def test_run_with_its_own_store_secret_passes_it_to_eval_and_report() -> None:
    run = benchrun(store={"uri": "s3://mine/x", "secretRef": "my-keys"})
    secrets = {"fetch-heldout": "demo-grading-store", "eval": "demo-eval-00002-store",
               "report": "demo-report-store"}  # fmt: skip
    for c in [*containers(build(run)).values(), report_job(run, parse_spec(run), "s3://mine/x", GRADING)
              ["spec"]["template"]["spec"]["containers"][0]]:  # fmt: skip
        assert c["envFrom"] == [
            {"secretRef": {"name": secrets[c["name"]]}},
            {"secretRef": {"name": "my-keys"}},
        ]


def a2rl(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "a2rl"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, check=False)


def test_fetch_heldout_command_downloads_and_verifies_the_artifact(tmp_path: Path) -> None:
    """The init container's command (`a2rl eval fetch-heldout`), run for real against a store."""
    from a2rl_tasks.artifacts import heldout_key, stage_to_store

    store = open_store(str(tmp_path / "store"))
    task = get_task("arith")
    fetch = ["eval", "fetch-heldout", "--task", "arith", "--seed", "0", "--store", store.uri]
    # Not staged: one clear line naming the command that stages it, no traceback.
    missing = a2rl(*fetch, "--dest", str(tmp_path / "h0"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip() == (
        f"a2rl: error: held-out data not staged at {store.url_for(heldout_key(task, 0))}: "
        f"run `a2rl data stage arith --seed 0 --store {store.uri}`"
    )
    staged = stage_to_store(task, store, source=None, seed=0)
    key = heldout_key(task, 0)
    assert key == HELDOUT_KEY
    dest = tmp_path / "heldout"
    proc = a2rl(*fetch, "--dest", str(dest))
    assert proc.returncode == 0, proc.stderr
    assert staged["heldout"]["digest"] in proc.stdout and key in proc.stdout
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["split"] == "heldout" and all((dest / rel).is_file() for rel in manifest["files"])
    # A corrupted artifact is refused (checksums), so the eval Job fails instead of scoring on it.
    first = next(iter(manifest["files"]))
    store.put_bytes(f"{key}/{first}", b"tampered\n")
    bad = a2rl(*fetch, "--dest", str(tmp_path / "h2"))
    assert bad.returncode != 0 and "does not match its manifest" in bad.stderr


def test_report_job_runs_a2rl_report_owned_by_the_run() -> None:
    run = benchrun()
    job = report_job(run, parse_spec(run), STORE, GRADING)
    assert job["metadata"]["name"] == "demo-report"
    (ref,) = job["metadata"]["ownerReferences"]
    assert ref["kind"] == "BenchRun" and ref["uid"] == UID
    pod = job["spec"]["template"]["spec"]
    assert restricted_violations(pod) == [] and pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["command"] == [
        "a2rl",
        "report",
        f"team-a/demo-{UID}",
        "--store",
        STORE,
        "--regenerate",
        "--json",
    ]
    text = json.dumps(job)
    assert "judge" not in text and "heldout" not in text
    with pytest.raises(ValueError, match="grading is off"):
        report_job(run, parse_spec(run), STORE, GradingConfig())


def test_grading_config_from_env() -> None:
    assert not GradingConfig.from_env({}).enabled
    cfg = GradingConfig.from_env({"A2RL_GRADER_IMAGE": "g:2", "A2RL_EVAL_TIMEOUT": "60",
                                  "A2RL_GRADING_DRAIN_TIMEOUT": "0", "A2RL_HELDOUT_PVC": "h",
                                  ENV_JUDGE_BASE_URL: "http://j/v1", "UNRELATED": "x"})  # fmt: skip
    assert cfg.enabled and cfg.eval_timeout_s == 60 and cfg.drain_timeout_s == 0 and cfg.heldout_pvc == "h"
    assert dict(cfg.eval_env) == {ENV_JUDGE_BASE_URL: "http://j/v1"}
    with pytest.raises(A2rlError, match="A2RL_EVAL_TIMEOUT"):
        GradingConfig.from_env({"A2RL_EVAL_TIMEOUT": "soon"})
    with pytest.raises(A2rlError, match="at least 1"):
        GradingConfig.from_env({"A2RL_EVAL_TIMEOUT": "0"})


# --- admission ----------------------------------------------------------------------------------


def _admit(
    sub: dict[str, Any], run: dict[str, Any], created: datetime | None = None
) -> tuple[str, str] | None:
    spec = BenchSubmissionSpec.model_validate(sub["spec"])
    return gr.admission(spec, created, run, parse_spec(run), allowance_s=600)


def test_admission_budget_deadline_and_finished_runs() -> None:
    run = benchrun()
    assert _admit(submission(3), run) is None
    reason, msg = _admit(submission(4), run) or ("", "")
    assert reason == gr.R_MAX_SUBMISSIONS and "maxSubmissions=3" in msg
    late = submission(1, submitted=T0 + timedelta(seconds=3601))
    assert (_admit(late, run) or ("",))[0] == gr.R_AFTER_DEADLINE
    in_time = submission(1, submitted=T0 + timedelta(seconds=3599))
    assert _admit(in_time, run, created=T0 + timedelta(seconds=3600 + 30 + 600)) is None
    reason, msg = _admit(in_time, run, created=T0 + timedelta(seconds=3600 + 30 + 601)) or ("", "")
    assert reason == gr.R_AFTER_DEADLINE and "upload allowance" in msg
    # The baseline is never over budget or late.
    assert _admit(submission(0, submitted=T0 + timedelta(days=2)), run) is None
    # No start time yet: no deadline to check.
    unstarted = benchrun()
    unstarted["status"].pop("startTime")
    assert _admit(late, unstarted) is None
    done = benchrun(conds=[_c("Succeeded", "True", "AgentCompleted")])
    assert (_admit(submission(0), done) or ("",))[0] == gr.R_RUN_FINISHED


# --- submission status --------------------------------------------------------------------------


# started_at as the eval process writes it (a2rl_grader.evaluate.utc_now: microseconds, `Z`).
RESULT_JSON: dict[str, Any] = {
    "index": 2, "task": "arith", "score": 61.25, "error": None, "evaluator_version": "arith-v1",
    "started_at": "2026-01-01T12:06:00.123456Z", "finished_at": "2026-01-01T12:07:00Z", "duration_s": 60.5,
}  # fmt: skip
RESULT = ResultRecord.from_json(RESULT_JSON)


def _wire(status: BenchSubmissionStatus | None) -> dict[str, Any]:
    assert status is not None
    return st.status_wire(status)


def test_result_is_copied_into_status_and_terminal_states_never_change() -> None:
    update = gr.from_result(RESULT, result_uri="s3://r/result.json", job_name="demo-eval-00002")
    assert update.state == SubmissionState.SUCCEEDED and update.reason == gr.R_EVALUATED
    old = BenchSubmissionStatus.model_validate({"state": "Evaluating", "reason": "Evaluating"})
    new = gr.apply_update(old, update, 1, "2026-01-01T12:07:01Z")
    status = _wire(new)
    # `Evaluated`, then the GitOps-readable conditions of a success (docs/gitops.md).
    conds = [("Evaluated", "True"), ("Reconciling", "False"), ("Stalled", "False"), ("Ready", "True"),
             ("Finished", "True"), ("Succeeded", "True"), ("Failed", "False")]  # fmt: skip
    assert status == {
        "observedGeneration": 1,
        "state": "Succeeded", "reason": "Evaluated", "score": 61.25, "evaluatorVersion": "arith-v1",
        "resultUri": "s3://r/result.json", "startedAt": RESULT_JSON["started_at"],
        "finishedAt": RESULT_JSON["finished_at"], "durationSeconds": 60.5, "cached": False,
        "evalJob": "demo-eval-00002",
        "conditions": [{"type": t, "status": v, "reason": "Evaluated",
                        "message": "score 61.25 by its eval Job",
                        "lastTransitionTime": "2026-01-01T12:07:01Z", "observedGeneration": 1}
                       for t, v in conds],
    }  # fmt: skip
    # What the API server returns reads back to the same status.
    assert _wire(BenchSubmissionStatus.model_validate(status)) == status
    # Once terminal, nothing changes it (a late Job event, a second operator).
    later = "2026-01-01T12:09:00Z"
    assert new is not None and gr.apply_update(new, gr.failed(gr.R_EVAL_JOB_FAILED, "x"), 1, later) is None
    # Writing the same state again is not a write.
    evaluating = BenchSubmissionStatus.model_validate({"state": "Evaluating"})
    same = gr.apply_update(evaluating, gr.evaluating("j"), 1, "2026-01-01T12:07:01Z")
    assert same is not None and gr.apply_update(same, gr.evaluating("j"), 1, later) is None
    assert _wire(same)["evalJob"] == "j" and "score" not in _wire(same)


def test_invalid_model_and_failed_jobs_fail_the_submission_with_the_reason() -> None:
    no_weights = {"score": None, "error": "model could not be loaded: no weights"}
    bad = gr.from_result(RESULT.model_copy(update=no_weights), result_uri="u", job_name="j")
    assert bad.state == SubmissionState.FAILED and bad.reason == gr.R_EVALUATION_ERROR
    assert bad.fields.error == "model could not be loaded: no weights" and bad.fields.score is None
    # A score of None removes an earlier one from the status.
    assert "score" in bad.fields.model_fields_set
    oom = {"exitCode": 137, "reason": "OOMKilled", "message": "out\nof memory"}
    pod = {"status": {
        "initContainerStatuses": [{"name": "fetch-heldout", "state": {"terminated": {"exitCode": 0}}}],
        "containerStatuses": [{"name": "eval", "state": {"terminated": oom}}],
    }}  # fmt: skip
    detail = gr.pod_failure(pod)
    assert detail == "container eval exited with code 137 (OOMKilled): out of memory"
    limit = "Job has reached the specified backoff limit"
    cond = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": limit}
    outcome = gr.job_outcome({"status": {"conditions": [cond]}})
    assert outcome == gr.JobOutcome(
        False, "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    )
    failed = gr.from_failed_job(outcome, "demo-eval-00002", detail)
    assert failed.state == SubmissionState.FAILED and failed.reason == gr.R_EVAL_JOB_FAILED
    assert "BackoffLimitExceeded" in failed.message and "OOMKilled" in failed.message
    timeout = gr.from_failed_job(gr.JobOutcome(False, "DeadlineExceeded", "too long"), "j")
    assert timeout.reason == gr.R_EVAL_TIMED_OUT
    assert gr.job_outcome(
        {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    ) == gr.JobOutcome(True, "Complete", "")
    assert gr.job_outcome({"status": {"active": 1}}) is None
    cached = gr.from_result(
        RESULT.model_copy(update={"index": 0, "cached": True}), result_uri="u", job_name=None, cached=True
    )
    assert cached.reason == gr.R_CACHED and cached.fields.cached is True
    assert "evalJob" not in st.status_wire(cached.fields)


# --- aggregate ----------------------------------------------------------------------------------


def _sub(index: int, state: str, score: float | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state}
    if score is not None:
        status["score"] = score
    return {"spec": {"index": index}, "status": status}


def test_aggregate_best_improvement_and_counts() -> None:
    subs = [_sub(0, "Succeeded", 10.0), _sub(1, "Succeeded", 30.1), _sub(2, "Failed"),
            _sub(3, "Succeeded", 30.1), _sub(4, "Rejected"), _sub(5, "Evaluating")]  # fmt: skip
    agg = gr.aggregate(subs)
    assert st.status_wire(agg) == {"submissionCount": 4, "baselineScore": 10.0, "bestScore": 30.1,
                                   "bestSubmission": 1, "improvement": 20.1}  # fmt: skip
    none = gr.aggregate([_sub(0, "Failed")])
    assert st.status_wire(none) == {"submissionCount": 0}
    assert none.model_fields_set == {  # the unset scores are set to None: they remove old ones
        "submission_count", "baseline_score", "best_score", "best_submission", "improvement"
    }  # fmt: skip
    old = BenchRunStatus.model_validate({"phase": "Running", "bestScore": 5.0})
    status = gr.with_aggregate(old, gr.aggregate([_sub(1, "Failed")]))
    assert st.status_wire(status) == {"phase": "Running", "submissionCount": 1}


# --- the end of a run ---------------------------------------------------------------------------


def _c(type_: str, status: str, reason: str, when: datetime = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "lastTransitionTime": st.now_iso(when)}


FINISHED = [_c("Accepted", "True", "Valid"), _c("Graded", "False", gr.R_AWAITING_AGENT),
            _c("AgentFinished", "True", "DeadlineExceeded")]  # fmt: skip


def test_end_step_waits_bounded_then_reports_then_finishes() -> None:
    running = [_c("Accepted", "True", "Valid"), _c("Graded", "False", gr.R_AWAITING_AGENT)]
    assert gr.end_step(running, [], None, T0, 60).kind is gr.StepKind.NOTHING
    assert (
        gr.end_step(FINISHED[:1] + FINISHED[2:], [], None, T0, 60).kind is gr.StepKind.NOTHING
    )  # not graded
    pending = [_sub(0, "Succeeded", 1.0), _sub(1, "Evaluating")]
    step = gr.end_step(FINISHED, pending, None, T0 + timedelta(seconds=20), 60)
    assert step.kind is gr.StepKind.WAIT_EVALUATIONS and step.pending == 1
    assert step.message == "1 evaluation(s) in flight; waiting until 2026-01-01T12:01:00Z"
    assert gr.end_step(FINISHED, pending, None, T0 + timedelta(seconds=21), 60) == step  # no countdown
    step = gr.end_step(FINISHED, pending, None, T0 + timedelta(seconds=61), 60)
    assert step.kind is gr.StepKind.START_REPORT and step.pending == 1
    assert gr.end_step(FINISHED, pending[:1], None, T0, 60).kind is gr.StepKind.START_REPORT
    job: dict[str, Any] = {"status": {"active": 1}}
    assert gr.end_step(FINISHED, pending[:1], job, T0, 60).kind is gr.StepKind.WAIT_REPORT
    job = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert gr.end_step(FINISHED, pending[:1], job, T0, 60).kind is gr.StepKind.FINISH
    job = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    failed = gr.end_step(FINISHED, pending[:1], job, T0, 60)
    assert failed.kind is gr.StepKind.REPORT_FAILED and "BackoffLimitExceeded" in failed.message
    done = [*FINISHED[:1], _c("Graded", "True", gr.R_REPORT_WRITTEN), FINISHED[2]]
    assert gr.end_step(done, [], job, T0, 60).kind is gr.StepKind.DONE


def test_step_changes_end_the_run_as_the_agents_end_implies() -> None:
    finish = gr.step_changes(gr.Step(gr.StepKind.FINISH), FINISHED, "demo-report", "s3://r/report.json")
    assert [(c.type, c.status, c.reason) for c in finish] == [
        ("Graded", "True", "ReportWritten"), ("Succeeded", "True", "BudgetExhausted")]  # fmt: skip
    failed_agent = [*FINISHED[:2], _c("AgentFinished", "True", "Failed")]
    finish = gr.step_changes(gr.Step(gr.StepKind.FINISH), failed_agent, "r")
    assert (finish[1].type, finish[1].reason) == ("Failed", "AgentFailed")
    broken = gr.step_changes(gr.Step(gr.StepKind.REPORT_FAILED, message="boom"), FINISHED, "r")
    assert {(c.type, c.status, c.reason) for c in broken} == {("Graded", "False", "ReportFailed"),
                                                              ("Failed", "True", "ReportFailed")}  # fmt: skip
    reporting = gr.step_changes(gr.Step(gr.StepKind.START_REPORT, pending=2), FINISHED, "demo-report")
    assert reporting[0].reason == gr.R_REPORTING and "2 evaluation(s) still running" in reporting[0].message


def test_workspace_observation_leaves_the_terminal_condition_to_grading() -> None:
    job = {"spec": {}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    obs = st.Observation(job=job, pod=None, queue_name=None)
    ungraded = {c.type for c in st.observe(obs, [_c("Accepted", "True", "Valid")])}
    assert "Succeeded" in ungraded
    graded = {c.type for c in st.observe(obs, [_c("Accepted", "True", "Valid"), _c("Graded", "False", "x")])}
    assert "AgentFinished" in graded and "Succeeded" not in graded
    assert (
        st.derive_phase([_c("AgentFinished", "True", "Completed"), _c("Graded", "False", "x")]) == "Grading"
    )


def test_cluster_run_json_and_report_summary() -> None:
    run = benchrun(conds=FINISHED)
    doc = gr.cluster_run_json(run, parse_spec(run), base_model_digest="b" * 64, evaluator_version="arith-v1",
                              agent_exit_code=None).to_json()  # fmt: skip
    assert doc["mode"] == "cluster" and doc["end_reason"] == "deadline_exceeded"
    assert doc["started_at"] == "2026-01-01T12:00:00Z" and doc["ended_at"] == "2026-01-01T12:00:00Z"
    assert doc["base_model"]["digest"] == "b" * 64 and doc["uid"] == UID and doc["task"] == "arith"
    report = ReportRecord(schema_version="1", baseline_score=10.0, best_score=30.1, best_submission=1,
                          improvement=20.1, valid_submissions=2, total_submissions=3, route=None)  # fmt: skip
    ref = gr.report_ref(report, "s3://r/report.json").to_wire()
    assert ref["uri"] == "s3://r/report.json" and ref["bestScore"] == 30.1 and ref["validSubmissions"] == 2
    assert (
        ref["summary"] == "baseline 10.0, best 30.1 (submission 1), improvement +20.1, 2/3 submissions scored"
    )


def test_eval_and_report_pods_carry_the_runs_trace_context() -> None:
    run = benchrun()
    tp = new_traceparent()
    run["metadata"]["annotations"] = {ANNOTATION_TRACE_CONTEXT: carrier_json(tp)}
    report = report_job(run, parse_spec(run), STORE, GRADING)["spec"]["template"]["spec"]["containers"][0]
    for container in (containers(build(run))["eval"], report):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[ENV_TRACEPARENT] == str(tp)
    # Without the annotation: the context the run's uid implies.
    env = {e["name"]: e.get("value") for e in containers(build())["eval"]["env"]}
    assert env[ENV_TRACEPARENT] == str(run_traceparent(benchrun()["metadata"]))


# --- the grading NetworkPolicy and the run's own judge -----------------------------------------

JUDGE = {"baseUrl": "http://judge.llm:8000/v1", "model": "judge-7b"}
NET_CONFIG = OperatorConfig(
    store_uri=STORE,
    store_egress=(Egress("10.9.0.0/16", 9000),),
    apiserver_egress=(Egress("10.96.0.1/32", 443),),
)
STORE_ONLY = [
    {"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 9000}]},
]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's meaning (matchLabels and the In/NotIn/Exists operators)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]  # fmt: skip
        if not ok:
            return False
    return True


def policy_for(run: dict[str, Any], grading: GradingConfig = GRADING) -> dict[str, Any]:
    """What the operator builds for the run (the task's endpoints resolved as submissions.py does)."""
    spec = parse_spec(run)
    urls = endpoint_urls(task_class(spec.task).endpoint_env, grading.run_eval_env(spec))
    return grading_network_policy(run, urls, NET_CONFIG)


def test_grading_policy_selects_eval_and_report_pods_and_allows_the_store_only() -> None:
    run = benchrun()
    policy = policy_for(run)
    meta = policy["metadata"]
    assert policy["kind"] == "NetworkPolicy" and meta["name"] == "demo-grading" == grading_policy_name(run)
    assert meta["namespace"] == "team-a"
    (ref,) = meta["ownerReferences"]
    assert ref["kind"] == "BenchRun" and ref["uid"] == UID and ref["controller"] is True
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    # arith calls no judge: the store alone; no DNS (their names are pinned), never the API
    # server (these pods have no token).
    assert spec["egress"] == STORE_ONLY
    sel = spec["podSelector"]
    eval_pod = build(run)["spec"]["template"]["metadata"]["labels"]
    report_pod = report_job(run, parse_spec(run), STORE, GRADING)["spec"]["template"]["metadata"]["labels"]
    assert selects(sel, eval_pod) and selects(sel, report_pod)
    workspace_job = next(m for m in children(run, NET_CONFIG) if m["kind"] == "Job")
    assert not selects(sel, workspace_job["spec"]["template"]["metadata"]["labels"])
    other_run = benchrun()
    other_run["metadata"]["uid"] = "another-uid"
    assert not selects(sel, build(other_run)["spec"]["template"]["metadata"]["labels"])
    # The workspace policy does not select eval pods either: each pod is under exactly one.
    ws_policy = next(m for m in children(run, NET_CONFIG) if m["kind"] == "NetworkPolicy")
    assert ws_policy["metadata"]["name"] != meta["name"]
    assert not selects(ws_policy["spec"]["podSelector"], eval_pod)
    long = policy_for(benchrun(name="r" * 63))
    assert len(long["metadata"]["name"]) <= 63 and long["metadata"]["name"].endswith("-grading")


def test_grading_policy_allows_the_judge_of_judge_based_tasks_only() -> None:
    namespace_peer = {"to": [{"namespaceSelector": {"matchLabels": {NS_NAME_LABEL: "llm"}}}]}
    # The run's own judge: an in-cluster Service → its namespace (any port: Service ≠ pod port).
    alpaca = benchrun(task="alpacaeval", evaluation={"judge": JUDGE})
    assert policy_for(alpaca)["spec"]["egress"] == [*STORE_ONLY, namespace_peer]
    # Without one, the operator's judge (`http://judge:8000/v1`: a Service of the run's namespace).
    default = policy_for(benchrun(task="alpacaeval"))["spec"]["egress"]
    assert default[-1] == {"to": [{"namespaceSelector": {"matchLabels": {NS_NAME_LABEL: "team-a"}}}]}
    # A task without a judge gets no judge egress even when the run names one.
    assert policy_for(benchrun(evaluation={"judge": JUDGE}))["spec"]["egress"] == STORE_ONLY
    # deepsearchqa also calls the search API; an IP judge is an ipBlock on the URL's port.
    grading = GradingConfig(grader_image="g:1", eval_env={ENV_SEARCH_URL: "https://10.1.2.3/search"})
    dsqa = benchrun(
        task="deepsearchqa", evaluation={"judge": {"baseUrl": "http://10.0.0.7:8080/v1", "model": "m"}}
    )
    assert policy_for(dsqa, grading)["spec"]["egress"][1:] == [
        {"to": [{"ipBlock": {"cidr": "10.0.0.7/32"}}], "ports": [{"protocol": "TCP", "port": 8080}]},
        {"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [{"protocol": "TCP", "port": 443}]},
    ]
    # No judge configured anywhere: nothing beyond the store.
    assert policy_for(benchrun(task="alpacaeval"), GradingConfig(grader_image="g:1"))["spec"]["egress"] == (
        STORE_ONLY
    )


@pytest.mark.parametrize(
    ("url", "peer"),
    [
        ("http://judge:8000/v1", GatewayPeer(None, "team-a", None)),
        ("https://judge.llm.svc.cluster.local/v1", GatewayPeer(None, "llm", None)),
        ("http://10.0.0.5/v1", GatewayPeer("10.0.0.5/32", None, 80)),
        ("https://10.0.0.5/v1", GatewayPeer("10.0.0.5/32", None, 443)),
        ("http://[fd00::1]:81/v1", GatewayPeer("fd00::1/128", None, 81)),
    ],
)
def test_url_peer(url: str, peer: GatewayPeer) -> None:
    assert url_peer(url, "team-a") == peer


def test_url_peer_refuses_what_a_network_policy_cannot_express() -> None:
    with pytest.raises(UrlPeerError, match="cannot be allowed by a NetworkPolicy"):
        url_peer("https://api.openai.com/v1", "team-a")
    with pytest.raises(UrlPeerError, match="not an http"):
        url_peer("ftp://10.0.0.5/v1", "team-a")
    # The run is not accepted; the operator's own setting is reported at start-up.
    run = benchrun(
        task="alpacaeval", evaluation={"judge": {"baseUrl": "https://api.openai.com/v1", "model": "m"}}
    )
    reason, message = problem(run, NET_CONFIG)  # type: ignore[misc]
    assert reason == "InvalidSpec" and message.startswith(
        "spec.evaluation.judge.baseUrl: host 'api.openai.com'"
    )
    assert problem(benchrun(task="alpacaeval", evaluation={"judge": JUDGE}), NET_CONFIG) is None
    cfg = GradingConfig.from_env({"A2RL_GRADER_IMAGE": "g:1", ENV_JUDGE_BASE_URL: "https://judge.example.com/v1",
                                  ENV_SEARCH_URL: "http://search.tools/api"})  # fmt: skip
    (bad,) = egress_problems(cfg)
    assert bad.startswith(f"{ENV_JUDGE_BASE_URL}: host 'judge.example.com'")
    assert egress_problems(GRADING) == []


def test_the_runs_judge_reaches_its_eval_pods_only_and_overrides_the_operators() -> None:
    run = benchrun(
        task="alpacaeval", evaluation={"judge": JUDGE, "judgeSecretRef": {"name": "k", "key": "key"}}
    )
    grading = GradingConfig(grader_image="g:1", eval_env={ENV_JUDGE_BASE_URL: "http://judge:8000/v1",
                                                           ENV_JUDGE_MODEL: "default-judge"})  # fmt: skip
    ev = containers(build(run, grading))["eval"]
    env = {e["name"]: e.get("value") for e in ev["env"]}
    assert env[ENV_JUDGE_BASE_URL] == JUDGE["baseUrl"] and env[ENV_JUDGE_MODEL] == "judge-7b"
    assert sum(e["name"] == ENV_JUDGE_BASE_URL for e in ev["env"]) == 1
    assert [e["name"] for e in ev["env"]].count(ENV_JUDGE_API_KEY) == 1
    # Without a judge in the spec the operator's stays.
    plain = {
        e["name"]: e.get("value")
        for e in containers(build(benchrun(task="alpacaeval"), grading))["eval"]["env"]
    }
    assert plain[ENV_JUDGE_MODEL] == "default-judge"
    # The workspace (agent + recorder), the fetch init container and the report get none of it.
    workspace = json.dumps(children(run, OperatorConfig(store_uri=STORE)))
    assert (
        "judge" not in workspace and ENV_JUDGE_BASE_URL not in workspace and ENV_JUDGE_MODEL not in workspace
    )
    assert not any(
        e["name"].startswith("A2RL_JUDGE") for e in containers(build(run, grading))["fetch-heldout"]["env"]
    )
    assert "judge" not in json.dumps(report_job(run, parse_spec(run), STORE, grading))


def test_baseline_cache_key_and_run_json_name_the_runs_judge(tmp_path: Path) -> None:
    """The operator keys the baseline cache with the evaluator version the eval pod computes."""
    from a2rl_operator.benchsubmission import _baseline_cache_key

    from a2rl.store.open import open_store

    store = open_store(tmp_path.as_uri())  # nothing staged: no held-out digest in the key

    grading = GradingConfig(grader_image="g:1", eval_env={ENV_JUDGE_BASE_URL: "http://judge:8000/v1",
                                                           ENV_JUDGE_MODEL: "default-judge"})  # fmt: skip
    own = parse_spec(benchrun(task="alpacaeval", evaluation={"judge": JUDGE}))
    default = parse_spec(benchrun(task="alpacaeval"))
    key_own = _baseline_cache_key(
        "alpacaeval", "d" * 64, None, grading.run_eval_env(own), store=store, seed=0
    )
    key_default = _baseline_cache_key(
        "alpacaeval", "d" * 64, None, grading.run_eval_env(default), store=store, seed=0
    )
    assert key_own.endswith("/alpacaeval-2+reference+judge-judge-7b.json")
    assert key_default.endswith("/alpacaeval-2+reference+judge-default-judge.json")
    # What the eval process computes from its own environment (the eval pod's env).
    pod_env = {
        e["name"]: e["value"]
        for e in containers(build(benchrun(task="alpacaeval", evaluation={"judge": JUDGE}), grading))["eval"][
            "env"
        ]
        if "value" in e
    }
    assert get_task("alpacaeval", pod_env).evaluator_version == "alpacaeval-2+reference+judge-judge-7b"
    assert get_task("arith", pod_env).evaluator_version == "arith-1+reference"
    # The run's protocol reaches the eval pod (A2RL_EVAL_PROTOCOL) and the operator's cache key alike.
    ours = parse_spec(benchrun(task="alpacaeval", evaluation={"judge": JUDGE, "protocol": "a2rl"}))
    key_ours = _baseline_cache_key(
        "alpacaeval", "d" * 64, None, grading.run_eval_env(ours), store=store, seed=0
    )
    assert key_ours.endswith("/alpacaeval-2+a2rl+judge-judge-7b.json")
    ours_run = benchrun(task="alpacaeval", evaluation={"judge": JUDGE, "protocol": "a2rl"})
    ours_env = {
        e["name"]: e["value"] for e in containers(build(ours_run, grading))["eval"]["env"] if "value" in e
    }
    assert get_task("alpacaeval", ours_env).evaluator_version == "alpacaeval-2+a2rl+judge-judge-7b"


def test_tasks_that_call_a_judge_declare_its_endpoint() -> None:
    """`endpoint_env` is what opens the judge egress: every task module using the judge has it."""
    import importlib
    import inspect

    for name in TASKS:
        cls = task_class(name)
        source = inspect.getsource(importlib.import_module(cls.__module__))
        assert ("a2rl_tasks.judge" in source) == (ENV_JUDGE_BASE_URL in cls.endpoint_env), name
    assert task_class("deepsearchqa").endpoint_env == (ENV_JUDGE_BASE_URL, ENV_SEARCH_URL)


def test_eval_and_report_threads_follow_their_cpu_limits() -> None:
    run = benchrun(evaluation={"cpu": "1500m", "memory": "2Gi", "backend": "transformers"})
    env = {e["name"]: e.get("value") for e in containers(build(run))["eval"]["env"]}
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    report = report_job(run, parse_spec(run), STORE, GRADING)["spec"]["template"]["spec"]["containers"][0]
    renv = {e["name"]: e.get("value") for e in report["env"]}
    assert renv["OMP_NUM_THREADS"] == str(max(1, math.ceil(quantity_value(GRADING.report_cpu))))
