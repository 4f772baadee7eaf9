"""The operator's own permissions: the one source of truth for the Helm chart and the tests.

`python -m a2rl_operator.rbac > charts/a2rl/templates/rbac.yaml` renders the chart template; a
test fails when the file drifts from `RULES`. The e2e tests bind the same rules to the
ServiceAccount the operator runs as.

Why each rule (least privilege):
- benchruns: watch them; patch for kopf's finalizer and `a2rl.dev/` progress annotations
  (never spec); create: a BenchCampaign's runs. benchruns/status: the operator alone writes
  status. benchruns/finalizers: owner references with blockOwnerDeletion.
- benchcampaigns: watch them; patch for kopf's `a2rl.dev/` progress annotations (never spec).
  benchcampaigns/status: the operator alone writes it. benchcampaigns/finalizers: a campaign's
  BenchRuns (and report Job) are owned by it with blockOwnerDeletion.
- benchsubmissions create/get: held so the operator may grant them to each run's Role (RBAC
  forbids granting what one does not hold); list/watch for grading. benchsubmissions/status:
  the operator alone writes scores. benchsubmissions/finalizers: eval Jobs are owned by their
  submission with blockOwnerDeletion.
- pods/log get: container logs are archived to the store (eval, workspace and report pods).
- children: create + get (idempotent get-or-create); no update/delete (garbage collection
  removes them by owner reference). Services: a stack run's driver gateway. Secrets: create
  only — the operator never reads a Secret.
- pods, jobs, events: watch to mirror state; events create/patch to post Kubernetes Events.
- customresourcedefinitions list/watch: kopf notices CRD changes at run time.
- namespaces list/watch: an operator given namespaces (`--namespace`, the chart's
  `operator.watchNamespaces`) has kopf list them first; without this kopf retried the refused
  list for about 40 s before it reconciled anything.
- Kueue's workloads get/list/watch: a queued run's status carries Kueue's reason for waiting and
  its evictions; patch: deactivate (`spec.active: false`) the Workload of a run that reached the
  queueing limit (`--queue-timeout`) or was preempted after its budget clock started, so Kueue
  never starts it (again).
- leases: `--leader-elect` replicas hold the Lease `a2rl-operator` (create it; get and update that
  one Lease only).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from a2rl.constants import (
    API_GROUP,
    BENCHCAMPAIGN_PLURAL,
    BENCHRUN_PLURAL,
    BENCHSUBMISSION_PLURAL,
    OPERATOR_LEASE,
)

Rule = dict[str, list[str]]

RULES: list[Rule] = [
    {
        "apiGroups": [API_GROUP],
        "resources": [BENCHRUN_PLURAL],
        "verbs": ["create", "get", "list", "watch", "patch"],
    },
    {
        "apiGroups": [API_GROUP],
        "resources": [f"{BENCHRUN_PLURAL}/status"],
        "verbs": ["get", "update", "patch"],
    },
    {"apiGroups": [API_GROUP], "resources": [f"{BENCHRUN_PLURAL}/finalizers"], "verbs": ["update"]},
    {
        "apiGroups": [API_GROUP],
        "resources": [BENCHSUBMISSION_PLURAL],
        "verbs": ["create", "get", "list", "watch"],
    },
    {
        "apiGroups": [API_GROUP],
        "resources": [f"{BENCHSUBMISSION_PLURAL}/status"],
        "verbs": ["get", "update", "patch"],
    },
    {"apiGroups": [API_GROUP], "resources": [f"{BENCHSUBMISSION_PLURAL}/finalizers"], "verbs": ["update"]},
    {
        "apiGroups": [API_GROUP],
        "resources": [BENCHCAMPAIGN_PLURAL],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {
        "apiGroups": [API_GROUP],
        "resources": [f"{BENCHCAMPAIGN_PLURAL}/status"],
        "verbs": ["get", "update", "patch"],
    },
    {"apiGroups": [API_GROUP], "resources": [f"{BENCHCAMPAIGN_PLURAL}/finalizers"], "verbs": ["update"]},
    {
        "apiGroups": [""],
        "resources": ["persistentvolumeclaims", "serviceaccounts", "services"],
        "verbs": ["create", "get"],
    },
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "patch"]},
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["create", "get"],
    },
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create", "get"]},
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [OPERATOR_LEASE],
        "verbs": ["get", "update"],
    },
]


def cluster_role(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": RULES,
    }


def cluster_role_binding(name: str, sa_name: str, sa_namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}],
    }


_HEADER = """\
# Generated by `python -m a2rl_operator.rbac` from operator/a2rl_operator/rbac.py. Do not edit:
# tests/unit/test_operator_rbac.py fails when this file and the rules there differ.
{{- if .Values.rbac.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "a2rl.operatorServiceAccount" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "a2rl.labels" . | nindent 4 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "a2rl.fullname" . }}-operator
  labels:
    {{- include "a2rl.labels" . | nindent 4 }}
"""

_FOOTER = """\
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "a2rl.fullname" . }}-operator
  labels:
    {{- include "a2rl.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "a2rl.fullname" . }}-operator
subjects:
  - kind: ServiceAccount
    name: {{ include "a2rl.operatorServiceAccount" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}
"""


def chart_template() -> str:
    """The Helm template `charts/a2rl/templates/rbac.yaml`."""
    rules = yaml.safe_dump({"rules": RULES}, sort_keys=False, default_flow_style=None, width=200)
    return _HEADER + rules + _FOOTER


if __name__ == "__main__":
    sys.stdout.write(chart_template())
