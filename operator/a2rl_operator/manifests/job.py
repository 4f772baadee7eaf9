"""The workspace Job: set-up init container, the recorder as a native sidecar, the agent.

Pod-level: no automounted service-account token, non-root, seccomp RuntimeDefault. The agent
gets the agent contract's environment (docs/agents.md) and the workspace volume, nothing
else: no token, no store credentials. The recorder (an `initContainers` entry with
`restartPolicy: Always`) gets the store Secret and a projected token of the run's ServiceAccount.

Time (docs/operator.md, "Deadline"): the kubelet stops the agent container at its budget — a
liveness probe that first runs `wallTimeSeconds` after the agent started and always fails, with
its own `terminationGracePeriodSeconds` = `graceSeconds` (SIGTERM, SIGKILL after the grace, then
every process of the container goes with its PID namespace) — while the pod's termination grace
period covers the grace and the recorder's drain, so the last code revision and the spool reach
the store. Every container and emptyDir has an ephemeral-storage bound.

Names: the pod has no DNS server (`manifests.dns`): the store, gateway and LLM gateway names its
containers use are pinned in its `/etc/hosts` (`hostAliases`) with the addresses the operator
resolved; every other name fails, so DNS is no tunnel out of the pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import (
    ANNOTATION_DO_NOT_DISRUPT,
    COMPONENT_AGENT,
    DEFAULT_RECORDER_PORT,
    DISPATCH_CLUSTER,
    ENV_CACHE_DIR,
    ENV_RECORDER_DISPATCH,
    ENV_RECORDER_DRAIN_TIMEOUT,
    ENV_SPOOL_DIR,
    ENV_TERMINATION_MESSAGE_PATH,
    RECORDER_DRAIN_MARGIN_S,
    WORKSPACE_MOUNT,
)
from a2rl.contracts.env import agent_contract_env, agent_cwd, cpu_thread_env, recorder_contract_env
from a2rl.contracts.setup import SetupParams, setup_argv
from a2rl.store.layout import RunLayout
from a2rl.tracing.context import pod_trace_env
from a2rl.workspace import Workspace
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import (
    Body,
    Manifest,
    env_list,
    guaranteed,
    kueue_labels,
    object_meta,
    pod_security_context,
    restricted_security_context,
    run_labels,
    workspace_name,
)
from a2rl_operator.manifests.dns import HostPin, pod_dns
from a2rl_operator.manifests.gateway import has_gateway, stack_command, stack_env
from a2rl_operator.manifests.pod_defaults import apply_pod_defaults
from a2rl_operator.manifests.rbac import runner_name
from a2rl_operator.manifests.secret import store_env_from

AGENT_CONTAINER = "agent"
RECORDER_CONTAINER = "recorder"
SETUP_CONTAINER = "setup"
WORKSPACE_VOLUME = "workspace"
TOKEN_VOLUME = "runner-token"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# The recorder's spool (writes waiting while the object store is unreachable): an emptyDir of its
# own, so spooled snapshots survive a recorder restart in the pod but never enter the workspace.
SPOOL_VOLUME = "recorder-spool"
SPOOL_MOUNT = "/var/run/a2rl/spool"
# The kubelet's default `terminationMessagePath`, named on the recorder so its drain's outcome
# (`a2rl_recorder.drain`) is the container's termination message.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# Scratch space of the set-up container (model cache, downloaded train data before the copy).
SETUP_SCRATCH_VOLUME = "setup-scratch"
SETUP_SCRATCH_MOUNT = "/tmp"
# The recorder's and set-up's token (they create BenchSubmissions): projected, bound to the pod
# (void once the pod is gone), and as short-lived as Kubernetes allows (the kubelet rotates it at
# 80 %; the recorder's client re-reads it every minute).
TOKEN_TTL_S = 600
# Ephemeral storage of the recorder's and set-up's own writable layer and logs (their emptyDirs
# come on top); the agent's is `spec.resources.ephemeralStorage`.
CONTAINER_SCRATCH_GI = 1
# How often the kubelet runs the agent's deadline probe once it may (the stop's precision).
DEADLINE_PROBE_PERIOD_S = 5
# What the deadline probe says (the kubelet's Event quotes it); the probe itself only has to fail.
DEADLINE_MESSAGE = "a2rl: the agent's budget of {wall} s is spent: SIGTERM, SIGKILL after {grace} s"
GRADING_URL = f"http://127.0.0.1:{DEFAULT_RECORDER_PORT}"


def workspace_job_name(body: Body) -> str:
    return workspace_name(body)


def pod_workspace(spec: BenchRunSpec) -> Workspace:
    """The workspace's paths as the pod's containers see them (the volume at `WORKSPACE_MOUNT`)."""
    return Workspace.for_base_model(Path(WORKSPACE_MOUNT), spec.base_model.name)


def agent_env(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """The agent-facing contract (docs/agents.md), then the user's extra variables. Nothing of
    `spec.driver`: its key (`secretRef`) is for the run's driver gateway pod only, never the agent
    (a stack run's agent gets the per-run gateway token, `gateway.stack_env`)."""
    env = env_list(agent_contract_env(spec, pod_workspace(spec), GRADING_URL))
    # Threads at the CPU limit, unless the run's own variables say otherwise (they come after).
    env += env_list(cpu_thread_env(spec.resources.cpu))
    env += [{"name": e.name, "value": e.value} for e in spec.agent.env]
    return env


def recorder_env(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> list[Manifest]:
    """The recorder's contract (as in local mode), then what only a pod has: cluster dispatch, the
    spool volume, the drain timeout the pod's grace period is sized for, where the drain's outcome
    goes, the run's trace context.
    No `A2RL_RUN_START`: the recorder keeps the clock's start in the store (`a2rl_recorder.clock`)."""
    meta = body["metadata"]
    layout = RunLayout(meta["namespace"], meta["name"], meta["uid"])
    values = recorder_contract_env(
        spec=spec, layout=layout, workspace=Path(WORKSPACE_MOUNT), port=DEFAULT_RECORDER_PORT
    )
    values[ENV_RECORDER_DISPATCH] = DISPATCH_CLUSTER  # submissions become BenchSubmissions
    values[ENV_SPOOL_DIR] = SPOOL_MOUNT
    values[ENV_RECORDER_DRAIN_TIMEOUT] = str(config.recorder_drain_timeout_s)
    values[ENV_TERMINATION_MESSAGE_PATH] = TERMINATION_MESSAGE_PATH  # the drain's outcome
    # The run's trace context goes to the recorder only: the agent never sees it (as in local mode).
    return env_list(values) + pod_trace_env(meta)


def agent_resources(spec: BenchRunSpec) -> Manifest:
    res = spec.resources
    amounts = {"cpu": res.cpu, "memory": res.memory, "ephemeral-storage": res.ephemeral_storage}
    if res.gpus > 0:
        amounts[res.gpu_resource_name] = str(res.gpus)
    return guaranteed(amounts)


def _gi(n: int) -> str:
    return f"{n}Gi"


def deadline_probe(spec: BenchRunSpec) -> Manifest:
    """The agent's hard deadline, enforced by the kubelet (nothing of a2rl runs in the agent image,
    and nothing the agent does inside its container can stop it).

    A liveness probe never runs before `initialDelaySeconds` = the budget after the agent container
    started, and this one always fails: at the budget (within `DEADLINE_PROBE_PERIOD_S`) the kubelet
    kills the agent container with the probe's own grace period (`graceSeconds`, not the pod's
    longer one): SIGTERM to its PID 1, SIGKILL after the grace, and with PID 1 every process of the
    container's PID namespace (`setsid`, double forks, new process groups) dies. The exec fails
    whether or not the image has a shell (a failed exec is a failed probe), and the agent cannot
    make it pass: killing or stopping the probe's process makes it fail or time out. The pod's
    `restartPolicy: Never` keeps the container from coming back; the recorder drains after it.
    """
    wall, grace = spec.budget.wall_time_seconds, spec.budget.grace_seconds
    message = DEADLINE_MESSAGE.format(wall=wall, grace=grace)
    return {
        "exec": {"command": ["/bin/sh", "-c", f'echo "{message}"; exit 1']},
        "initialDelaySeconds": wall,
        "periodSeconds": DEADLINE_PROBE_PERIOD_S,
        "timeoutSeconds": DEADLINE_PROBE_PERIOD_S,
        "failureThreshold": 1,
        # The probe's own grace (Kubernetes >= 1.27): the agent's SIGTERM → SIGKILL, not the pod's.
        "terminationGracePeriodSeconds": max(1, grace),
    }


def agent_container(body: Body, spec: BenchRunSpec) -> Manifest:
    container: Manifest = {
        "name": AGENT_CONTAINER,
        "image": spec.agent.image_ref,
        "env": agent_env(body, spec),
        # Containers need an absolute working directory: a relative workingDir is under the mount.
        "workingDir": str(
            agent_cwd(spec, Workspace.for_base_model(Path(WORKSPACE_MOUNT), spec.base_model.name))
        ),
        "resources": agent_resources(spec),
        "securityContext": restricted_security_context(),
        "livenessProbe": deadline_probe(spec),
        "volumeMounts": [{"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_MOUNT}],
    }
    if has_gateway(spec):  # the stack's invocation, pointed at the run's gateway pod
        container["command"] = stack_command(body, spec)
        container["env"] += stack_env(body)
    elif spec.agent.command:
        container["command"] = list(spec.agent.command)
    if spec.agent.args:
        container["args"] = list(spec.agent.args)
    return container


def setup_container(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Manifest:
    """`a2rl recorder setup`: runs to completion before the recorder and the agent start."""
    params = SetupParams(
        base_model_source=spec.base_model.source,
        base_model_name=spec.base_model.name,
        seed=spec.seed,
        grace_s=spec.budget.grace_seconds,
        protocol=spec.evaluation.protocol,
    )
    scratch = {
        "HOME": SETUP_SCRATCH_MOUNT,
        "TMPDIR": SETUP_SCRATCH_MOUNT,
        ENV_CACHE_DIR: f"{SETUP_SCRATCH_MOUNT}/a2rl",
    }
    return {
        "name": SETUP_CONTAINER,
        "image": config.setup_image,
        "command": setup_argv(params),
        # Its last log line (a one-line error for a user mistake) becomes the run's message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": recorder_env(body, spec, config) + env_list({**scratch, **cpu_thread_env(config.setup_cpu)}),
        "envFrom": store_env_from(body, spec),
        "resources": guaranteed(
            {
                "cpu": config.setup_cpu,
                "memory": config.setup_memory,
                "ephemeral-storage": _gi(config.setup_scratch_gi + CONTAINER_SCRATCH_GI),
            }
        ),
        "securityContext": restricted_security_context(),
        "volumeMounts": [
            {"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_MOUNT},
            {"name": TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True},
            {"name": SETUP_SCRATCH_VOLUME, "mountPath": SETUP_SCRATCH_MOUNT},
        ],
    }


def recorder_container(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Manifest:
    health = f"import urllib.request; urllib.request.urlopen('{GRADING_URL}/health', timeout=2)"
    return {
        "name": RECORDER_CONTAINER,
        "image": config.recorder_image,
        # Native sidecar: starts before the agent, runs beside it, stops after it.
        "restartPolicy": "Always",
        "command": ["a2rl", "recorder", "serve"],
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "env": recorder_env(body, spec, config),
        "envFrom": store_env_from(body, spec),
        "resources": guaranteed(
            {
                "cpu": config.recorder_cpu,
                "memory": config.recorder_memory,
                # The spool emptyDir counts against the pod's total: the container's share covers it.
                "ephemeral-storage": _gi(config.recorder_spool_gi + CONTAINER_SCRATCH_GI),
            }
        ),
        "securityContext": restricted_security_context(),
        # The recorder binds 127.0.0.1 only, so an exec probe (not httpGet on the pod IP). The agent
        # starts once this passes: the grading API is up before the agent's first request.
        "startupProbe": {
            "exec": {"command": ["python", "-c", health]},
            "periodSeconds": 2,
            "failureThreshold": 150,
        },
        "volumeMounts": [
            {"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_MOUNT},
            {"name": TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True},
            {"name": SPOOL_VOLUME, "mountPath": SPOOL_MOUNT},
        ],
    }


def token_volume() -> Manifest:
    """The ServiceAccount token + CA + namespace, as the kubelet would automount them."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_TTL_S}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                    }
                },
            ]
        },
    }


def recorder_drain_budget_s(config: OperatorConfig) -> int:
    """The longest the recorder's drain can take after its SIGTERM (`a2rl_recorder.drain`): one
    deadline for the submissions in flight (recorded, not scored: the evaluations go on in the
    cluster), the final code revision and the spool, and the margin for what follows it."""
    return config.recorder_drain_timeout_s + RECORDER_DRAIN_MARGIN_S


def termination_grace_period_s(spec: BenchRunSpec, config: OperatorConfig) -> int:
    """The pod's grace: when the pod is terminated (Job deadline, deletion) the agent gets its
    SIGTERM grace first, then the recorder sidecar its whole drain. When the agent stops at its
    budget (the deadline probe, with the budget's own grace) the recorder gets this much."""
    return spec.budget.grace_seconds + recorder_drain_budget_s(config)


def active_deadline_seconds(spec: BenchRunSpec, config: OperatorConfig) -> int:
    """A backstop only (the agent stops at its budget through `deadline_probe`): the budget and
    grace, the set-up allowance (image pull, recorder start-up, staging) and the recorder's drain,
    so a normal end never reaches it."""
    return (
        spec.budget.wall_time_seconds
        + spec.budget.grace_seconds
        + config.setup_allowance_s
        + recorder_drain_budget_s(config)
    )


def workspace_job(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, pins: Sequence[HostPin] = ()
) -> Manifest:
    """`pins`: the names the pod's containers resolve (`manifests.dns`): it has no DNS server."""
    meta = object_meta(body, workspace_job_name(body), COMPONENT_AGENT)
    pod_labels = run_labels(body, COMPONENT_AGENT)
    meta["labels"].update(kueue_labels(spec.queue_name, spec.priority_class_name))
    pod_annotations = {ANNOTATION_DO_NOT_DISRUPT: "true"} if spec.resources.gpus > 0 else {}
    pod_spec: Manifest = {
        "restartPolicy": "Never",
        "serviceAccountName": runner_name(body),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": termination_grace_period_s(spec, config),
        "securityContext": pod_security_context(),
        "initContainers": [setup_container(body, spec, config), recorder_container(body, spec, config)],
        "containers": [agent_container(body, spec)],
        "volumes": [
            {"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": workspace_job_name(body)}},
            token_volume(),
            {"name": SPOOL_VOLUME, "emptyDir": {"sizeLimit": _gi(config.recorder_spool_gi)}},
            {"name": SETUP_SCRATCH_VOLUME, "emptyDir": {"sizeLimit": _gi(config.setup_scratch_gi)}},
        ],
    }
    pod_spec.update(pod_dns(pins))
    if spec.runtime_class_name:
        pod_spec["runtimeClassName"] = spec.runtime_class_name
    template_meta: Manifest = {"labels": pod_labels}
    if pod_annotations:
        template_meta["annotations"] = pod_annotations
    job: Manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            # Kueue admits a suspended Job by unsuspending it.
            "suspend": bool(spec.queue_name),
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_deadline_seconds(spec, config),
            # Pods are kept after the end until their logs are archived (a later step deletes them).
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }
    return apply_pod_defaults(job, config.pod_defaults, "workspace")
