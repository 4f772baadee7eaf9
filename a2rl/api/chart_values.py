"""The values of the Helm chart (`charts/a2rl`) as a model: the one description of every value.

`a2rl chart generate` writes from it the chart's `values.yaml` (defaults, with each description as
a comment), `values.schema.json` (Helm refuses unknown keys and wrong types with it) and the value
table of docs/install.md; a test fails when any of them drifts (`a2rl.api.chartgen`).

`PodDefaults` is also what the operator reads back at start-up (`A2RL_POD_DEFAULTS`, the JSON of
`podDefaults`; `A2RL_IMAGE_PULL_SECRETS`, the JSON of the chart's global `imagePullSecrets`), so
the chart and the operator share one shape of it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from a2rl.api.common import DNS_LABEL, DNS_SUBDOMAIN, ApiModel, Quantity

# CIDR[:PORT] or IP[:PORT] (the operator parses it: `a2rl_operator.config.parse_egress`).
EGRESS_PATTERN = r"^[0-9A-Fa-f.:]+(/[0-9]{1,3})?(:[0-9]{1,5})?$"
# A registry host, with an optional port and path (`registry.example:5000/mirror`).
REGISTRY_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[-a-z0-9._/]+)?$"
Egress = Annotated[str, Field(pattern=EGRESS_PATTERN)]
# A registry or repository prefix of image references (`ghcr.io/a2rl`, `registry.example:5000`).
ImagePrefix = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][-A-Za-z0-9._:/]*$")]
Seconds = int
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
ValidationAction = Literal["Deny", "Warn", "Audit"]


class LocalObjectReference(ApiModel):
    """A Secret of the pod's namespace, by name (`imagePullSecrets` entries)."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="Name of the Secret.")


class Toleration(ApiModel):
    """A Kubernetes toleration (core/v1 Toleration)."""

    key: str = Field(default="", max_length=316, description="Taint key; empty with `Exists`: every taint.")
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="`Equal` or `Exists`.")
    value: str = Field(default="", max_length=63, description="Taint value (with `Equal`).")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="", description="Taint effect to match; empty: every effect."
    )
    toleration_seconds: int | None = Field(
        default=None, description="With `NoExecute`: how long the pod stays bound after the taint."
    )


NodeSelector = dict[str, str]
#: core/v1 Affinity: not ours, so not checked beyond being an object.
Affinity = dict[str, Any]


class ComponentPodDefaults(ApiModel):
    """Scheduling and pull settings of one kind of pod the operator creates."""

    node_selector: NodeSelector = Field(
        default_factory=dict, description="Node labels the pods must match (merged; the pod's own keys win)."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations added to the pods' own."
    )
    affinity: Affinity = Field(
        default_factory=dict, description="core/v1 Affinity of the pods (when the pod has none of its own)."
    )
    priority_class_name: str = Field(
        default="", max_length=253, description="PriorityClass of the pods (empty: the cluster's default)."
    )
    runtime_class_name: str = Field(
        default="",
        max_length=253,
        description="RuntimeClass of the pods (gVisor, Kata); a BenchRun's `spec.runtimeClassName` wins.",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        description="Pull Secrets of these pods, after the global `imagePullSecrets` (Secrets of the "
        "run's namespace).",
    )


class PodDefaults(ApiModel):
    """Defaults merged into every pod the operator creates, per kind of pod."""

    workspace: ComponentPodDefaults = Field(
        default_factory=ComponentPodDefaults,
        description="The workspace pod of each run (agent, recorder sidecar, set-up).",
    )
    eval: ComponentPodDefaults = Field(
        default_factory=ComponentPodDefaults, description="Eval pods (one per submission)."
    )
    report: ComponentPodDefaults = Field(
        default_factory=ComponentPodDefaults, description="The report pod of each run."
    )
    gateway: ComponentPodDefaults = Field(
        default_factory=ComponentPodDefaults, description="The driver gateway pod of a stack run."
    )

    def component(self, name: str) -> ComponentPodDefaults:
        return {
            "workspace": self.workspace,
            "eval": self.eval,
            "report": self.report,
            "gateway": self.gateway,
        }[name]


class ImageValues(ApiModel):
    """The operator's image."""

    repository: str = Field(default="ghcr.io/a2rl/operator", min_length=1, description="Image repository.")
    tag: str = Field(default="", description="Image tag; empty: the chart's `appVersion`.")
    pull_policy: PullPolicy = Field(default="IfNotPresent", description="`imagePullPolicy` of the operator.")


