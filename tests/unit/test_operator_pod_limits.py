"""The workspace pod's time and storage bounds (pure builders and the status mapping):

- the agent container is stopped by the kubelet at its budget, with the budget's own grace;
- the pod's termination grace covers the agent's grace and the recorder's whole drain, and the
  recorder is told the drain timeout the grace was sized for;
- every container of the workspace, eval and report pods has an ephemeral-storage request = limit,
  every emptyDir a size; the workspace volume's size comes from the run when it names one;
- an agent stopped at its budget ends the run `BudgetExhausted`, not `AgentFailed`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from a2rl_operator import status as st
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests import children, parse_spec
from a2rl_operator.manifests.eval_job import EvalTarget, eval_job
from a2rl_operator.manifests.job import workspace_job
from a2rl_operator.manifests.report_job import report_job
from a2rl_recorder.config import RecorderConfig

from a2rl.constants import ENV_RECORDER_DRAIN_TIMEOUT, ENV_RUN_START
from tests.support.pss import restricted_violations

UID = "0d9c6a8e-1f2b-4c3d-8e9f-a0b1c2d3e4f5"
CONFIG = OperatorConfig(store_uri="s3://runs/a2rl", recorder_drain_timeout_s=300)
GRADING = GradingConfig(grader_image="ghcr.io/a2rl/grader:test")


def benchrun(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "ghcr.io/a2rl/agent-baselines:0.1.0", "command": ["python", "-m", "agent"]},
        "budget": {"wallTimeSeconds": 3600, "graceSeconds": 45},
    }
    base.update(spec)
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "demo", "namespace": "team-a", "uid": UID},
        "spec": base,
    }


def pod_spec(run: dict[str, Any], config: OperatorConfig = CONFIG) -> dict[str, Any]:
    spec: dict[str, Any] = workspace_job(run, parse_spec(run), config)["spec"]["template"]["spec"]
    return spec


def by_name(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod.get("initContainers", []) + pod["containers"]}


def test_the_kubelet_stops_the_agent_at_its_budget_with_the_budgets_grace() -> None:
    """The deadline probe: first run at the budget after the agent started, never passes, kills
    with `graceSeconds` (not the pod's longer grace); no a2rl code in the agent image."""
    pod = pod_spec(benchrun())
    agent = by_name(pod)["agent"]
    probe = agent["livenessProbe"]
    assert probe["initialDelaySeconds"] == 3600
    assert probe["failureThreshold"] == 1 and probe["periodSeconds"] <= 5
    assert probe["terminationGracePeriodSeconds"] == 45
    command = probe["exec"]["command"]
    assert command[:2] == ["/bin/sh", "-c"] and command[2].rstrip().endswith("exit 1")
    assert agent["command"] == ["python", "-m", "agent"]  # the agent's own argv, unwrapped
    assert restricted_violations(pod) == []
    # A zero grace is still a valid probe grace (Kubernetes wants >= 1).
    no_grace = by_name(pod_spec(benchrun(budget={"wallTimeSeconds": 60, "graceSeconds": 0})))["agent"]
    assert no_grace["livenessProbe"]["terminationGracePeriodSeconds"] == 1


def test_the_pods_grace_covers_the_agents_grace_and_the_recorders_drain() -> None:
    """One drain deadline (the recorder's) and its margin: nothing doubled, no per-step allowance.
    The recorder is told that deadline and where its outcome goes (the termination message)."""
    pod = pod_spec(benchrun())
    assert pod["terminationGracePeriodSeconds"] == 45 + 300 + 15
    default = pod_spec(benchrun(), OperatorConfig(store_uri="s3://runs/a2rl"))
    assert default["terminationGracePeriodSeconds"] == 45 + 60 + 15  # namespace deletion waits half
    recorder = by_name(pod)["recorder"]
    assert recorder["restartPolicy"] == "Always"
    env = {e["name"]: e["value"] for e in recorder["env"] if "value" in e}
    assert env[ENV_RECORDER_DRAIN_TIMEOUT] == "300"
    assert ENV_RUN_START not in env  # the clock's start is the run's record (a2rl_recorder.clock)
    config = RecorderConfig.from_env(env)
    assert config.drain_timeout_s == 300 and not config.run_start_given
    assert recorder["terminationMessagePath"] == "/dev/termination-log"
    assert config.termination_message_path == Path(recorder["terminationMessagePath"])


def test_only_the_setup_and_recorder_get_a_token_short_lived_and_bound_to_the_pod() -> None:
    """They create BenchSubmissions; the agent has none; the pod automounts nothing."""
    pod = pod_spec(benchrun())
    assert pod["automountServiceAccountToken"] is False
    (volume,) = [v for v in pod["volumes"] if "projected" in v]
    sources = volume["projected"]["sources"]
    (token,) = [s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s]
    assert token["expirationSeconds"] == 600  # the shortest Kubernetes allows
    containers = by_name(pod).items()
    mounted = {n for n, c in containers if any(m["name"] == volume["name"] for m in c["volumeMounts"])}
    assert mounted == {"setup", "recorder"}


def _ephemeral(container: dict[str, Any]) -> tuple[str | None, str | None]:
    res = container.get("resources") or {}
    return (res.get("requests") or {}).get("ephemeral-storage"), (res.get("limits") or {}).get(
        "ephemeral-storage"
    )


def test_every_container_and_empty_dir_of_the_run_has_an_ephemeral_storage_bound() -> None:
    run = benchrun(resources={"ephemeralStorage": "7Gi", "workspaceSize": "3Gi"},
                   evaluation={"ephemeralStorage": "9Gi"})  # fmt: skip
    spec = parse_spec(run)
    workspace = pod_spec(run)
    submission = {"metadata": {"name": "demo-00001", "uid": "s-uid"}, "spec": {"index": 1}}
    target = EvalTarget(index=1, store_uri="s3://runs/a2rl", heldout_key="data/arith/1-seed0/heldout")
    evaluation = eval_job(run, submission, spec, target, GRADING)["spec"]["template"]["spec"]
    report = report_job(run, spec, "s3://runs/a2rl", GRADING)["spec"]["template"]["spec"]
    for pod in (workspace, evaluation, report):
        for container in by_name(pod).values():
            request, limit = _ephemeral(container)
            assert request is not None and request == limit, container["name"]
        for volume in pod["volumes"]:
            if "emptyDir" in volume:
                assert volume["emptyDir"].get("sizeLimit"), volume["name"]
    assert _ephemeral(by_name(workspace)["agent"]) == ("7Gi", "7Gi")
    # The recorder's share covers its spool (emptyDirs count against the pod's total).
    assert _ephemeral(by_name(workspace)["recorder"])[1] == f"{CONFIG.recorder_spool_gi + 1}Gi"
    assert _ephemeral(by_name(evaluation)["eval"]) == ("9Gi", "9Gi")
    (pvc,) = [m for m in children(run, CONFIG) if m["kind"] == "PersistentVolumeClaim"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "3Gi"
    (default_pvc,) = [m for m in children(benchrun(), CONFIG) if m["kind"] == "PersistentVolumeClaim"]
    assert default_pvc["spec"]["resources"]["requests"]["storage"] == CONFIG.workspace_size


def _stopped_pod(ran_s: int, exit_code: int, budget: int = 3600) -> dict[str, Any]:
    started = "2025-01-01T00:00:00Z"
    finished = f"2025-01-01T{ran_s // 3600:02d}:{ran_s % 3600 // 60:02d}:{ran_s % 60:02d}Z"
    terminated = {"exitCode": exit_code, "reason": "Error", "startedAt": started, "finishedAt": finished}
    return {
        "spec": {"containers": [{"name": "agent", "livenessProbe": {"initialDelaySeconds": budget}}]},
        "status": {"containerStatuses": [{"name": "agent", "state": {"terminated": terminated}}]},
    }


def test_an_agent_stopped_at_its_budget_ends_the_run_budget_exhausted() -> None:
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailed"}]}}
    at_budget = st.agent_finish(failed, _stopped_pod(3605, 137))
    assert at_budget is not None and at_budget.reason == st.REASON_DEADLINE_EXCEEDED
    assert "3600 s" in at_budget.message
    assert st.terminal_for(at_budget).reason == st.R_BUDGET_EXHAUSTED
    crashed = st.agent_finish(failed, _stopped_pod(600, 3))
    assert crashed is not None and crashed.reason == st.REASON_AGENT_FAILED
    assert st.stopped_at_budget(_stopped_pod(3605, 0)) is None  # exit 0 is a completion, not a stop
