"""What GitOps tools read of real BenchRuns and BenchSubmissions (docs/gitops.md), on the real
control plane with the operator (grading on, MinIO its store) driving them.

Two runs go in flight → succeeded and in flight → failed, with a submission of the first scored
and another failed; the status objects the API server returns are captured at each moment and
handed to the real readers: kstatus (sigs.k8s.io/cli-utils' `status.Compute`, built by `hack/testenv
build`), the real `kubectl wait` (started while the runs are in flight, it must return when they
end), and Argo CD's health scripts (a real Lua 5.1). kwok does not run containers: the test plays
them as the other grading tests do (`result.json` and `report.json` written as the eval and report
processes write them, the kwok pods then ended with the process's outcome).

Also: the API server refuses an edit of a BenchRun's or BenchSubmission's spec, with the message
that says why, and accepts a label edit.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.evaluate import write_result
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.api.benchrun import SPEC_IMMUTABLE_MESSAGE
from a2rl.constants import (
    API_GROUP,
    API_VERSION,
    BENCHRUN_PLURAL,
    BENCHSUBMISSION_PLURAL,
    LABEL_COMPONENT,
    LABEL_RUN_UID,
)
from a2rl.records.result import ResultRecord
from a2rl.store.base import ObjectStore
from tests.support import argocd_health as argo
from tests.support.grading_support import (
    create_run,
    custom,
    finish_pod,
    get_sub,
    layout_of,
    record_submission,
    run_name,
    running_pod,
    submit,
    wait_state,
)
from tests.support.operator_install import OperatorProcess, install_crds
from tests.support.operator_support import REPO, condition, get_run, wait_run
from tests.testenv import build

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

# The fixtures `admin`, `minio_env`, `store`, `volumes` and `operator`: tests/support/grading_fixtures.py.


@pytest.fixture(scope="module")
def tools() -> dict[str, Path]:
    """The kstatus tool and kubectl (`hack/testenv build` builds them; here too when missing)."""
    try:
        return build.ensure_tools(names=("kstatus", "kubectl"))
    except build.BuildError as exc:
        pytest.fail(f"building the GitOps tools failed:\n{exc}", pytrace=False)


def kstatus(tools: dict[str, Path], objs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(status, message) of each object, as sigs.k8s.io/cli-utils' `status.Compute` says."""
    proc = subprocess.run(
        [str(tools["kstatus"])],
        input=json.dumps(objs),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [(r["status"], r["message"]) for r in json.loads(proc.stdout)]


def a_model(root: Path, name: str) -> Path:
    """A model directory to snapshot (its content is unique: no other run's snapshot or cache matches)."""
    model = root / name
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"id": uuid.uuid4().hex}))
    return model


def finish_report(admin: client.ApiClient, store: ObjectStore, run: dict[str, Any]) -> None:
    """Play the report Job of `run`: report.json written as `a2rl report` writes it, its pod Succeeded."""
    name = run["metadata"]["name"]
    pod = running_pod(admin, run["metadata"]["namespace"], f"batch.kubernetes.io/job-name={name}-report")
    report = {"schema_version": "1", "baseline_score": None, "best_score": None, "improvement": None,
              "total_submissions": 0, "valid_submissions": 0}  # fmt: skip
    store.put_json(f"{layout_of(run).report_dir}/report.json", report)
    finish_pod(admin, pod, None)


def agent_pod(admin: client.ApiClient, run: dict[str, Any]) -> dict[str, Any]:
    meta = run["metadata"]
    return running_pod(admin, meta["namespace"], f"{LABEL_RUN_UID}={meta['uid']},{LABEL_COMPONENT}=agent")