class ResourceValues(ApiModel):
    """Container resources (core/v1 ResourceRequirements without claims)."""

    requests: dict[str, Quantity] = Field(default_factory=dict, description="Requested amounts.")
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Limits.")


class MonitorValues(ApiModel):
    """A Prometheus Operator monitor object (needs its CRD)."""

    enabled: bool = Field(default=False, description="Create the monitor object.")
    interval: str = Field(
        default="30s", pattern=r"^[0-9]+(ms|s|m|h)$", description="How often Prometheus scrapes."
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels of the monitor object, e.g. the `release` your Prometheus selects.",
    )


class ServiceMonitorValues(MonitorValues):
    """A Prometheus Operator ServiceMonitor of the operator's `/metrics` (needs its CRD)."""


class MetricsScraperValues(ApiModel):
    """Pods that may scrape the gateway pods' `/metrics`: a NetworkPolicy peer."""

    namespace: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL,
        description="Namespace of the scraper (Prometheus), matched by its "
        "`kubernetes.io/metadata.name` label.",
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels of the scraper's pods (`matchLabels`); empty: every pod of the namespace.",
    )


class PodMonitorValues(MonitorValues):
    """A Prometheus Operator PodMonitor of every gateway pod's `/metrics` (needs its CRD)."""


class GatewayMetricsValues(ApiModel):
    """Prometheus and the driver gateway pods of stack runs."""

    scrapers: list[MetricsScraperValues] = Field(
        default_factory=list,
        description="Who may reach each gateway pod's port 8080 for `GET /metrics` (an ingress rule of "
        "every gateway NetworkPolicy; `a2rl operator --gateway-metrics-from`). The relay itself "
        "answers nothing without the run's token.",
    )
    pod_monitor: PodMonitorValues = Field(
        default_factory=PodMonitorValues,
        description="Scrape every gateway pod with the Prometheus Operator (in every namespace).",
    )


class GatewayValues(ApiModel):
    """The driver gateway pod of each stack run."""

    metrics: GatewayMetricsValues = Field(
        default_factory=GatewayMetricsValues, description="Its Prometheus `/metrics`."
    )


class OperatorValues(ApiModel):
    """The operator Deployment: one replica, or several that elect a leader."""

    image: ImageValues = Field(
        default_factory=ImageValues, description="Operator image (runs `a2rl operator`)."
    )
    watch_namespaces: list[str] = Field(
        default_factory=list, description="Namespaces the operator watches; empty: every namespace."
    )
    finalizer_at_create: bool = Field(
        default=True,
        description="Give each new BenchRun the operator's finalizer as the API server admits it (a "
        "MutatingAdmissionPolicy, Kubernetes 1.36+, bound to `watchNamespaces`): the operator then "
        "patches no run to add it (one API call and one watch event less per run). Off, or on an "
        "older cluster: the operator adds it itself.",
    )
    extra_args: list[str] = Field(
        default_factory=list, description='Extra arguments of `a2rl operator`, e.g. `["--verbose"]`.'
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Operator replicas. Above 1 they elect a leader through the Lease `a2rl-operator` in "
        "the release namespace: one reconciles, the others stand by and take over within about 15 s "
        "when it stops (`a2rl operator --leader-elect`).",
    )
    health_port: int = Field(
        default=8080,
        ge=1,
        le=65535,
        description="Port of the operator's probes and metrics: liveness `/healthz` (the process "
        "answers), readiness `/readyz` (started, and the API server answers), Prometheus `/metrics`.",
    )
    service_monitor: ServiceMonitorValues = Field(
        default_factory=ServiceMonitorValues,
        description="Scrape `/metrics` with the Prometheus Operator (the metrics Service always exists).",
    )
    resources: ResourceValues = Field(
        default_factory=lambda: ResourceValues(
            requests={"cpu": "100m", "memory": "256Mi"}, limits={"memory": "512Mi"}
        ),
        description="Resources of the operator container.",
    )
    node_selector: NodeSelector = Field(default_factory=dict, description="nodeSelector of the operator pod.")
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations of the operator pod."
    )
    affinity: Affinity = Field(default_factory=dict, description="Affinity of the operator pod.")
    priority_class_name: str = Field(
        default="", max_length=253, description="PriorityClass of the operator pod."
    )


