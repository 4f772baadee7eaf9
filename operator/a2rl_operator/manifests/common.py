"""Names, labels, owner references and resource amounts shared by every child of a BenchRun."""

from __future__ import annotations

import hashlib
from typing import Any

from a2rl.constants import (
    API_GROUP_VERSION,
    BENCHRUN_KIND,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_KUEUE_PRIORITY,
    LABEL_KUEUE_QUEUE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_RUN_NAME,
    LABEL_RUN_UID,
    MANAGED_BY,
    PART_OF,
    RESERVED_LABEL_PREFIX,
)

Manifest = dict[str, Any]
Body = dict[str, Any]  # a BenchRun as the API server returns it (wire format)

MAX_NAME = 63  # Job names become label values, so every child name stays a DNS label.

# Suffixes of the children's names: `<run>-<suffix>`.
SUFFIX_WORKSPACE = "workspace"
SUFFIX_RUNNER = "runner"
SUFFIX_STORE = "store"


def child_name(run: str, suffix: str) -> str:
    """`<run>-<suffix>`, shortened with a stable hash when it would exceed 63 characters."""
    name = f"{run}-{suffix}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(run.encode()).hexdigest()[:8]
    head = run[: MAX_NAME - len(suffix) - len(digest) - 2].rstrip("-")
    return f"{head}-{digest}-{suffix}"


def run_labels(body: Body, component: str | None = None) -> dict[str, str]:
    """User labels of the run without the reserved `a2rl.dev/` ones, plus ours (which win)."""
    meta = body["metadata"]
    user = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if not k.startswith(RESERVED_LABEL_PREFIX)
        and not k.startswith("kueue.x-k8s.io/")
        and k not in (LABEL_NAME, LABEL_INSTANCE, LABEL_COMPONENT, LABEL_PART_OF, LABEL_MANAGED_BY)
    }
    ours = {
        LABEL_NAME: "benchrun",
        LABEL_INSTANCE: meta["name"],
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_RUN_NAME: meta["name"],
        LABEL_RUN_UID: meta["uid"],
    }
    if component is not None:
        ours[LABEL_COMPONENT] = component
    return {**user, **ours}


def kueue_labels(queue_name: str | None, priority_class_name: str | None) -> dict[str, str]:
    """The labels Kueue reads on a Job: its LocalQueue (a Job with one is created suspended, for
    Kueue to admit by unsuspending it) and its WorkloadPriorityClass. Empty without a queue: the
    priority of a Job Kueue does not manage means nothing."""
    if not queue_name:
        return {}
    labels = {LABEL_KUEUE_QUEUE: queue_name}
    if priority_class_name:
        labels[LABEL_KUEUE_PRIORITY] = priority_class_name
    return labels


def selector_labels(body: Body) -> dict[str, str]:
    """The labels that identify every object of one run (stable for its whole life)."""
    return {LABEL_RUN_UID: body["metadata"]["uid"]}


def owner_reference(body: Body) -> Manifest:
    """Controller owner reference to the BenchRun: children go when it goes (cascade)."""
    meta = body["metadata"]
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHRUN_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(body: Body, name: str, component: str | None = None) -> Manifest:
    return {
        "name": name,
        "namespace": body["metadata"]["namespace"],
        "labels": run_labels(body, component),
        "ownerReferences": [owner_reference(body)],
    }


def workspace_name(body: Body) -> str:
    """Name of the workspace PVC, Job and NetworkPolicy (different kinds may share a name)."""
    return child_name(body["metadata"]["name"], SUFFIX_WORKSPACE)


def guaranteed(amounts: dict[str, str]) -> Manifest:
    """Container resources with requests = limits: Guaranteed QoS (and extended resources such as
    GPUs must be equal anyway)."""
    return {"requests": dict(amounts), "limits": dict(amounts)}


#: The user and group every a2rl pod runs as (non-root; the images' `a2rl` user).
RUN_AS_UID = 1000


def pod_security_context() -> Manifest:
    """Every a2rl pod's: non-root as `RUN_AS_UID`, volumes group-owned by it, seccomp RuntimeDefault."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_UID,
        "runAsGroup": RUN_AS_UID,
        "fsGroup": RUN_AS_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_security_context() -> Manifest:
    """What the `restricted` Pod Security Standard demands of every container (and a bit more)."""
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def env_list(pairs: dict[str, str]) -> list[Manifest]:
    """A container's `env` entries for `pairs`, in their order."""
    return [{"name": k, "value": v} for k, v in pairs.items()]
