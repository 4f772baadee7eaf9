"""The BenchRun custom resource: one agent, one task, one budget."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from a2rl.api.common import (
    X_VALIDATIONS,
    ApiModel,
    Condition,
    EnvVar,
    Name,
    Quantity,
    SecretKeyRef,
    SubdomainName,
    cel,
    immutable,
    map_list,
    rule_error,
)
from a2rl.constants import (
    AGENT_CONTRACT_ENV,
    BENCHRUN_KIND,
    ENV_JUDGE_BASE_URL,
    ENV_JUDGE_MODEL,
    ENV_SEED,
    WORKSPACE_MOUNT,
)

# Variables a2rl sets for the agent; `spec.agent.env` may not override them.
RESERVED_AGENT_ENV: tuple[str, ...] = (*AGENT_CONTRACT_ENV, ENV_SEED)
MAX_RUN_NAME = 63
# One argv element; bounded so CEL rules over the agent stay cheap for the API server.
Arg = Annotated[str, Field(max_length=4096)]


class Phase(StrEnum):
    """One-word summary of a BenchRun's conditions, for display."""

    PENDING = "Pending"
    QUEUED = "Queued"
    RUNNING = "Running"
    GRADING = "Grading"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class BaseModelSpec(ApiModel):
    """The model the agent starts from."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Model name given to the agent as `BASE_MODEL` (e.g. `Qwen/Qwen2.5-1.5B`).",
    )
    source: str = Field(
        min_length=1,
        max_length=4096,
        description=(
            "Where the weights come from: `builtin:tiny` (a tiny model built locally), a local "
            "directory path (`/models/qwen` or `file:///models/qwen`; in a cluster: inside the "
            "set-up image), or `store:<name>`, a model pushed to the run's store with `a2rl models "
            "push DIR --name NAME`. Hubs are never contacted at run time."
        ),
    )


def _env_names_rule() -> str:
    names = ", ".join(f"'{n}'" for n in RESERVED_AGENT_ENV)
    return f"self.all(e, !(e.name in [{names}]))"


# The API server's half of `working_dir_problem` (CEL has no path normalisation: no `..` at all).
_WORKING_DIR_RULE = (
    "!self.matches('(^|/)[.][.](/|$)') && "
    f"(!self.startsWith('/') || self == '{WORKSPACE_MOUNT}' || self.startsWith('{WORKSPACE_MOUNT}/'))"
)


def working_dir_problem(wd: str) -> str | None:
    """Why `spec.agent.workingDir` would leave the workspace (None: it stays inside)."""
    if "\0" in wd:
        return "must not contain NUL characters"
    if ".." in wd.split("/"):
        return f"must stay inside the workspace: '..' is not allowed (got {wd!r})"
    if wd.startswith("/") and not (wd == WORKSPACE_MOUNT or wd.startswith(f"{WORKSPACE_MOUNT}/")):
        return f"must stay inside the workspace: relative to it, or under {WORKSPACE_MOUNT}/ (got {wd!r})"
    return None


def _no_nul(values: list[str]) -> list[str]:
    for i, value in enumerate(values):
        if "\0" in value:
            raise rule_error("must not contain NUL characters", f"[{i}]")
    return values


class AgentSpec(ApiModel):
    """The agent program: what runs in the workspace with the budget."""

    image: str = Field(
        default="ghcr.io/a2rl/agent-baselines:0.1.0",
        min_length=1,
        max_length=1024,
        description="Container image of the agent (cluster mode).",
    )
    command: list[Arg] = Field(min_length=1, max_length=256, description="Command the agent runs (argv).")
    args: list[Arg] = Field(
        default_factory=list, max_length=256, description="Extra arguments appended to `command`."
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "Extra environment for the agent (names unique). The contract variables "
            f"({', '.join(f'`{n}`' for n in RESERVED_AGENT_ENV)}) are set by a2rl and cannot be overridden."
        ),
        json_schema_extra={
            **map_list("name"),
            X_VALIDATIONS: [
                cel(_env_names_rule(), "env must not set the agent contract variables (TASK, BASE_MODEL, …)")
            ],
        },
    )
    working_dir: str | None = Field(
        default=None,
        max_length=4096,
        description=(
            "Working directory inside the workspace (default: the workspace root): relative to "
            f"the workspace, or absolute under `{WORKSPACE_MOUNT}` (where the workspace is mounted "
            "in a cluster); `..` is not allowed."
        ),
        json_schema_extra={
            X_VALIDATIONS: [cel(_WORKING_DIR_RULE, "workingDir must stay inside the workspace")]
        },
    )

    @field_validator("working_dir")
    @classmethod
    def _working_dir_inside(cls, wd: str | None) -> str | None:
        problem = working_dir_problem(wd) if wd else None
        if problem:
            raise rule_error(problem)
        return wd

    @field_validator("command", "args")
    @classmethod
    def _argv_without_nul(cls, argv: list[str]) -> list[str]:
        return _no_nul(argv)  # no process can be started with a NUL in its argv

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: list[EnvVar]) -> list[EnvVar]:
        seen: set[str] = set()
        for i, var in enumerate(env):
            if "\0" in var.value:
                raise rule_error("must not contain NUL characters", f"[{i}].value")
            if var.name in RESERVED_AGENT_ENV:
                raise rule_error(f"{var.name} is set by a2rl and cannot be overridden", f"[{i}].name")
            if var.name in seen:
                raise rule_error(f"duplicate variable {var.name}", f"[{i}].name")
            seen.add(var.name)
        return env


class DriverSpec(ApiModel):
    """The LLM that drives the agent, reached through an OpenAI-compatible gateway."""

    model: str = Field(min_length=1, max_length=253, description="Driver model name, recorded in the report.")
    base_url: str | None = Field(
        default=None, max_length=2048, description="OpenAI-compatible base URL of the gateway."
    )
    secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding the gateway API key (exposed as `OPENAI_API_KEY`)."
    )


class BudgetSpec(ApiModel):
    """What the agent may spend."""

    wall_time_seconds: int = Field(
        ge=1,
        le=7 * 24 * 3600,
        description="Wall-clock budget of the agent, in seconds (the reference uses 12 h = 43200).",
    )
    max_submissions: int | None = Field(
        default=None,
        ge=1,
        le=10000,
        description="Most submissions the grading API accepts (unlimited if unset).",
    )
    grace_seconds: int = Field(
        default=30, ge=0, le=3600, description="Time between SIGTERM and SIGKILL when the budget ends."
    )


class ResourcesSpec(ApiModel):
    """Compute of the agent container."""

    cpu: Quantity = Field(default="2", description="CPU request (and limit) of the agent container.")
    memory: Quantity = Field(default="8Gi", description="Memory request (and limit) of the agent container.")
    gpus: int = Field(default=0, ge=0, le=64, description="GPUs for the agent container.")
    ephemeral_storage: Quantity = Field(
        default="20Gi",
        description=(
            "Local ephemeral storage request (and limit) of the agent container: its writable "
            "layer, `/tmp` and logs (the workspace is a volume of its own, `workspaceSize`)."
        ),
    )
    workspace_size: Quantity | None = Field(
        default=None,
        description="Size of the workspace volume (default: the operator's `--workspace-size`).",
    )
    gpu_resource_name: str = Field(
        default="nvidia.com/gpu",
        min_length=1,
        max_length=253,
        description="Extended resource name of the GPUs.",
    )


#: An http(s) URL with a host (the CRD's pattern; the model's validator says it in words).
HTTP_URL_PATTERN = r"^https?://[^/?#\s@]+([/?#]\S*)?$"


class JudgeSpec(ApiModel):
    """The LLM judge of judge-based tasks (alpacaeval, deepsearchqa) for this run."""

    base_url: str = Field(
        min_length=1,
        max_length=2048,
        description=(
            "OpenAI-compatible API root of the judge, e.g. `http://judge.llm:8000/v1` (requests go "
            "to `<baseUrl>/chat/completions`). In a cluster, the host must be an IP address or an "
            "in-cluster Service (`<service>[.<namespace>[.svc[.cluster.local]]]`): the eval pods' "
            "NetworkPolicy allows egress to it and to nothing else outside the store."
        ),
        json_schema_extra={"pattern": HTTP_URL_PATTERN},
    )
    model: str = Field(
        min_length=1,
        max_length=253,
        description="Judge model name (part of the evaluator version, so of the baseline cache key).",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.match(HTTP_URL_PATTERN, url):
            raise rule_error(f"must be an http(s) URL such as https://judge.example/v1 (got {url!r})")
        return url


class EvaluationSpec(ApiModel):
    """How submissions are evaluated (each in a fresh process or Job)."""

    cpu: Quantity = Field(default="2", description="CPU request of each evaluation.")
    memory: Quantity = Field(default="8Gi", description="Memory request of each evaluation.")
    gpus: int = Field(default=0, ge=0, le=64, description="GPUs of each evaluation.")
    ephemeral_storage: Quantity = Field(
        default="60Gi",
        description=(
            "Local ephemeral storage of each evaluation (request and limit; the size of its "
            "scratch volume, where the submitted model is downloaded)."
        ),
    )
    backend: Literal["auto", "transformers", "vllm"] = Field(
        default="auto", description="Inference backend: `auto` picks vLLM when a GPU is present."
    )
    limit: int | None = Field(
        default=None, ge=1, description="Evaluate only the first N held-out items (smoke runs)."
    )
    judge_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Judge API key for judge-based tasks; mounted only into evaluation."
    )
    judge: JudgeSpec | None = Field(
        default=None,
        description=(
            "The judge of judge-based tasks for this run (default: the operator's, or the "
            "`A2RL_JUDGE_*` environment of `a2rl run`). Set only in evaluation, never for the agent."
        ),
    )

    def judge_env(self) -> dict[str, str]:
        """`A2RL_JUDGE_BASE_URL`/`A2RL_JUDGE_MODEL` of the evaluation process (empty: no per-run judge)."""
        if self.judge is None:
            return {}
        return {ENV_JUDGE_BASE_URL: self.judge.base_url, ENV_JUDGE_MODEL: self.judge.model}


class StoreSpec(ApiModel):
    """Where the run's records go."""

    uri: str | None = Field(
        default=None,
        max_length=4096,
        description=(
            "Object store for snapshots, results and reports: a directory (`file:///path` or a "
            "path) or `s3://bucket/prefix`. Default: `~/.a2rl/store` locally, the operator's "
            "configured store in a cluster."
        ),
    )
    secret_ref: Name | None = Field(
        default=None,
        description=(
            "Name of a Secret with `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID` and "
            "`AWS_SECRET_ACCESS_KEY` (cluster)."
        ),
    )


