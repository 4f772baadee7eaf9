"""The campaign report Job of a BenchCampaign: `a2rl campaign report` over its runs' records.

Created once every run of the campaign has ended. It reads `campaigns/<ns>/<name>/campaign.json`
and the records of the campaign's runs from the store and writes `campaigns/<ns>/<name>/report/`.
Like a run's report pod: the grader image, no ServiceAccount token, no DNS (the store's host
pinned), restricted security context with a read-only root filesystem, its own store Secret
(`<campaign>-report-store`: keys that read the campaign's runs and `campaign.json` and write its
`report/` only, where the store can scope keys) and its own NetworkPolicy (`<campaign>-report`:
no ingress, egress to the store only). Everything is owned by the campaign.
"""

from __future__ import annotations

from collections.abc import Sequence

from a2rl.api.chart_values import PodDefaults
from a2rl.constants import (
    COMPONENT_REPORT,
    ENV_S3_ACCESS_KEY,
    ENV_S3_SECRET_KEY,
    ENV_STORE_URI,
    LABEL_CAMPAIGN,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    MANAGED_BY,
    PART_OF,
)
from a2rl.launch import OFFLINE_ENV
from a2rl.store.scoped import RunCredentials
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests.common import Body, Manifest, child_name, guaranteed, pod_security_context
from a2rl_operator.manifests.dns import HostPin, pod_dns
from a2rl_operator.manifests.eval_job import (
    SCRATCH_DIR,
    SCRATCH_ENV,
    SCRATCH_VOLUME,
    hardened_security_context,
)
from a2rl_operator.manifests.network import ip_rule
from a2rl_operator.manifests.pod_defaults import apply_pod_defaults

REPORT_CONTAINER = "report"
SUFFIX_REPORT = "report"
SUFFIX_REPORT_STORE = "report-store"
REPORT_BACKOFF_LIMIT = 1


def report_job_name(campaign: str) -> str:
    return child_name(campaign, SUFFIX_REPORT)


def report_secret_name(campaign: str) -> str:
    return child_name(campaign, SUFFIX_REPORT_STORE)


def campaign_labels(campaign: Body, component: str = COMPONENT_REPORT) -> dict[str, str]:
    """Labels of the campaign's report objects (`a2rl.dev/campaign` says whose)."""
    name = campaign["metadata"]["name"]
    return {
        LABEL_NAME: "benchcampaign",
        LABEL_INSTANCE: name,
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CAMPAIGN: name,
        LABEL_COMPONENT: component,
    }


def _meta(campaign: Body, name: str, owner: Manifest) -> Manifest:
    return {
        "name": name,
        "namespace": campaign["metadata"]["namespace"],
        "labels": campaign_labels(campaign),
        "ownerReferences": [owner],
    }


def report_command(campaign: Body, store_uri: str) -> list[str]:
    meta = campaign["metadata"]
    return [
        "a2rl",
        "campaign",
        "report",
        meta["name"],
        "--namespace",
        meta["namespace"],
        "--store",
        store_uri,
        "--json",
    ]


def report_store_secret(
    campaign: Body,
    owner: Manifest,
    store_uri: str,
    config: OperatorConfig,
    credentials: RunCredentials | None,
) -> Manifest:
    """`<campaign>-report-store`: the store URI and the report user's keys, else the operator's."""
    data = {ENV_STORE_URI: store_uri, **config.store_credentials}
    if credentials is not None:
        data.update({ENV_S3_ACCESS_KEY: credentials.access_key, ENV_S3_SECRET_KEY: credentials.secret_key})
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(campaign, report_secret_name(campaign["metadata"]["name"]), owner),
        "type": "Opaque",
        "immutable": True,
        "stringData": data,
    }


def report_network_policy(campaign: Body, owner: Manifest, config: OperatorConfig) -> Manifest:
    """`<campaign>-report`: the report pod reaches the store and nothing else; nothing reaches it."""
    name = campaign["metadata"]["name"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(campaign, report_job_name(name), owner),
        "spec": {
            "podSelector": {
                "matchLabels": {
                    LABEL_CAMPAIGN: name,
                    LABEL_COMPONENT: COMPONENT_REPORT,
                    LABEL_MANAGED_BY: MANAGED_BY,
                }
            },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [ip_rule(e) for e in config.store_egress],
        },
    }


def report_job(
    campaign: Body,
    owner: Manifest,
    store_uri: str,
    grading: GradingConfig,
    *,
    pins: Sequence[HostPin] = (),
    pod_defaults: PodDefaults | None = None,
) -> Manifest:
    """The campaign's report Job (the grader image; `pins`: the only names its pod resolves)."""
    if not grading.grader_image:
        raise ValueError("grading is off: no grader image configured")
    name = campaign["metadata"]["name"]
    amounts = {
        "cpu": grading.report_cpu,
        "memory": grading.report_memory,
        "ephemeral-storage": grading.report_ephemeral_storage,
    }
    container: Manifest = {
        "name": REPORT_CONTAINER,
        "image": grading.grader_image,
        "command": report_command(campaign, store_uri),
        "env": [{"name": k, "value": v} for k, v in {**OFFLINE_ENV, **SCRATCH_ENV}.items()],
        "envFrom": [{"secretRef": {"name": report_secret_name(name)}}],
        "resources": guaranteed(amounts),
        "securityContext": hardened_security_context(),
        "volumeMounts": [{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}],
    }
    pod_spec: Manifest = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [{"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": grading.report_ephemeral_storage}}],
        **pod_dns(pins),
    }
    job: Manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(campaign, report_job_name(name), owner),
        "spec": {
            "backoffLimit": REPORT_BACKOFF_LIMIT,
            "activeDeadlineSeconds": grading.report_timeout_s,
            "template": {"metadata": {"labels": campaign_labels(campaign)}, "spec": pod_spec},
        },
    }
    return apply_pod_defaults(job, pod_defaults, "report")
