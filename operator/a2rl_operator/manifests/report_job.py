"""The report Job of a run: `a2rl report` over everything the run left in the store.

Runs once, when the workspace Job has finished and in-flight evaluations are done (or the wait
for them timed out). It reads run.json, the submissions, results and revisions from the store
and writes `report/{report.json,report.md,report.html,trajectory.png}`. No held-out data, no
judge credentials, no ServiceAccount token; its own store Secret (`<run>-report-store`: the run's
records in, `report/` out, where the store can scope keys); restricted security context with
a read-only root filesystem. Owned by the BenchRun.
"""

from __future__ import annotations

from collections.abc import Sequence

from a2rl.api.benchrun import BenchRunSpec
from a2rl.api.chart_values import PodDefaults
from a2rl.constants import COMPONENT_REPORT
from a2rl.contracts.env import cpu_thread_env
from a2rl.launch import OFFLINE_ENV
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
    object_meta,
    pod_security_context,
    run_labels,
)
from a2rl_operator.manifests.dns import HostPin, pod_dns
from a2rl_operator.manifests.eval_job import (
    SCRATCH_DIR,
    SCRATCH_ENV,
    SCRATCH_VOLUME,
    hardened_security_context,
)
from a2rl_operator.manifests.pod_defaults import apply_pod_defaults
from a2rl_operator.manifests.secret import report_store_env_from

REPORT_CONTAINER = "report"
SUFFIX_REPORT = "report"
#: One retry: a store hiccup should not cost the run its report; a real bug fails twice quickly.
REPORT_BACKOFF_LIMIT = 1


def report_job_name(run_name: str) -> str:
    return child_name(run_name, SUFFIX_REPORT)


def report_command(run: Body, store_uri: str) -> list[str]:
    meta = run["metadata"]
    prefix = RunLayout(meta["namespace"], meta["name"], meta["uid"]).prefix
    return ["a2rl", "report", prefix, "--store", store_uri, "--regenerate", "--json"]


def report_pod_spec(
    command: list[str],
    grading: GradingConfig,
    *,
    env: Sequence[Manifest] = (),
    env_from: Sequence[Manifest] = (),
    pins: Sequence[HostPin] = (),
) -> Manifest:
    """The pod of a report Job (a run's or a campaign's): the grader image running `command`,
    offline, no ServiceAccount token, no DNS but `pins`, restricted and read-only but its scratch
    volume; `env_from`: its store Secret."""
    if not grading.grader_image:
        raise ValueError("grading is off: no grader image configured")
    amounts = {
        "cpu": grading.report_cpu,
        "memory": grading.report_memory,
        "ephemeral-storage": grading.report_ephemeral_storage,
    }
    container: Manifest = {
        "name": REPORT_CONTAINER,
        "image": grading.grader_image,
        "command": command,
        "env": env_list({**OFFLINE_ENV, **SCRATCH_ENV, **cpu_thread_env(grading.report_cpu)}) + list(env),
        "envFrom": list(env_from),
        "resources": guaranteed(amounts),
        "securityContext": hardened_security_context(),
        "volumeMounts": [{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}],
    }
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [{"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": grading.report_ephemeral_storage}}],
        **pod_dns(pins),
    }


def report_job(
    run: Body,
    spec: BenchRunSpec,
    store_uri: str,
    grading: GradingConfig,
    *,
    pins: Sequence[HostPin] = (),
    pod_defaults: PodDefaults | None = None,
) -> Manifest:
    """The run's report Job. The pod has no DNS: `pins` are the only names it resolves;
    `pod_defaults`: the operator's, its `report` part merged into the pod."""
    pod_spec = report_pod_spec(
        report_command(run, store_uri),
        grading,
        env=pod_trace_env(run["metadata"]),
        env_from=report_store_env_from(run, spec),
        pins=pins,
    )
    meta = object_meta(run, report_job_name(run["metadata"]["name"]), COMPONENT_REPORT)
    meta["labels"].update(kueue_labels(spec.queue_name, spec.priority_class_name))
    job: Manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            # Queued with the run (`spec.queueName`): created suspended for Kueue to admit.
            "suspend": bool(spec.queue_name),
            "backoffLimit": REPORT_BACKOFF_LIMIT,
            "activeDeadlineSeconds": grading.report_timeout_s,
            "template": {"metadata": {"labels": run_labels(run, COMPONENT_REPORT)}, "spec": pod_spec},
        },
    }
    return apply_pod_defaults(job, pod_defaults, "report")
