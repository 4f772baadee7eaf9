"""The operator-wide pod defaults (the chart's `podDefaults`, `imagePullSecrets`) merged into a pod.

One rule for every kind of pod (workspace, eval, report, gateway), applied last by its builder:
what the pod already has — from the run's spec (`spec.runtimeClassName`) or from the builder —
wins, the defaults fill in:
- `nodeSelector`: merged by key, the pod's own keys win;
- `tolerations`: the pod's own, then each default one it does not hold already;
- `affinity`, `priorityClassName`, `runtimeClassName`: the default only where the pod has none;
- `imagePullSecrets`: the pod's own, then the defaults' (global first), each name once.
"""

from __future__ import annotations

import copy

from a2rl.api.chart_values import ComponentPodDefaults, PodDefaults
from a2rl_operator.manifests.common import Manifest

COMPONENTS = ("workspace", "eval", "report", "gateway")


def with_pod_defaults(pod_spec: Manifest, defaults: ComponentPodDefaults) -> Manifest:
    """A copy of `pod_spec` with `defaults` merged in (module doc); nothing empty is added."""
    out = dict(pod_spec)  # every field below is replaced, never changed in place: `pod_spec` stays as it was
    if defaults.node_selector:
        out["nodeSelector"] = {**defaults.node_selector, **(out.get("nodeSelector") or {})}
    own = list(out.get("tolerations") or [])
    extra = [t.model_dump(by_alias=True, mode="json", exclude_defaults=True) for t in defaults.tolerations]
    tolerations = own + [t for i, t in enumerate(extra) if t not in own and t not in extra[:i]]
    if tolerations:
        out["tolerations"] = tolerations
    if defaults.affinity and not out.get("affinity"):
        out["affinity"] = copy.deepcopy(defaults.affinity)
    if defaults.priority_class_name and not out.get("priorityClassName"):
        out["priorityClassName"] = defaults.priority_class_name
    if defaults.runtime_class_name and not out.get("runtimeClassName"):
        out["runtimeClassName"] = defaults.runtime_class_name
    names = [s["name"] for s in out.get("imagePullSecrets") or []]
    names += [s.name for s in defaults.image_pull_secrets]
    if names:
        out["imagePullSecrets"] = [{"name": n} for n in dict.fromkeys(names)]
    return out


def apply_pod_defaults(job: Manifest, defaults: PodDefaults | None, component: str) -> Manifest:
    """`job` (a Job) with `defaults`' `component` part merged into its pod template."""
    if defaults is None:
        return job
    template = job["spec"]["template"]
    template["spec"] = with_pod_defaults(template["spec"], defaults.component(component))
    return job