class RecorderValues(ApiModel):
    """The workspace pod's a2rl containers."""

    image: str = Field(
        default="ghcr.io/a2rl/recorder:0.1.0",
        min_length=1,
        description="Image of the recorder sidecar (grading API, snapshots) and of a stack run's "
        "driver gateway pod.",
    )
    setup_image: str = Field(
        default="ghcr.io/a2rl/grader:0.1.0",
        min_length=1,
        description="Image of the workspace set-up init container (`a2rl recorder setup`: base model, "
        "train data, baseline submission); it needs the ML stack: the grader image.",
    )
    drain_timeout_seconds: Seconds = Field(
        default=60,
        ge=1,
        description="`A2RL_RECORDER_DRAIN_TIMEOUT` of each recorder: from its SIGTERM to everything "
        "recorded in the store (seconds with the store up; how long a store outage at the run's end "
        "may last). The workspace pod's termination grace is `graceSeconds` + this + 15 s.",
    )


class JudgeValues(ApiModel):
    """The judge of judge-based tasks (alpacaeval, deepsearchqa)."""

    base_url: str = Field(
        default="",
        description="OpenAI-compatible API root, e.g. `http://judge.llm:8000/v1` (an IP or an in-cluster "
        "Service: the eval pods' NetworkPolicy allows it); eval Jobs only, never the workspace pod.",
    )
    model: str = Field(default="", description="The judge's model.")


class GradingValues(ApiModel):
    """Eval Jobs (one per submission) and the report Job."""

    grader_image: str = Field(
        default="",
        description="Image of eval and report Jobs (images/grader). Empty: nothing is graded "
        "(submissions stay Pending, a run ends when its agent does).",
    )
    eval_timeout_seconds: Seconds = Field(
        default=7200, ge=1, description="`activeDeadlineSeconds` of an eval Job."
    )
    report_timeout_seconds: Seconds = Field(
        default=1800, ge=1, description="`activeDeadlineSeconds` of the report Job."
    )
    drain_timeout_seconds: Seconds = Field(
        default=1800, ge=0, description="How long the end of a run waits for in-flight evaluations."
    )
    submit_allowance_seconds: Seconds = Field(
        default=600, ge=0, description="How long after a run's deadline a BenchSubmission is still accepted."
    )
    heldout_pvc: str = Field(
        default="",
        description="PVC with staged held-out data; empty: each eval Job fetches it from the store.",
    )
    judge: JudgeValues = Field(default_factory=JudgeValues, description="Judge of judge-based tasks.")
    search_url: str = Field(default="", description="Search API of deepsearchqa (eval Jobs only).")


class StoreValues(ApiModel):
    """The object store (S3 or MinIO) of runs, records and data."""

    uri: str = Field(
        default="",
        pattern=r"^(s3://[a-z0-9][-a-z0-9.]*[a-z0-9](/.*)?)?$",
        description="Default store of runs whose spec names none, e.g. `s3://a2rl-runs/prod`.",
    )
    credentials_secret: str = Field(
        default="",
        description="Existing Secret (in the release's namespace) with `AWS_ENDPOINT_URL`, "
        "`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`: the operator's store keys.",
    )
    egress: list[Egress] = Field(
        default_factory=list,
        description='Where run pods may reach the store, `CIDR[:PORT]` (e.g. `["10.20.0.15/32:9000"]`): '
        "NetworkPolicy cannot match host names.",
    )


class ApiServerValues(ApiModel):
    """The workspace pod's way to the API server (its recorder creates BenchSubmissions)."""

    egress: list[Egress] = Field(
        default_factory=list,
        description="NetworkPolicy egress to the API server, `CIDR[:PORT]`; empty: the in-cluster "
        "Service IP and port the operator sees.",
    )


class WorkspaceValues(ApiModel):
    """Each run's workspace volume and Job."""

    size: Quantity = Field(
        default="20Gi", description="Default size of a workspace PVC (a run may set its own)."
    )
    storage_class: str = Field(default="", description="StorageClass of workspace PVCs; empty: the default.")
    setup_allowance_seconds: Seconds = Field(
        default=600,
        ge=0,
        description="Seconds added to the budget for the workspace Job's deadline (pull, start-up, staging).",
    )


class FinalizerValues(ApiModel):
    """The BenchRun finalizer (artifact retention)."""

    timeout_seconds: Seconds = Field(
        default=300,
        ge=0,
        description="Seconds a deleted BenchRun may be held for its final record before it is released "
        'anyway (escape hatch: annotate it `a2rl.dev/force-finalize="true"`).',
    )


def _deny() -> list[ValidationAction]:
    return ["Deny"]