_DRIVER_IMMUTABLE = (
    "has(self.driver) == has(oldSelf.driver) && (!has(self.driver) || self.driver == oldSelf.driver)"
)


class BenchRunSpec(ApiModel):
    """The experiment. What defines it (task, model, agent, driver, budget, evaluation, seed) is
    immutable after creation; operational settings (resources, store, queue) may change."""

    model_config = ConfigDict(
        json_schema_extra={
            X_VALIDATIONS: [
                cel(_DRIVER_IMMUTABLE, "driver is immutable; create a new object instead", ".driver")
            ]
        }
    )

    task: str = Field(
        min_length=1,
        max_length=63,
        description="Task id, e.g. `gsm8k`, `alfworld`, `arith` (`a2rl tasks list`).",
        json_schema_extra=immutable("task"),
    )
    base_model: BaseModelSpec = Field(
        description="The model the agent post-trains.", json_schema_extra=immutable("baseModel")
    )
    agent: AgentSpec = Field(description="The agent program.", json_schema_extra=immutable("agent"))
    driver: DriverSpec | None = Field(
        default=None, description="The LLM driving the agent, when it is an LLM agent."
    )
    budget: BudgetSpec = Field(description="What the agent may spend.", json_schema_extra=immutable("budget"))
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, description="Compute of the agent.")
    evaluation: EvaluationSpec = Field(
        default_factory=EvaluationSpec,
        description="How submissions are evaluated.",
        json_schema_extra=immutable("evaluation"),
    )
    store: StoreSpec = Field(default_factory=StoreSpec, description="Where the run's records go.")
    seed: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="Seed given to data staging and the agent (`SEED`).",
        json_schema_extra=immutable("seed"),
    )
    queue_name: str | None = Field(
        default=None,
        max_length=253,
        description="Kueue LocalQueue; the workspace Job is created suspended for admission.",
    )
    runtime_class_name: str | None = Field(
        default=None, max_length=253, description="RuntimeClass of the agent pod (e.g. `gvisor`)."
    )
    llm_gateway: str | None = Field(
        default=None,
        max_length=253,
        description="Host (or CIDR) of the LLM gateway the agent may reach; all other egress is denied.",
    )


