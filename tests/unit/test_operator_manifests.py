"""The pure manifest builders: owner refs, labels, restricted PSS, GPUs, Kueue, deadline, isolation."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
from a2rl_operator.config import Egress, OperatorConfig, parse_egress
from a2rl_operator.manifests import children, parse_spec
from a2rl_operator.manifests.common import MAX_NAME, child_name
from a2rl_operator.manifests.job import active_deadline_seconds, workspace_job
from a2rl_operator.manifests.network import GatewayError, network_policy, parse_gateway
from a2rl_recorder.config import RecorderConfig

from a2rl.api.common import quantity_value
from a2rl.constants import (
    AGENT_CONTRACT_ENV,
    ANNOTATION_DO_NOT_DISRUPT,
    ANNOTATION_TRACE_CONTEXT,
    DISPATCH_CLUSTER,
    ENV_S3_SECRET_KEY,
    ENV_STORE_URI,
    ENV_TRACEPARENT,
    LABEL_KUEUE_QUEUE,
    LABEL_RUN_NAME,
    LABEL_RUN_UID,
)
from a2rl.errors import A2rlError
from a2rl.tracing.context import carrier_json, new_traceparent, traceparent_from_carrier, uid_traceparent
from tests.support.pss import restricted_violations

UID = "0b7c1f7e-1111-2222-3333-444455556666"
CONFIG = OperatorConfig(
    store_uri="s3://runs/a2rl",
    store_credentials={"AWS_ACCESS_KEY_ID": "ak", ENV_S3_SECRET_KEY: "sk"},
    store_egress=(Egress("10.0.0.9/32", 9000),),
    setup_allowance_s=600,
)


def benchrun(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "Qwen/Qwen2.5-0.5B", "source": "builtin:tiny"},
        "agent": {
            "image": "agent:1",
            "command": ["python", "-m", "agent"],
            "env": [{"name": "X", "value": "1"}],
        },
        "budget": {"wallTimeSeconds": 3600, "graceSeconds": 30},
    }
    base.update(spec)
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {
            "name": "demo",
            "namespace": "team-a",
            "uid": UID,
            "generation": 1,
            "labels": {"team": "nlp", "a2rl.dev/run-uid": "spoofed", "a2rl.dev/evil": "x"},
        },
        "spec": base,
    }


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs}


def test_every_child_is_owned_by_the_run_and_labelled() -> None:
    objs = children(benchrun(), CONFIG)
    assert [o["kind"] for o in objs] == [
        "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Secret", "Job",
    ]  # fmt: skip
    for obj in objs:
        meta = obj["metadata"]
        assert meta["namespace"] == "team-a"
        (ref,) = meta["ownerReferences"]
        assert ref == {
            "apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchRun", "name": "demo", "uid": UID,
            "controller": True, "blockOwnerDeletion": True,
        }  # fmt: skip
        labels = meta["labels"]
        assert labels[LABEL_RUN_UID] == UID  # the user's spoofed value is replaced
        assert labels[LABEL_RUN_NAME] == "demo"
        assert "a2rl.dev/evil" not in labels
        assert labels["team"] == "nlp"
        assert labels["app.kubernetes.io/managed-by"] == "a2rl-operator"


def test_pod_passes_the_restricted_standard_and_the_checker_catches_violations() -> None:
    pod = workspace_job(benchrun(), parse_spec(benchrun()), CONFIG)["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    bad = copy.deepcopy(pod)
    bad["initContainers"][1]["securityContext"]["allowPrivilegeEscalation"] = True
    bad["containers"][0]["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
    bad["securityContext"].pop("seccompProfile")
    bad["containers"][0]["securityContext"].pop("seccompProfile")
    bad["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    problems = "\n".join(restricted_violations(bad))
    assert "initContainers[recorder]: allowPrivilegeEscalation must be false" in problems
    assert "containers[agent]: capabilities must drop ALL" in problems
    assert "SYS_ADMIN" in problems
    assert "containers[agent]: seccompProfile must be RuntimeDefault" in problems
    assert "hostPath is forbidden" in problems
    root = copy.deepcopy(pod)
    root["securityContext"]["runAsNonRoot"] = False
    for c in root["containers"] + root["initContainers"]:
        c["securityContext"].pop("runAsNonRoot")
    assert any("runAsNonRoot" in p for p in restricted_violations(root))


def test_agent_gets_the_contract_env_but_no_token_and_no_store_credentials() -> None:
    job = workspace_job(benchrun(), parse_spec(benchrun()), CONFIG)
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (agent,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert set(AGENT_CONTRACT_ENV) <= set(env)
    assert env["GRADING_SERVER_URL"] == "http://127.0.0.1:5000"
    assert env["MODEL_PATH"] == "/workspace/models/Qwen_Qwen2.5-0.5B"
    assert env["X"] == "1" and env["SEED"] == "0"
    assert "envFrom" not in agent
    assert [m["mountPath"] for m in agent["volumeMounts"]] == ["/workspace"]
    setup, recorder = pod["initContainers"]
    assert "restartPolicy" not in setup  # runs to completion first
    assert recorder["restartPolicy"] == "Always"  # native sidecar
    assert recorder["command"] == ["a2rl", "recorder", "serve"]
    assert {"secretRef": {"name": "demo-store"}} in recorder["envFrom"]
    token_mounts = [m for m in recorder["volumeMounts"] if m["name"] == "runner-token"]
    assert token_mounts and token_mounts[0]["readOnly"] is True
    renv = {e["name"]: e["value"] for e in recorder["env"]}
    assert renv["A2RL_RUN_PREFIX"] == f"team-a/demo-{UID}"
    assert renv["A2RL_RUN_TIMEOUT"] == "3600"


@pytest.mark.parametrize(
    ("working_dir", "expected"),
    [(None, "/workspace"), ("code", "/workspace/code"), ("/workspace/code/x", "/workspace/code/x")],
)
def test_the_agents_working_dir_is_absolute_in_the_pod(working_dir: str | None, expected: str) -> None:
    doc = benchrun()
    if working_dir is not None:
        doc["spec"]["agent"]["workingDir"] = working_dir
    (agent,) = workspace_job(doc, parse_spec(doc), CONFIG)["spec"]["template"]["spec"]["containers"]
    assert agent["workingDir"] == expected


def test_store_secret_carries_uri_and_credentials_unless_the_run_names_its_own() -> None:
    secret = by_kind(children(benchrun(), CONFIG))["Secret"]
    assert secret["stringData"][ENV_STORE_URI] == "s3://runs/a2rl"
    assert secret["stringData"][ENV_S3_SECRET_KEY] == "sk"
    own = benchrun(store={"uri": "s3://mine/x", "secretRef": "my-keys"})
    objs = by_kind(children(own, CONFIG))
    assert objs["Secret"]["stringData"] == {ENV_STORE_URI: "s3://mine/x"}
    for init in objs["Job"]["spec"]["template"]["spec"]["initContainers"]:
        assert {"secretRef": {"name": "my-keys"}} in init["envFrom"]


def test_gpu_requests_equal_limits_and_gpu_pods_are_not_disrupted() -> None:
    run = benchrun(resources={"cpu": "4", "memory": "16Gi", "gpus": 2, "gpuResourceName": "nvidia.com/gpu"})
    job = workspace_job(run, parse_spec(run), CONFIG)
    agent = job["spec"]["template"]["spec"]["containers"][0]
    assert agent["resources"]["requests"] == {
        "cpu": "4",
        "memory": "16Gi",
        "nvidia.com/gpu": "2",
        "ephemeral-storage": "20Gi",
    }
    assert agent["resources"]["limits"] == agent["resources"]["requests"]
    assert job["spec"]["template"]["metadata"]["annotations"] == {ANNOTATION_DO_NOT_DISRUPT: "true"}
    cpu_only = workspace_job(benchrun(), parse_spec(benchrun()), CONFIG)
    assert (
        "nvidia.com/gpu" not in cpu_only["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    )
    assert "annotations" not in cpu_only["spec"]["template"]["metadata"]


def test_kueue_queue_label_and_suspend() -> None:
    queued = benchrun(queueName="gpu-queue", runtimeClassName="gvisor")
    job = workspace_job(queued, parse_spec(queued), CONFIG)
    assert job["metadata"]["labels"][LABEL_KUEUE_QUEUE] == "gpu-queue"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["template"]["spec"]["runtimeClassName"] == "gvisor"
    plain = workspace_job(benchrun(), parse_spec(benchrun()), CONFIG)
    assert LABEL_KUEUE_QUEUE not in plain["metadata"]["labels"]
    assert plain["spec"]["suspend"] is False
    # A user cannot smuggle a queue label onto the Job through the BenchRun's labels.
    sneaky = benchrun()
    sneaky["metadata"]["labels"][LABEL_KUEUE_QUEUE] = "other"
    assert LABEL_KUEUE_QUEUE not in workspace_job(sneaky, parse_spec(sneaky), CONFIG)["metadata"]["labels"]


def test_deadline_is_budget_plus_grace_plus_setup_allowance_plus_the_recorders_drain() -> None:
    """The Job deadline is a backstop behind the agent's own stop and the recorder's whole drain."""
    job = workspace_job(benchrun(), parse_spec(benchrun()), CONFIG)
    drain = 60 + 15  # A2RL_RECORDER_DRAIN_TIMEOUT (one deadline) + the margin after it
    assert job["spec"]["activeDeadlineSeconds"] == 3600 + 30 + 600 + drain
    quick = OperatorConfig(setup_allowance_s=0, recorder_drain_timeout_s=10)
    assert active_deadline_seconds(parse_spec(benchrun()), quick) == 3630 + 25
    assert job["spec"]["backoffLimit"] == 0
    assert "ttlSecondsAfterFinished" not in job["spec"]


def test_runner_role_can_create_submissions_and_read_only_its_run() -> None:
    role = by_kind(children(benchrun(), CONFIG))["Role"]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources == {"benchsubmissions", "benchruns"}
    assert not any("/status" in r for r in resources)
    run_rule = next(r for r in role["rules"] if r["resources"] == ["benchruns"])
    assert run_rule["resourceNames"] == ["demo"] and run_rule["verbs"] == ["get"]


def test_network_policy_denies_ingress_and_limits_egress() -> None:
    run = benchrun(llmGateway="litellm.gateways:4000")
    pol = network_policy(run, "litellm.gateways:4000", CONFIG)["spec"]
    assert pol["policyTypes"] == ["Ingress", "Egress"] and pol["ingress"] == []
    peers = [rule["to"][0] for rule in pol["egress"]]
    assert {"ipBlock": {"cidr": "10.0.0.9/32"}} in peers
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateways"}}} in peers
    # No DNS (a tunnel to any name server): the pod's names are pinned (test_operator_dns_pins.py).
    assert not any(p.get("port") == 53 for rule in pol["egress"] for p in rule.get("ports", []))
    assert len(pol["egress"]) == 2  # the store, the LLM gateway
    assert pol["podSelector"]["matchLabels"][LABEL_RUN_UID] == UID


@pytest.mark.parametrize(
    ("text", "cidr", "namespace", "port"),
    [
        ("10.1.2.3", "10.1.2.3/32", None, None),
        ("10.1.0.0/16:8000", "10.1.0.0/16", None, 8000),
        ("llm.gw", None, "gw", None),
        ("llm.gw.svc.cluster.local:443", None, "gw", 443),
    ],
)
def test_gateway_forms(text: str, cidr: str | None, namespace: str | None, port: int | None) -> None:
    peer = parse_gateway(text)
    assert (peer.cidr, peer.namespace, peer.port) == (cidr, namespace, port)


@pytest.mark.parametrize("text", ["api.openai.com", "gateway", "10.0.0.1:99999"])
def test_gateway_that_network_policy_cannot_express_is_refused(text: str) -> None:
    with pytest.raises(GatewayError):
        parse_gateway(text)


def test_long_run_names_still_give_dns_label_child_names() -> None:
    long = "r" * 63
    name = child_name(long, "workspace")
    assert len(name) <= MAX_NAME and name.endswith("-workspace")
    assert child_name(long, "workspace") == name != child_name("r" * 62 + "s", "workspace")
    assert child_name("demo", "workspace") == "demo-workspace"


def test_parse_egress() -> None:
    assert parse_egress("10.0.0.1:6443") == Egress("10.0.0.1/32", 6443)
    assert parse_egress("10.0.0.0/8") == Egress("10.0.0.0/8", None)
    with pytest.raises(A2rlError):
        parse_egress("minio.example.com:9000")


def test_trace_context_reaches_the_recorder_but_never_the_agent() -> None:
    traced = benchrun()
    carrier = carrier_json(new_traceparent())
    traced["metadata"]["annotations"] = {ANNOTATION_TRACE_CONTEXT: carrier}
    pod = workspace_job(traced, parse_spec(traced), CONFIG)["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    for init in pod["initContainers"]:
        renv = {e["name"]: e.get("value") for e in init["env"]}
        assert renv[ENV_TRACEPARENT] == str(traceparent_from_carrier(carrier))
    assert ENV_TRACEPARENT not in {e["name"] for e in agent["env"]}
    # A run without the annotation: the context its uid implies (no write needed to know it).
    plain = workspace_job(benchrun(), parse_spec(benchrun()), CONFIG)["spec"]["template"]["spec"]
    renv = {e["name"]: e.get("value") for e in plain["initContainers"][1]["env"]}
    assert renv[ENV_TRACEPARENT] == str(uid_traceparent(benchrun()["metadata"]["uid"]))


def test_recorder_dispatches_to_the_cluster_and_spools_in_its_own_empty_dir() -> None:
    pod = workspace_job(benchrun(), parse_spec(benchrun()), CONFIG)["spec"]["template"]["spec"]
    _, recorder = pod["initContainers"]
    (agent,) = pod["containers"]
    env = {e["name"]: e["value"] for e in recorder["env"] if "value" in e}
    # The recorder's own configuration parser accepts the pod's environment as cluster mode.
    cfg = RecorderConfig.from_env(env)
    assert cfg.dispatch == DISPATCH_CLUSTER and cfg.heldout_path is None
    assert (cfg.run_name, cfg.run_namespace, cfg.run_uid) == ("demo", "team-a", UID)
    assert cfg.spool_dir is not None
    (spool,) = [m for m in recorder["volumeMounts"] if Path(m["mountPath"]) == cfg.spool_dir]
    (volume,) = [v for v in pod["volumes"] if v["name"] == spool["name"]]
    assert volume == {"name": spool["name"], "emptyDir": {"sizeLimit": "20Gi"}}
    assert spool["name"] not in {m["name"] for m in agent["volumeMounts"]}  # never in the sandbox
    assert not cfg.spool_dir.is_relative_to(cfg.workspace)


def test_setup_container_prepares_the_workspace_before_the_recorder_with_the_recorders_config() -> None:
    run = benchrun(seed=3)
    pod = workspace_job(run, parse_spec(run), CONFIG)["spec"]["template"]["spec"]
    setup, recorder = pod["initContainers"]
    # The ML stack (building/copying the base model, the task registry) is in the set-up image.
    assert setup["name"] == "setup" and setup["image"] == CONFIG.setup_image != recorder["image"]
    assert setup["terminationMessagePolicy"] == "FallbackToLogsOnError"  # its error → the run's message
    want = {"cpu": "1", "memory": "4Gi", "ephemeral-storage": "21Gi"}
    assert setup["resources"]["requests"] == setup["resources"]["limits"] == want
    argv = setup["command"]
    assert argv[:3] == ["a2rl", "recorder", "setup"]
    args = dict(zip(argv[3::2], argv[4::2], strict=True))
    spec = parse_spec(run)
    assert args == {
        "--base-model-source": spec.base_model.source,
        "--base-model-name": spec.base_model.name,
        "--seed": "3",
        "--grace-seconds": str(spec.budget.grace_seconds),
        "--protocol": spec.evaluation.protocol,
    }
    # The CLI parses exactly this command line.
    from a2rl_cli import build_parser

    parsed = build_parser().parse_args(argv[1:])
    assert (parsed.base_model_source, parsed.seed) == (spec.base_model.source, 3)
    # Same identity, store and token as the recorder (it creates BenchSubmission <run>-00000) …
    renv = {e["name"]: e.get("value") for e in recorder["env"]}
    senv = {e["name"]: e.get("value") for e in setup["env"]}
    assert {k: senv[k] for k in renv} == renv
    assert setup["envFrom"] == recorder["envFrom"]
    mounts = {m["mountPath"]: m for m in setup["volumeMounts"]}
    assert mounts["/workspace"]["name"] == "workspace"
    assert mounts["/var/run/secrets/kubernetes.io/serviceaccount"]["readOnly"] is True
    # … and scratch space of its own for the model cache (never the workspace, never the spool).
    assert senv["HOME"] == senv["TMPDIR"] == "/tmp" and mounts["/tmp"]["name"] == "setup-scratch"
    assert {"name": "setup-scratch", "emptyDir": {"sizeLimit": "20Gi"}} in pod["volumes"]
    # The agent gets none of it.
    (agent,) = pod["containers"]
    assert "envFrom" not in agent and "A2RL_RUN_PREFIX" not in {e["name"] for e in agent["env"]}


def test_cpu_threads_follow_the_containers_cpu_limit_unless_the_run_sets_them() -> None:
    """torch starts a thread per core of the node; under a lower CPU limit they are throttled
    (docs/operator.md, "CPU threads"), so the agent and the set-up get OMP_NUM_THREADS and kin at
    their limit, rounded up; the run's own variables still win."""
    run = benchrun(resources={"cpu": "900m", "memory": "3Gi"})
    pod = workspace_job(run, parse_spec(run), CONFIG)["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "1"
    setup = {e["name"]: e["value"] for e in pod["initContainers"][0]["env"]}
    assert setup["OMP_NUM_THREADS"] == str(max(1, math.ceil(quantity_value(CONFIG.setup_cpu))))
    run = benchrun(
        resources={"cpu": "2500m"},
        agent={"image": "agent:1", "command": ["python"], "env": [{"name": "OMP_NUM_THREADS", "value": "8"}]},
    )
    (agent,) = workspace_job(run, parse_spec(run), CONFIG)["spec"]["template"]["spec"]["containers"]
    threads = [e["value"] for e in agent["env"] if e["name"] == "OMP_NUM_THREADS"]
    assert threads == ["3", "8"]  # the kubelet keeps the last of a repeated name: the run's