@pytest.fixture
def kubectl_waits() -> Iterator[list[subprocess.Popen[str]]]:
    """The `kubectl wait` processes a test starts; any still running at its end is killed."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def kubectl_wait(
    tools: dict[str, Path], control_plane: Any, ns: str, what: str, condition_: str
) -> subprocess.Popen[str]:
    argv = [str(tools["kubectl"]), "--kubeconfig", str(control_plane.kubeconfig), "-n", ns, "wait",
            f"--for=condition={condition_}", what, "--timeout=90s"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_kstatus_kubectl_wait_and_argocd_read_runs_and_submissions_in_flight_succeeded_and_failed(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    control_plane: Any,
    tools: dict[str, Path],
    kubectl_waits: list[subprocess.Popen[str]],
    namespace: str,
    tmp_path: Path,
) -> None:
    ns = namespace
    good, bad = run_name(), run_name()
    # (what, object, kstatus's word, Argo CD's word) of every moment captured.
    moments: list[tuple[str, dict[str, Any], str, str]] = []

    created = create_run(admin, ns, good)
    create_run(admin, ns, bad)
    assert "status" not in created  # as the API server returned it: not observed yet
    run = wait_run(admin, ns, good, "AgentRunning")
    assert run["status"]["observedGeneration"] == run["metadata"]["generation"] == 1
    moments.append(("run in flight (agent running)", run, "InProgress", "Progressing"))
    bad_run = wait_run(admin, ns, bad, "AgentRunning")
    moments.append(("run in flight (agent running)", bad_run, "InProgress", "Progressing"))

    # `kubectl wait` on in-flight runs: each must return once the run has ended, however it ended.
    waits = {
        "good Finished": kubectl_wait(tools, control_plane, ns, f"benchrun/{good}", "Finished"),
        "good Ready": kubectl_wait(tools, control_plane, ns, f"benchrun/{good}", "Ready"),
        "bad Finished": kubectl_wait(tools, control_plane, ns, f"benchrun/{bad}", "Finished"),
        "bad Succeeded=False": kubectl_wait(tools, control_plane, ns, f"benchrun/{bad}", "Succeeded=False"),
    }
    kubectl_waits.extend(waits.values())

    # Submissions 1 (scored) and 2 (its eval Job fails), evaluated side by side.
    submit(admin, record_submission(store, run, 1, a_model(tmp_path, "v1")))
    submit(admin, record_submission(store, run, 2, a_model(tmp_path, "v2")))
    for index in (1, 2):
        sub = wait_state(admin, ns, f"{good}-{index:05d}", "Evaluating")
        moments.append((f"submission {index} evaluating", sub, "InProgress", "Progressing"))
    pod1 = running_pod(admin, ns, f"batch.kubernetes.io/job-name={good}-eval-00001")
    pod2 = running_pod(admin, ns, f"batch.kubernetes.io/job-name={good}-eval-00002")
    write_result(store, layout_of(run), 1, ResultRecord(index=1, score=61.25, error=None), [])
    finish_pod(admin, pod1, None)
    finish_pod(admin, pod2, subprocess.CompletedProcess([], 3, "", ""))
    moments.append(
        ("submission scored", wait_state(admin, ns, f"{good}-00001", "Succeeded"), "Current", "Healthy")
    )
    moments.append(
        ("submission failed", wait_state(admin, ns, f"{good}-00002", "Failed"), "Failed", "Degraded")
    )

    # The agents end: one exits 0, one fails; each run is graded (report Job), then over.
    finish_pod(admin, agent_pod(admin, run), None)
    finish_pod(admin, agent_pod(admin, bad_run), subprocess.CompletedProcess([], 3, "", ""))
    grading = wait_run(admin, ns, good, "Graded", "False", "Reporting", timeout=30)
    moments.append(("run in flight (grading)", grading, "InProgress", "Progressing"))
    finish_report(admin, store, grading)
    finish_report(admin, store, wait_run(admin, ns, bad, "Graded", "False", "Reporting", timeout=30))
    done = wait_run(admin, ns, good, "Succeeded", reason="AgentCompleted")
    moments.append(("run succeeded", done, "Current", "Healthy"))
    failed = wait_run(admin, ns, bad, "Failed", reason="AgentFailed")
    moments.append(("run failed", failed, "Failed", "Degraded"))
    ended = time.monotonic()

    # kubectl wait: every wait returned, with success, once its condition was met.
    for what, proc in waits.items():
        try:
            out, _ = proc.communicate(timeout=max(1.0, 15 - (time.monotonic() - ended)))
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"kubectl wait ({what}) did not return after the run ended") from None
        assert proc.returncode == 0 and "condition met" in out, f"{what}: {out}"
    # Then the outcome, at once (`--timeout=0s`: check once): exit 0 when Ready, else not.
    for name, ready in ((good, True), (bad, False)):
        argv = [str(tools["kubectl"]), "--kubeconfig", str(control_plane.kubeconfig), "-n", ns, "wait",
                "--for=condition=Ready", f"benchrun/{name}", "--timeout=0s"]  # fmt: skip
        once = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert (once.returncode == 0) is ready, once

    # The conditions GitOps tools read, on the real objects.
    assert condition(done, "Ready")["status"] == "True" and condition(done, "Failed")["status"] == "False"  # type: ignore[index]
    stalled = condition(failed, "Stalled")
    assert stalled is not None and (stalled["status"], stalled["reason"]) == ("True", "AgentFailed")
    assert condition(failed, "Succeeded")["status"] == "False"  # type: ignore[index]
    for what, obj, _, _ in moments:
        generation = obj["metadata"]["generation"]
        assert obj["status"]["observedGeneration"] == generation, what
        gitops = [
            c
            for c in obj["status"]["conditions"]
            if c["type"] in {"Reconciling", "Stalled", "Ready", "Finished"}
        ]
        assert len(gitops) == 4 and all(c["observedGeneration"] == generation for c in gitops), what

    # kstatus and Argo CD on each captured object.
    computed = kstatus(tools, [obj for _, obj, _, _ in moments])
    for (what, obj, want_kstatus, want_argo), (got, message) in zip(moments, computed, strict=True):
        assert got == want_kstatus, f"kstatus said {got} ({message}) of: {what}"
        health = argo.health(obj["kind"], obj)
        assert health["status"] == want_argo, f"Argo CD said {health} of: {what}"
    print(
        "\n"
        + "\n".join(
            f"{what:32} kstatus {got:10} {message}"
            for (what, *_), (got, message) in zip(moments, computed, strict=True)
        )
    )
    # An object the operator has not observed yet: kstatus cannot tell (no conditions, no
    # observedGeneration) and says Current; Argo CD's script says Progressing.
    assert kstatus(tools, [created])[0][0] == "Current"
    assert argo.health("BenchRun", created)["status"] == "Progressing"


@pytest.fixture(scope="module")
def crds(admin: client.ApiClient) -> client.CustomObjectsApi:
    install_crds(admin, REPO / "crds")
    return client.CustomObjectsApi(admin)


def _refusal(call: Any) -> str:
    with pytest.raises(ApiException) as exc:
        call()
    assert exc.value.status == 422, exc.value.body
    message: str = json.loads(str(exc.value.body))["message"]
    return message


def test_a_spec_edit_is_refused_with_why_and_a_label_edit_is_accepted(
    crds: client.CustomObjectsApi, store: ObjectStore, namespace: str, tmp_path: Path
) -> None:
    """No operator runs here: what the API server itself refuses or accepts."""
    ns, name = namespace, run_name()
    run = create_run(crds.api_client, ns, name, queueName="team-a")
    edits = {
        "spec.resources": {"spec": {"resources": {"cpu": "4", "memory": "8Gi"}}},
        "spec.queueName": {"spec": {"queueName": "team-b"}},
    }
    for what, patch in edits.items():
        message = _refusal(lambda p=patch: crds.patch_namespaced_custom_object(
            API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name, p))  # fmt: skip
        assert SPEC_IMMUTABLE_MESSAGE in message and "spec" in message, f"{what}: {message}"
    labelled: Any = crds.patch_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name,
        {"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}},
    )  # fmt: skip
    assert labelled["metadata"]["labels"]["team"] == "a" and labelled["metadata"]["generation"] == 1
    current = get_run(crds.api_client, ns, name)
    assert (
        current["spec"]["queueName"] == "team-a" and current["spec"]["resources"] == run["spec"]["resources"]
    )

    body = record_submission(store, run, 1, a_model(tmp_path, "v1"))
    sub_name = body["metadata"]["name"]
    submit(crds.api_client, body)
    edit = {"spec": {"modelPath": "output/v9"}}
    message = _refusal(lambda: crds.patch_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHSUBMISSION_PLURAL, sub_name, edit))  # fmt: skip
    assert "a BenchSubmission's spec cannot change once created" in message, message
    custom(crds.api_client).patch_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHSUBMISSION_PLURAL, sub_name, {"metadata": {"labels": {"team": "a"}}}
    )
    assert get_sub(crds.api_client, ns, sub_name)["metadata"]["labels"]["team"] == "a"
