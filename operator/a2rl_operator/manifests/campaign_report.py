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
from a2rl.store.scoped import RunCredentials
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests.common import Body, Manifest, child_name, kueue_labels
from a2rl_operator.manifests.dns import HostPin
from a2rl_operator.manifests.network import ip_rule
from a2rl_operator.manifests.pod_defaults import apply_pod_defaults
from a2rl_operator.manifests.report_job import REPORT_BACKOFF_LIMIT, SUFFIX_REPORT, report_pod_spec

SUFFIX_REPORT_STORE = "report-store"


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
    """The campaign's report Job (the grader image; `pins`: the only names its pod resolves). Queued
    like the campaign's runs when its template names a Kueue queue (created suspended, with the
    template's priority class)."""
    name = campaign["metadata"]["name"]
    template = (campaign.get("spec") or {}).get("template") or {}
    queue, priority = template.get("queueName"), template.get("priorityClassName")
    pod_spec = report_pod_spec(
        report_command(campaign, store_uri),
        grading,
        env_from=[{"secretRef": {"name": report_secret_name(name)}}],
        pins=pins,
    )
    meta = _meta(campaign, report_job_name(name), owner)
    meta["labels"].update(kueue_labels(queue, priority))
    job: Manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": bool(queue),
            "backoffLimit": REPORT_BACKOFF_LIMIT,
            "activeDeadlineSeconds": grading.report_timeout_s,
            "template": {"metadata": {"labels": campaign_labels(campaign)}, "spec": pod_spec},
        },
    }
    return apply_pod_defaults(job, pod_defaults, "report")
