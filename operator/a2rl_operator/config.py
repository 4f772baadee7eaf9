"""Operator-wide settings: images, the default store, egress peers, grading. Read once at start-up
(`a2rl operator` builds one `OperatorConfig` from its flags and environment, hands it to
`registry.build_registry` and to every handler through kopf's `memo.config`); nothing is read
from the environment at import."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from a2rl.api.chart_values import LocalObjectReference, PodDefaults
from a2rl.api.common import DNS_LABEL
from a2rl.constants import (
    ENV_IMAGE_PULL_SECRETS,
    ENV_POD_DEFAULTS,
    ENV_QUEUE_TIMEOUT,
    ENV_S3_ACCESS_KEY,
    ENV_S3_ENDPOINT,
    ENV_S3_SECRET_KEY,
    ENV_STORE_URI,
)
from a2rl.errors import A2rlError
from a2rl_operator.grading.config import GradingConfig

DEFAULT_RECORDER_IMAGE = "ghcr.io/a2rl/recorder:0.1.0"
# The workspace set-up container builds/copies the base model and reads the task registry: it
# needs the ML stack, which the grader image has (the recorder image deliberately has not).
DEFAULT_SETUP_IMAGE = "ghcr.io/a2rl/grader:0.1.0"
# Time the pod gets on top of the agent's budget before the Job deadline kills it: image pull,
# recorder start-up, workspace staging and the final flush of the recorder.
DEFAULT_SETUP_ALLOWANCE_S = 600
DEFAULT_WORKSPACE_SIZE = "20Gi"
# The recorder's drain on SIGTERM (submissions in flight recorded, final code revision, spool),
# one deadline `A2RL_RECORDER_DRAIN_TIMEOUT`; the pod's termination grace period is sized from
# it. With the store up the drain takes seconds; this is how long a store outage at the run's
# end may last before what is spooled is lost (the recorder's termination message says so).
DEFAULT_RECORDER_DRAIN_TIMEOUT_S = 60
DNS_LABEL_RE = re.compile(DNS_LABEL)


@dataclass(frozen=True)
class Egress:
    """One NetworkPolicy egress destination: an IP block, with an optional TCP port."""

    cidr: str
    port: int | None = None


@dataclass(frozen=True)
class MetricsScraper:
    """Pods that may scrape the gateway pods' `/metrics` (Prometheus): those of `namespace` with
    every label of `pod_labels` (none: every pod there)."""

    namespace: str
    pod_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class OperatorConfig:
    recorder_image: str = DEFAULT_RECORDER_IMAGE
    setup_image: str = DEFAULT_SETUP_IMAGE
    #: Store of runs whose spec names none (`s3://bucket/prefix`).
    store_uri: str | None = None
    #: Credentials written into each run's store Secret (recorder only) when the run names no Secret.
    store_credentials: Mapping[str, str] = field(default_factory=dict)
    store_egress: tuple[Egress, ...] = ()
    apiserver_egress: tuple[Egress, ...] = ()
    setup_allowance_s: int = DEFAULT_SETUP_ALLOWANCE_S
    workspace_size: str = DEFAULT_WORKSPACE_SIZE
    storage_class: str | None = None
    recorder_cpu: str = "500m"
    recorder_memory: str = "1Gi"
    setup_cpu: str = "1"
    setup_memory: str = "4Gi"
    #: `A2RL_RECORDER_DRAIN_TIMEOUT` of the recorder sidecar (see `manifests.job.recorder_drain_budget_s`).
    recorder_drain_timeout_s: int = DEFAULT_RECORDER_DRAIN_TIMEOUT_S
    #: Size (GiB) of the recorder's spool emptyDir: what waits there while the store is unreachable.
    recorder_spool_gi: int = 20
    #: Size (GiB) of the set-up container's scratch emptyDir (model cache, train data before the copy).
    setup_scratch_gi: int = 20
    #: Give each run store keys of its own, limited to its prefix (MinIO's admin API), where the
    #: store allows it (`a2rl_operator.store_access`); else (or when False) the operator's keys.
    scoped_store_credentials: bool = True
    #: Seconds the finalizer may wait for artifact retention before it lets the BenchRun go.
    finalizer_timeout_s: int = 300
    #: A stack run's driver gateway pod (`a2rl gateway serve`, in the recorder image).
    gateway_cpu: str = "250m"
    gateway_memory: str = "512Mi"
    #: Who may reach the gateway pods' port for `GET /metrics` (`--gateway-metrics-from`): an ingress
    #: rule of each gateway NetworkPolicy.
    gateway_metrics_from: tuple[MetricsScraper, ...] = ()
    #: The cluster's DNS domain: the workspace pod (which has no DNS) gets in-cluster Service names
    #: pinned as `<svc>.<ns>`, `<svc>.<ns>.svc` and `<svc>.<ns>.svc.<cluster_domain>`.
    cluster_domain: str = "cluster.local"
    #: Eval Jobs, the end of a run and the report Job (`A2RL_GRADER_IMAGE` …); default: grading off.
    grading: GradingConfig = field(default_factory=GradingConfig)
    #: Scheduling and pull settings merged into every pod the operator creates, per kind of pod
    #: (`manifests.pod_defaults`), the global pull Secrets already in each kind's.
    pod_defaults: PodDefaults = field(default_factory=PodDefaults)
    #: The queueing limit (`--queue-timeout`, `A2RL_QUEUE_TIMEOUT`): seconds a queued run may wait
    #: for Kueue's first admission before it ends `Failed` (`NotScheduled`); None: no limit.
    queue_timeout_s: int | None = None


def parse_egress(text: str) -> Egress:
    """`10.0.0.0/8:9000`, `10.1.2.3:443` or `10.1.2.3` → Egress (a bare IP becomes a /32)."""
    import ipaddress

    host, sep, port = text.rpartition(":")
    if not sep or "/" in port:
        host, port = text, ""
    try:
        net = ipaddress.ip_network(host, strict=False)
    except ValueError:
        raise A2rlError(f"egress {text!r}: expected CIDR[:PORT] or IP[:PORT]") from None
    if port and not port.isdigit():
        raise A2rlError(f"egress {text!r}: port must be a number")
    return Egress(str(net), int(port) if port else None)


def parse_metrics_scraper(text: str) -> MetricsScraper:
    """`monitoring` or `monitoring:app.kubernetes.io/name=prometheus,team=obs` → MetricsScraper."""
    namespace, _, labels = text.partition(":")
    if len(namespace) > 63 or not DNS_LABEL_RE.fullmatch(namespace):
        raise A2rlError(f"gateway metrics scraper {text!r}: expected NAMESPACE[:KEY=VALUE,…]")
    pairs = []
    for item in filter(None, labels.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise A2rlError(f"gateway metrics scraper {text!r}: label {item!r} is not KEY=VALUE")
        pairs.append((key, value))
    return MetricsScraper(namespace, tuple(pairs))


def store_credentials_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """The S3 credentials the operator hands to recorders (from its own environment)."""
    keys = (ENV_S3_ENDPOINT, ENV_S3_ACCESS_KEY, ENV_S3_SECRET_KEY)
    return {k: env[k] for k in keys if env.get(k)}


def default_store_uri(env: Mapping[str, str] | None = None) -> str | None:
    return (env if env is not None else os.environ).get(ENV_STORE_URI) or None


_PULL_SECRETS = TypeAdapter(list[LocalObjectReference])


def pod_defaults_from_env(env: Mapping[str, str]) -> PodDefaults:
    """`A2RL_POD_DEFAULTS` (the chart's `podDefaults` as JSON) with the global pull Secrets of
    `A2RL_IMAGE_PULL_SECRETS` (JSON `[{"name": …}]`) put first in every kind's; unset: none."""
    try:
        defaults = PodDefaults.model_validate_json(env.get(ENV_POD_DEFAULTS) or "{}")
        pull = _PULL_SECRETS.validate_json(env.get(ENV_IMAGE_PULL_SECRETS) or "[]")
    except ValidationError as exc:  # one line: where, and what is wrong there
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise A2rlError(f"{ENV_POD_DEFAULTS}/{ENV_IMAGE_PULL_SECRETS}: {problems}") from None
    if not pull:
        return defaults
    merged = {}
    for name in PodDefaults.model_fields:
        part = defaults.component(name)
        merged[name] = part.model_copy(update={"image_pull_secrets": [*pull, *part.image_pull_secrets]})
    return PodDefaults(**merged)


def queue_timeout_from_env(env: Mapping[str, str]) -> int | None:
    """`A2RL_QUEUE_TIMEOUT` (seconds, > 0); unset or empty: no limit."""
    text = (env.get(ENV_QUEUE_TIMEOUT) or "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) <= 0:
        raise A2rlError(f"{ENV_QUEUE_TIMEOUT}: a number of seconds above 0 (got {text!r})")
    return int(text)
