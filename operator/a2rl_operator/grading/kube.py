"""Kubernetes I/O of grading: BenchSubmissions (list, status writes), pods of Jobs, their logs,
the run's grading NetworkPolicy (made sure of before any eval or report pod of the run) and the
names those pods resolve (`grading_pins`).

Status writes replace the status subresource guarded by resourceVersion and are retried on
conflicts (like `Kube.update_status` for BenchRuns), so the BenchSubmission watcher, the eval
Job watcher and the resync timer never overwrite each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from a2rl_tasks import task_class
from kubernetes.client.exceptions import ApiException

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import (
    API_GROUP,
    API_GROUP_VERSION,
    API_VERSION,
    BENCHRUN_KIND,
    BENCHSUBMISSION_KIND,
    BENCHSUBMISSION_PLURAL,
)
from a2rl_operator import dns_pins, store_access
from a2rl_operator import status as st
from a2rl_operator.config import OperatorConfig
from a2rl_operator.kube import Kube
from a2rl_operator.manifests.dns import HostPin
from a2rl_operator.manifests.grading_network import endpoint_urls, grading_network_policy
from a2rl_operator.manifests.secret import grading_store_secret

Obj = dict[str, Any]
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
MAX_LOG_BYTES = 16 << 20
LOG_TIMEOUT_S = 10.0


def owned_by_run(sub: Obj, run_uid: str) -> bool:
    """The submission belongs to this incarnation of the run: no BenchRun owner, or this one."""
    owners = [o for o in (sub["metadata"].get("ownerReferences") or []) if o.get("kind") == BENCHRUN_KIND]
    return not owners or any(o.get("uid") == run_uid for o in owners)


def list_submissions(kube: Kube, namespace: str, run_name: str, run_uid: str) -> list[Obj]:
    """The run's BenchSubmissions (server-side selection on `spec.runName`), sorted by index."""
    resp = cast(
        Obj,
        kube.custom.list_namespaced_custom_object(
            API_GROUP,
            API_VERSION,
            namespace,
            BENCHSUBMISSION_PLURAL,
            field_selector=f"spec.runName={run_name}",
        ),
    )
    items = [i for i in resp.get("items") or [] if owned_by_run(i, run_uid)]
    return sorted(items, key=lambda s: int((s.get("spec") or {}).get("index") or 0))


def get_submission(kube: Kube, namespace: str, name: str) -> Obj | None:
    return kube.get_custom(BENCHSUBMISSION_PLURAL, namespace, name)


def update_submission_status(
    kube: Kube, namespace: str, name: str, mutate: Callable[[Obj], Obj | None], attempts: int = 8
) -> Obj | None:
    """Read the submission, let `mutate(sub)` return its new status (None: nothing to write), replace
    the status subresource; retried on conflicts. Returns the written status (None: no write)."""
    return kube.update_custom_status(
        BENCHSUBMISSION_PLURAL, BENCHSUBMISSION_KIND, namespace, name, mutate, attempts=attempts
    )


def pods_of_job(kube: Kube, namespace: str, job_name: str) -> list[Obj]:
    """The Job's pods, oldest first."""
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job_name}")
    items = [kube.api.sanitize_for_serialization(p) for p in pods.items]
    return sorted(items, key=lambda p: p["metadata"].get("creationTimestamp") or "")


def container_names(pod: Obj) -> list[str]:
    spec = pod.get("spec") or {}
    return [c["name"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]


def container_log(kube: Kube, namespace: str, pod: str, container: str) -> str:
    """The container's log; a one-line note in its place when the kubelet cannot serve it."""
    try:
        text = kube.core.read_namespaced_pod_log(
            pod, namespace, container=container, limit_bytes=MAX_LOG_BYTES, _request_timeout=LOG_TIMEOUT_S
        )
    except ApiException as exc:
        return f"(log not available: HTTP {exc.status} {st.one_line(str(exc.reason or ''), 200)})\n"
    except Exception as exc:  # the kubelet unreachable, a timeout: the archive is best effort
        return f"(log not available: {type(exc).__name__}: {st.one_line(str(exc), 200)})\n"
    return str(text or "")


def pod_logs(kube: Kube, namespace: str, pod: Obj, containers: list[str] | None = None) -> dict[str, str]:
    """Logs of the pod's containers (init containers first), by container name."""
    name = pod["metadata"]["name"]
    return {c: container_log(kube, namespace, name, c) for c in (containers or container_names(pod))}


def format_logs(pod_name: str, logs: dict[str, str]) -> str:
    """One archive file for several containers, each under a header line."""
    parts = []
    for container, text in logs.items():
        parts.append(f"===== pod {pod_name} container {container} =====\n")
        parts.append(text if text.endswith("\n") or not text else text + "\n")
    return "".join(parts)


def submission_ref(sub: Obj) -> Obj:
    meta = sub["metadata"]
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": sub.get("kind") or "BenchSubmission",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
    }


def post_event(kube: Kube, obj: Obj, type_: str, reason: str, message: str) -> None:
    kube.post_event(submission_ref(obj), type_, reason, st.one_line(message))


def grading_pins(
    kube: Kube, config: OperatorConfig, run: Obj, spec: BenchRunSpec, logger: Any = None
) -> list[HostPin]:
    """The names the run's eval and report pods resolve (they have no DNS): the store's host and the
    in-cluster Services their evaluation calls. Raises `dns_pins.PinError` while the store's host
    cannot be resolved (the caller leaves the pod to the next resync)."""
    urls = endpoint_urls(task_class(spec.task).endpoint_env, config.grading.run_eval_env(spec))
    meta = run["metadata"]
    pins, notes = dns_pins.grading_pins(urls, meta["namespace"], config, kube)
    for note in notes:
        if logger is not None:
            logger.warning("BenchRun %s/%s: grading pods: %s", meta["namespace"], meta["name"], note)
    return pins


def ensure_grading_policy(
    kube: Kube, config: OperatorConfig, run: Obj, spec: BenchRunSpec, logger: Any = None
) -> bool:
    """Get-or-create the run's grading Secret and NetworkPolicy (before any of its eval or report pods).
    Raises UrlPeerError when a service URL the task's evaluation calls cannot be allowed.

    The Secret is the `fetch-heldout` init container's: keys that read the run's held-out artifact
    only (`store_access.heldout_credentials`), created before the policy, so an existing policy
    means the Secret exists too and the store is not asked again."""
    uid = run["metadata"]["uid"]
    urls = endpoint_urls(task_class(spec.task).endpoint_env, config.grading.run_eval_env(spec))
    policy = grading_network_policy(run, urls, config)
    if kube.get_owned(policy, uid) is not None:
        return False
    if not config.grading.heldout_pvc:  # held-out data on a volume: nothing is fetched
        access = store_access.heldout_credentials(run, spec, config)
        if access.credentials is None and logger is not None:
            logger.warning("BenchRun %s/%s: %s", run["metadata"]["namespace"], run["metadata"]["name"],
                           access.reason)  # fmt: skip
        kube.ensure(grading_store_secret(run, spec, config, access.credentials), uid)
    return kube.ensure(policy, uid)