class ReportRef(ApiModel):
    """Summary of the run report, mirrored into status when the report is written."""

    uri: str = Field(description="Where the report lives in the store.")
    schema_version: str = Field(description="Version of the report.json schema.")
    baseline_score: float | None = Field(default=None, description="Score of the base model (submission 0).")
    best_score: float | None = Field(default=None, description="Best score of a valid agent submission.")
    improvement: float | None = Field(default=None, description="`bestScore - baselineScore`.")
    valid_submissions: int = Field(default=0, ge=0, description="Agent submissions that produced a score.")
    route: str | None = Field(
        default=None,
        description="Post-training route (`SFT`, `RL`, `copy-of-base`, …).",
    )
    summary: str | None = Field(
        default=None, description="One line: baseline, best (submission), improvement, valid submissions."
    )


class BenchRunStatus(ApiModel):
    """Observed state, written only by the operator (local mode: by the runner into run.json)."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The `metadata.generation` the status was computed from."
    )
    phase: Phase | None = Field(default=None, description="Summary of the conditions for display.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Lifecycle conditions (`Accepted`, `Queued`, `Admitted`, `WorkspaceReady`, `AgentRunning`, "
            "`AgentFinished`, `Graded`, `Succeeded`, `Failed`), one per type, in the order first set."
        ),
        json_schema_extra=map_list("type"),
    )
    start_time: datetime | None = Field(default=None, description="When the agent's clock started.")
    completion_time: datetime | None = Field(
        default=None, description="When the run reached a terminal state."
    )
    store_prefix: str | None = Field(default=None, description="The run's prefix in the object store.")
    submission_count: int = Field(
        default=0, ge=0, description="Agent submissions so far (the baseline, submission 0, not counted)."
    )
    baseline_score: float | None = Field(default=None, description="Score of the base model (submission 0).")
    best_score: float | None = Field(
        default=None, description="Best score of a valid agent submission so far."
    )
    best_submission: int | None = Field(default=None, ge=0, description="Index of the best submission.")
    improvement: float | None = Field(default=None, description="`bestScore - baselineScore`.")
    report: ReportRef | None = Field(default=None, description="The run report, once written.")


class ObjectMeta(ApiModel):
    """The part of metav1.ObjectMeta a2rl reads (the API server owns the rest)."""

    model_config = ConfigDict(extra="allow")

    name: SubdomainName = Field(description="Object name, unique in the namespace.")
    namespace: str | None = Field(default=None, description="Namespace (local mode: `local`).")
    uid: str | None = Field(default=None, description="Unique id assigned by the API server.")
    generation: int | None = Field(default=None, description="Spec generation assigned by the API server.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")


_RUN_NAME_RULE = (
    f"!has(self.metadata.name) || (size(self.metadata.name) <= {MAX_RUN_NAME} "
    "&& !self.metadata.name.contains('.'))"
)


class BenchRun(ApiModel):
    """A benchmark run: one agent post-trains one base model on one task within one budget."""

    model_config = ConfigDict(
        json_schema_extra={
            X_VALIDATIONS: [
                cel(
                    _RUN_NAME_RULE,
                    "metadata.name must be a DNS label of at most 63 characters (no dots): "
                    "it names the run's child objects and labels",
                )
            ]
        }
    )

    api_version: Literal["a2rl.dev/v1alpha1"] = Field(default="a2rl.dev/v1alpha1", description="API version.")
    kind: Literal["BenchRun"] = Field(default=BENCHRUN_KIND, description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: BenchRunSpec = Field(description="The experiment.")
    status: BenchRunStatus | None = Field(default=None, description="Observed state.")

    @field_validator("metadata")
    @classmethod
    def _run_name(cls, metadata: ObjectMeta) -> ObjectMeta:
        name = metadata.name
        if len(name) > MAX_RUN_NAME or "." in name:
            raise rule_error(
                f"must be a DNS label of at most {MAX_RUN_NAME} characters (no dots), got {name!r}", "name"
            )
        return metadata