class AdmissionPolicyValues(ApiModel):
    """ValidatingAdmissionPolicies on BenchRuns: a cluster's own limits, refused at `kubectl apply`
    with a message that names the field (before the operator sees the run)."""

    enabled: bool = Field(
        default=False, description="Install the policies (a ValidatingAdmissionPolicy and its binding)."
    )
    max_wall_time_seconds: int = Field(
        default=0, ge=0, description="Most `spec.budget.wallTimeSeconds` a BenchRun may ask; 0: no limit."
    )
    max_gpus: int = Field(
        default=-1,
        ge=-1,
        description="Most GPUs of the agent's pod (`spec.resources.gpus`) and of each evaluation "
        "(`spec.evaluation.gpus`); -1: no limit.",
    )
    allowed_image_registries: list[ImagePrefix] = Field(
        default_factory=list,
        description='Where agent images (`spec.agent.image`) may come from, e.g. `["ghcr.io/a2rl"]`: '
        "a registry or repository prefix, matched up to a `/`; empty: anywhere.",
    )
    known_tasks_only: bool = Field(
        default=True,
        description="Refuse a `spec.task` this version of a2rl does not know (the chart's "
        "`files/tasks.json`), instead of the operator's `UnknownTask` after creation.",
    )
    validation_actions: list[ValidationAction] = Field(
        default_factory=_deny,
        min_length=1,
        description="What a violation does: `Deny` (refused), `Warn` (a warning to the client), `Audit`.",
    )


class RbacValues(ApiModel):
    create: bool = Field(
        default=True,
        description="Create the operator's ServiceAccount, ClusterRole and ClusterRoleBinding "
        "(rules from operator/a2rl_operator/rbac.py).",
    )


class ServiceAccountValues(ApiModel):
    name: str = Field(
        default="",
        pattern=r"^(" + DNS_SUBDOMAIN[1:-1] + r")?$",
        description="Name of the operator's ServiceAccount; empty: `<fullname>-operator`.",
    )


class ChartValues(ApiModel):
    """Every value of the a2rl chart."""

    global_: dict[str, Any] = Field(
        default_factory=dict,
        alias="global",
        description="Values a parent chart shares with its subcharts; not read by this chart.",
    )
    image_registry: str = Field(
        default="",
        pattern=r"^(" + REGISTRY_PATTERN[1:-1] + r")?$",
        description="Registry of the chart's own images (operator, recorder, set-up, grader): replaces "
        "the registry of each (`ghcr.io`), e.g. a mirror `registry.example:5000`. Agent images are "
        "the runs' own.",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        description="Pull Secrets of the operator pod (release namespace) and of every pod it creates "
        "(the run's namespace: the Secret must exist there).",
    )
    operator: OperatorValues = Field(
        default_factory=OperatorValues,
        description="The operator Deployment: one replica, or several that elect a leader.",
    )
    recorder: RecorderValues = Field(
        default_factory=RecorderValues, description="a2rl images of each run's workspace pod."
    )
    gateway: GatewayValues = Field(
        default_factory=GatewayValues, description="The driver gateway pod of each stack run."
    )
    grading: GradingValues = Field(
        default_factory=GradingValues,
        description="Grading: eval Jobs (one per submission) and the report Job; off without `graderImage`.",
    )
    store: StoreValues = Field(
        default_factory=StoreValues, description="The object store (S3, MinIO) of runs, data and models."
    )
    api_server: ApiServerValues = Field(
        default_factory=ApiServerValues, description="How workspace pods reach the API server."
    )
    workspace: WorkspaceValues = Field(
        default_factory=WorkspaceValues, description="Each run's workspace PVC and Job."
    )
    finalizer: FinalizerValues = Field(
        default_factory=FinalizerValues, description="The BenchRun finalizer (artifact retention)."
    )
    pod_defaults: PodDefaults = Field(
        default_factory=PodDefaults,
        description="Scheduling and pull defaults of the pods the operator creates, per kind of pod.",
    )
    admission_policies: AdmissionPolicyValues = Field(
        default_factory=AdmissionPolicyValues,
        description="Limits on BenchRuns enforced by the API server (off by default).",
    )
    rbac: RbacValues = Field(default_factory=RbacValues, description="The operator's RBAC.")
    service_account: ServiceAccountValues = Field(
        default_factory=ServiceAccountValues, description="The operator's ServiceAccount."
    )
    name_override: str = Field(
        default="",
        max_length=63,
        pattern=r"^(" + DNS_LABEL[1:-1] + r")?$",
        description="Replaces the chart name in names.",
    )
    fullname_override: str = Field(
        default="",
        max_length=50,
        pattern=r"^(" + DNS_LABEL[1:-1] + r")?$",
        description="Replaces `<release>-<chart>` in names.",
    )
