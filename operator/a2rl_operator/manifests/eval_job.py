"""The eval Job of one BenchSubmission: a fresh pod that evaluates the stored snapshot.

What only this pod gets: the held-out data (fetched from the store by an init container, `a2rl
eval fetch-heldout`, into an emptyDir; or a read-only PVC), the judge credentials
(`spec.evaluation.judgeSecretRef`) and the judge's endpoint and model (`spec.evaluation.judge`,
else the operator's `A2RL_JUDGE_*`). Store credentials of its own, never the operator's where the
store can scope them (`manifests.secret`): the init container the run's held-out reader's
(`<run>-grading-store`), the eval container, which parses the untrusted model files, its
submission's (`<run>-eval-<index>-store`: read the snapshot, write `result.json`); no
ServiceAccount token; the restricted security context with a read-only root filesystem (scratch
space is an emptyDir at /tmp). Its resources, GPUs included, come from `spec.evaluation`. The
command is the local dispatcher's (`a2rl eval submission …`), which never enables
`trust_remote_code` and never reaches a model hub.

The BenchSubmission is the controller owner: the Job goes with the submission (and the
submission with its BenchRun).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from a2rl.api.benchrun import BenchRunSpec
from a2rl.api.chart_values import PodDefaults
from a2rl.constants import (
    ANNOTATION_DO_NOT_DISRUPT,
    API_GROUP_VERSION,
    BENCHSUBMISSION_KIND,
    COMPONENT_EVAL,
    ENV_CACHE_DIR,
    ENV_JUDGE_API_KEY,
    LABEL_SUBMISSION_INDEX,
)
from a2rl.contracts.env import cpu_thread_env
from a2rl.launch import OFFLINE_ENV  # the eval process never reaches a model hub
from a2rl.store.layout import RunLayout
from a2rl.tracing.context import pod_trace_env
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests.common import (
    Body,
    Manifest,
    child_name,
    env_list,
    guaranteed,
    kueue_labels,
    pod_security_context,
    restricted_security_context,
    run_labels,
)
from a2rl_operator.manifests.dns import HostPin, pod_dns
from a2rl_operator.manifests.pod_defaults import apply_pod_defaults
from a2rl_operator.manifests.secret import eval_store_env_from, grading_store_env_from

EVAL_CONTAINER = "eval"
FETCH_CONTAINER = "fetch-heldout"
HELDOUT_VOLUME = "heldout"
SCRATCH_VOLUME = "scratch"
HELDOUT_DIR = "/var/run/a2rl/heldout"
SCRATCH_DIR = "/tmp"
#: Writable places for libraries that cache under $HOME (the root filesystem is read-only).
SCRATCH_ENV = {
    "HOME": SCRATCH_DIR,
    "TMPDIR": SCRATCH_DIR,
    "XDG_CACHE_HOME": f"{SCRATCH_DIR}/.cache",
    "MPLCONFIGDIR": f"{SCRATCH_DIR}/.matplotlib",
    ENV_CACHE_DIR: f"{SCRATCH_DIR}/a2rl-cache",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class EvalTarget:
    """What one eval Job evaluates and where things are (resolved by the caller)."""

    index: int
    store_uri: str
    #: Store key (relative to the store root) of the task's staged held-out artifact, e.g.
    #: `data/arith/1-seed0/heldout` (`a2rl_tasks.artifacts.store_prefix(task, seed)/heldout`).
    heldout_key: str


def eval_job_name(run_name: str, index: int) -> str:
    return child_name(run_name, f"eval-{index:05d}")


def submission_owner(submission: Body) -> Manifest:
    meta = submission["metadata"]
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHSUBMISSION_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def eval_queue_name(spec: BenchRunSpec) -> str | None:
    """The Kueue LocalQueue of the run's eval Jobs: `spec.evaluation.queueName`, else the run's."""
    return spec.evaluation.queue_name or spec.queue_name


def eval_labels(run: Body, index: int) -> dict[str, str]:
    return {**run_labels(run, COMPONENT_EVAL), LABEL_SUBMISSION_INDEX: str(index)}


def eval_command(run: Body, spec: BenchRunSpec, target: EvalTarget) -> list[str]:
    """`a2rl eval submission` with the arguments `LocalDispatcher.command` passes locally."""
    meta = run["metadata"]
    layout = RunLayout(meta["namespace"], meta["name"], meta["uid"])
    argv = [
        "a2rl", "eval", "submission",
        "--store", target.store_uri,
        "--run-prefix", layout.prefix,
        "--index", str(target.index),
        "--task", spec.task,
        "--heldout", HELDOUT_DIR,
        "--backend", spec.evaluation.backend,
    ]  # fmt: skip
    if spec.evaluation.limit is not None:
        argv += ["--limit", str(spec.evaluation.limit)]
    return argv


def eval_resources(spec: BenchRunSpec) -> Manifest:
    ev = spec.evaluation
    # The scratch emptyDir (the downloaded model) counts against the pod's ephemeral storage: the
    # container's limit, the pod's only one, is sized for it.
    amounts: dict[str, str] = {"cpu": ev.cpu, "memory": ev.memory, "ephemeral-storage": ev.ephemeral_storage}
    if ev.gpus > 0:
        amounts[spec.resources.gpu_resource_name] = str(ev.gpus)
    return guaranteed(amounts)


def hardened_security_context() -> Manifest:
    return {**restricted_security_context(), "readOnlyRootFilesystem": True}


def eval_env(spec: BenchRunSpec, grading: GradingConfig) -> list[Manifest]:
    env = env_list(
        {**OFFLINE_ENV, **SCRATCH_ENV, **grading.run_eval_env(spec), **cpu_thread_env(spec.evaluation.cpu)}
    )
    judge = spec.evaluation.judge_secret_ref
    if judge is not None:
        env.append({"name": ENV_JUDGE_API_KEY,
                    "valueFrom": {"secretKeyRef": {"name": judge.name, "key": judge.key}}})  # fmt: skip
    return env


def heldout_volume(target: EvalTarget, grading: GradingConfig) -> Manifest:
    if grading.heldout_pvc:
        claim = {"claimName": grading.heldout_pvc, "readOnly": True}
        return {"name": HELDOUT_VOLUME, "persistentVolumeClaim": claim}
    return {"name": HELDOUT_VOLUME, "emptyDir": {"sizeLimit": grading.eval_fetch_ephemeral_storage}}


def heldout_mount(target: EvalTarget, grading: GradingConfig) -> Manifest:
    mount: Manifest = {"name": HELDOUT_VOLUME, "mountPath": HELDOUT_DIR, "readOnly": True}
    if grading.heldout_pvc:
        mount["subPath"] = target.heldout_key
    return mount


def fetch_command(spec: BenchRunSpec, target: EvalTarget) -> list[str]:
    """`a2rl eval fetch-heldout`: the run's task and seed's held-out artifact (`target.heldout_key`),
    every checksum verified, into the held-out volume."""
    return [
        "a2rl", "eval", "fetch-heldout",
        "--task", spec.task,
        "--seed", str(spec.seed),
        "--protocol", spec.evaluation.protocol,
        "--store", target.store_uri,
        "--dest", HELDOUT_DIR,
    ]  # fmt: skip


def fetch_container(run: Body, spec: BenchRunSpec, target: EvalTarget, grading: GradingConfig) -> Manifest:
    amounts = {
        "cpu": grading.eval_fetch_cpu,
        "memory": grading.eval_fetch_memory,
        "ephemeral-storage": grading.eval_fetch_ephemeral_storage,
    }
    return {
        "name": FETCH_CONTAINER,
        "image": grading.grader_image,
        "command": fetch_command(spec, target),
        "env": env_list(SCRATCH_ENV),
        "envFrom": grading_store_env_from(run, spec),
        "resources": guaranteed(amounts),
        "securityContext": hardened_security_context(),
        "volumeMounts": [
            {"name": HELDOUT_VOLUME, "mountPath": HELDOUT_DIR},
            {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR},
        ],
    }


def eval_container(run: Body, spec: BenchRunSpec, target: EvalTarget, grading: GradingConfig) -> Manifest:
    return {
        "name": EVAL_CONTAINER,
        "image": grading.grader_image,
        "command": eval_command(run, spec, target),
        "env": eval_env(spec, grading) + pod_trace_env(run["metadata"]),
        "envFrom": eval_store_env_from(run, spec, target.index),
        "resources": eval_resources(spec),
        "securityContext": hardened_security_context(),
        "volumeMounts": [heldout_mount(target, grading), {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}],
    }


def eval_job(
    run: Body,
    submission: Body,
    spec: BenchRunSpec,
    target: EvalTarget,
    grading: GradingConfig,
    *,
    pins: Sequence[HostPin] = (),
    pod_defaults: PodDefaults | None = None,
) -> Manifest:
    """The eval Job of `submission` (a BenchSubmission of `run`, wire dicts). The pod has no DNS:
    `pins` (`dns_pins.grading_pins`) are the only names it resolves; `pod_defaults`: the
    operator's (`OperatorConfig.pod_defaults`), its `eval` part merged into the pod."""
    if not grading.grader_image:
        raise ValueError("grading is off: no grader image configured")
    name = eval_job_name(run["metadata"]["name"], target.index)
    labels = eval_labels(run, target.index)
    pod_spec: Manifest = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [eval_container(run, spec, target, grading)],
        "volumes": [
            heldout_volume(target, grading),
            {"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": spec.evaluation.ephemeral_storage}},
        ],
        **pod_dns(pins),
    }
    if not grading.heldout_pvc:
        pod_spec["initContainers"] = [fetch_container(run, spec, target, grading)]
    template_meta: Manifest = {"labels": dict(labels)}
    queue = eval_queue_name(spec)
    if spec.evaluation.gpus > 0:
        template_meta["annotations"] = {ANNOTATION_DO_NOT_DISRUPT: "true"}
    job: Manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": run["metadata"]["namespace"],
            "labels": {**labels, **kueue_labels(queue, spec.priority_class_name)},
            "ownerReferences": [submission_owner(submission)],
        },
        "spec": {
            # Queued: created suspended; Kueue admits it by unsuspending it (its deadline runs
            # from then).
            "suspend": bool(queue),
            "backoffLimit": 0,  # a failed evaluation is a result (the submission fails), not a retry
            "activeDeadlineSeconds": grading.eval_timeout_s,
            # No TTL: the pod's log is archived to the store when the Job finishes; the Job goes
            # with its BenchSubmission.
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }
    return apply_pod_defaults(job, pod_defaults, "eval")
