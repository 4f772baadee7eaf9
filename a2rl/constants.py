"""One place for every name shared between components: API group, labels, conditions, env vars."""

from typing import Final

API_GROUP: Final = "a2rl.dev"
API_VERSION: Final = "v1alpha1"
API_GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"

BENCHRUN_KIND: Final = "BenchRun"
BENCHRUN_PLURAL: Final = "benchruns"
BENCHRUN_SHORT_NAMES: Final = ("br",)
BENCHSUBMISSION_KIND: Final = "BenchSubmission"
BENCHSUBMISSION_PLURAL: Final = "benchsubmissions"
BENCHSUBMISSION_SHORT_NAMES: Final = ("bsub",)
BENCHCAMPAIGN_KIND: Final = "BenchCampaign"
BENCHCAMPAIGN_PLURAL: Final = "benchcampaigns"
BENCHCAMPAIGN_SHORT_NAMES: Final = ("bcamp",)

# --- labels and annotations (Kubernetes recommended labels; docs/operator.md) ------------------
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
PART_OF: Final = "a2rl"
MANAGED_BY: Final = "a2rl-operator"
LABEL_RUN_NAME: Final = f"{API_GROUP}/run-name"
LABEL_RUN_UID: Final = f"{API_GROUP}/run-uid"
LABEL_SUBMISSION_INDEX: Final = f"{API_GROUP}/submission-index"
#: On a BenchRun a BenchCampaign created (and in its run.json): the campaign's name.
LABEL_CAMPAIGN: Final = f"{API_GROUP}/campaign"
#: On a campaign's BenchRun: the cell's key (`a2rl.campaign.matrix.Cell.key`).
LABEL_CAMPAIGN_CELL: Final = f"{API_GROUP}/campaign-cell"
RESERVED_LABEL_PREFIX: Final = f"{API_GROUP}/"
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_PRIORITY: Final = "kueue.x-k8s.io/priority-class"
ANNOTATION_TRACE_CONTEXT: Final = "opentelemetry.io/trace-context"
ANNOTATION_FORCE_FINALIZE: Final = f"{API_GROUP}/force-finalize"
ANNOTATION_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
FINALIZER: Final = f"{API_GROUP}/artifact-retention"
# The Lease `a2rl operator --leader-elect` replicas elect their leader with (their namespace).
OPERATOR_LEASE: Final = "a2rl-operator"

COMPONENT_AGENT: Final = "agent"
COMPONENT_RECORDER: Final = "recorder"
COMPONENT_EVAL: Final = "eval"
COMPONENT_REPORT: Final = "report"
COMPONENT_SETUP: Final = "setup"  # the workspace pod's first init container (`a2rl recorder setup`)

GPU_RESOURCE: Final = "nvidia.com/gpu"

# --- conditions (conditions, not a phase machine: docs/api.md) ---------------------------------
COND_ACCEPTED: Final = "Accepted"
COND_QUEUED: Final = "Queued"
COND_ADMITTED: Final = "Admitted"
COND_QUOTA_EXCEEDED: Final = "QuotaExceeded"
COND_WORKSPACE_READY: Final = "WorkspaceReady"
COND_AGENT_RUNNING: Final = "AgentRunning"
COND_AGENT_FINISHED: Final = "AgentFinished"
COND_GRADED: Final = "Graded"
COND_SUCCEEDED: Final = "Succeeded"
COND_FAILED: Final = "Failed"
# BenchSubmission: True once scored; False (with the reason) while evaluating, failed or rejected.
COND_EVALUATED: Final = "Evaluated"
# GitOps-readable conditions, the same on BenchRun, BenchSubmission and BenchCampaign (docs/api.md,
# "Status for GitOps tools"): kstatus reads Reconciling/Stalled (with status.observedGeneration),
# Ready is True on success only, and Finished is True on either outcome so that one
# `kubectl wait --for=condition=Finished` ends whatever happens.
COND_READY: Final = "Ready"
COND_RECONCILING: Final = "Reconciling"
COND_STALLED: Final = "Stalled"
COND_FINISHED: Final = "Finished"

REASON_COMPLETED: Final = "Completed"
REASON_DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
REASON_AGENT_FAILED: Final = "Failed"
#: The driver gateway refused further calls: spec.budget.driverTokens / driverCostUSD spent.
REASON_DRIVER_BUDGET_EXHAUSTED: Final = "DriverBudgetExhausted"

# --- the agent-facing environment contract (names fixed by the reference: docs/agents.md) ------
ENV_TASK: Final = "TASK"
ENV_BASE_MODEL: Final = "BASE_MODEL"
ENV_WORKSPACE: Final = "WORKSPACE"
ENV_MODEL_PATH: Final = "MODEL_PATH"
ENV_DATA_PATH: Final = "DATA_PATH"
ENV_OUTPUT_DIR: Final = "OUTPUT_DIR"
ENV_GRADING_SERVER_URL: Final = "GRADING_SERVER_URL"
AGENT_CONTRACT_ENV: Final = (
    ENV_TASK,
    ENV_BASE_MODEL,
    ENV_WORKSPACE,
    ENV_MODEL_PATH,
    ENV_DATA_PATH,
    ENV_OUTPUT_DIR,
    ENV_GRADING_SERVER_URL,
)

# --- internal configuration of recorder / grader processes -------------------------------------
ENV_STORE_URI: Final = "A2RL_STORE_URI"
ENV_RUN_PREFIX: Final = "A2RL_RUN_PREFIX"
ENV_RUN_NAME: Final = "A2RL_RUN_NAME"
ENV_RUN_NAMESPACE: Final = "A2RL_RUN_NAMESPACE"
ENV_RUN_UID: Final = "A2RL_RUN_UID"
ENV_RECORDER_PORT: Final = "A2RL_RECORDER_PORT"
ENV_RECORDER_SOCKET: Final = "A2RL_RECORDER_SOCKET"  # also serve the grading API on this Unix socket
ENV_HELDOUT_PATH: Final = "A2RL_HELDOUT_PATH"
ENV_CACHE_DIR: Final = "A2RL_CACHE_DIR"
#: "stdin": the recorder reads the run's integrity key from its stdin (never from its environment).
ENV_RUN_KEY_SOURCE: Final = "A2RL_RUN_KEY_SOURCE"
#: A file holding the secret that generated held-out sets derive their seed from (default: a
#: machine-local key under <cache>/keys/); for staging machines, never set for an agent.
ENV_HELDOUT_SECRET_FILE: Final = "A2RL_HELDOUT_SECRET_FILE"
# Marks every process of an agent session so the runner can find detached descendants.
ENV_AGENT_SESSION: Final = "A2RL_AGENT_SESSION"
ENV_BWRAP: Final = "A2RL_BWRAP"  # bubblewrap binary for the local sandbox (default: bwrap on PATH)
# The host uid a root runner gives each sandboxed agent (default: one of its own per run).
ENV_SANDBOX_UID: Final = "A2RL_SANDBOX_UID"
ENV_S3_ENDPOINT: Final = "AWS_ENDPOINT_URL"
ENV_S3_ACCESS_KEY: Final = "AWS_ACCESS_KEY_ID"
ENV_S3_SECRET_KEY: Final = "AWS_SECRET_ACCESS_KEY"
ENV_OTEL_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"

DEFAULT_RECORDER_PORT: Final = 5000
LOCAL_NAMESPACE: Final = "local"

# --- workspace layout (docs/agents.md) ---------------------------------------------------------
WS_CODE: Final = "code"
WS_OUTPUT: Final = "output"
WS_MODELS: Final = "models"
WS_DATA: Final = "data"
WS_DESCRIPTION: Final = "description.md"
WS_INSTRUCTIONS: Final = "instructions.md"
WS_RUN_META: Final = "run_meta.json"

# --- recorder configuration (local and sidecar), set by the runner / operator ------------------
ENV_RUN_START: Final = "A2RL_RUN_START"  # epoch seconds when the agent's clock started
ENV_RUN_TIMEOUT: Final = "A2RL_RUN_TIMEOUT"  # budget in seconds
ENV_MAX_SUBMISSIONS: Final = "A2RL_MAX_SUBMISSIONS"
ENV_BASE_MODEL_DIGEST: Final = "A2RL_BASE_MODEL_DIGEST"
ENV_EVAL_BACKEND: Final = "A2RL_EVAL_BACKEND"
ENV_EVAL_LIMIT: Final = "A2RL_EVAL_LIMIT"
ENV_ALFWORLD_MAX_STEPS: Final = "A2RL_ALFWORLD_MAX_STEPS"  # smoke tests only; default 50 steps
ENV_SEED: Final = "SEED"
BASELINE_INDEX: Final = 0

# --- recorder tuning (optional; defaults in a2rl_recorder.config) ------------------------------
ENV_MAX_MODEL_BYTES: Final = "A2RL_MAX_MODEL_BYTES"  # submit size limit (default 50 GiB)
ENV_MAX_RUN_STORED_BYTES: Final = "A2RL_MAX_RUN_STORED_BYTES"  # new blob bytes per run (200 GiB; 0: no cap)
ENV_RECORDER_DRAIN_TIMEOUT: Final = "A2RL_RECORDER_DRAIN_TIMEOUT"  # s from SIGTERM to everything stored
#: What the recorder may take past its drain deadline (a cancel, stopping the spool's flusher,
#: the HTTP shutdown): the workspace pod's grace covers the drain timeout and this.
RECORDER_DRAIN_MARGIN_S: Final = 15
#: Where the recorder writes its drain's outcome (a pod: the container's termination message).
ENV_TERMINATION_MESSAGE_PATH: Final = "A2RL_TERMINATION_MESSAGE_PATH"
ENV_CODE_POLL_INTERVAL: Final = "A2RL_CODE_POLL_INTERVAL"  # s between looks at code/
ENV_CODE_DEBOUNCE: Final = "A2RL_CODE_DEBOUNCE"  # s code/ must stay unchanged before a revision
ENV_CODE_MAX_FILE_BYTES: Final = "A2RL_CODE_MAX_FILE_BYTES"  # larger files in code/ are not snapshotted
ENV_EVAL_TIMEOUT: Final = "A2RL_EVAL_TIMEOUT"  # s one local eval process may run
#: The longest wall-clock budget a BenchRun may have (`spec.budget.wallTimeSeconds`).
MAX_WALL_TIME_S: Final = 7 * 24 * 3600
#: s one evaluation may run (a local eval process, a cluster eval Job) unless configured.
DEFAULT_EVAL_TIMEOUT_S: Final = 7200
# limits of one eval process tree (a2rl.eval_sandbox; docs/local-mode.md "The evaluation sandbox")
ENV_EVAL_MEMORY_BYTES: Final = "A2RL_EVAL_MEMORY_BYTES"  # RAM of one eval (default 3/4 of the machine's)
ENV_EVAL_MAX_PROCESSES: Final = "A2RL_EVAL_MAX_PROCESSES"  # tasks/threads of one eval (default 4096)
ENV_EVAL_SANDBOX: Final = "A2RL_EVAL_SANDBOX"  # auto (bubblewrap when usable) | bwrap (required) | none
ENV_EVAL_NICE: Final = "A2RL_EVAL_NICE"  # niceness added to an eval process (default 10; 0: none)
ENV_EVAL_THREADS: Final = "A2RL_EVAL_THREADS"  # its CPU threads (default half the cores, at least 1)
#: The variables that bound a process's CPU threads (OpenMP, MKL, OpenBLAS; torch follows OpenMP's).
THREAD_ENV: Final = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
ENV_EVAL_MAX_PARAMETERS: Final = "A2RL_EVAL_MAX_PARAMETERS"  # parameter bound (default: from the base model)

# --- LLM judge and search tool of judge-based tasks (evaluation only; never in the agent pod) ---
ENV_JUDGE_BASE_URL: Final = "A2RL_JUDGE_BASE_URL"  # OpenAI-compatible API root, e.g. https://host/v1
ENV_JUDGE_MODEL: Final = "A2RL_JUDGE_MODEL"
ENV_JUDGE_API_KEY: Final = "A2RL_JUDGE_API_KEY"  # optional (no auth header when unset)
ENV_JUDGE_CACHE_DIR: Final = "A2RL_JUDGE_CACHE_DIR"  # persistent judge cache (default <cache>/judge)
ENV_JUDGE_WORKERS: Final = "A2RL_JUDGE_WORKERS"  # parallel judge requests (default 8)
ENV_SEARCH_URL: Final = "A2RL_SEARCH_URL"  # HTTP search API (SerpAPI-compatible JSON) for deepsearchqa
ENV_SEARCH_API_KEY: Final = "A2RL_SEARCH_API_KEY"
ENV_SEARCH_CORPUS: Final = "A2RL_SEARCH_CORPUS"  # or a local JSONL corpus searched with BM25
ENV_RECORDER_DISPATCH: Final = "A2RL_RECORDER_DISPATCH"  # "local" (eval process) or "cluster"
DISPATCH_LOCAL: Final = "local"
DISPATCH_CLUSTER: Final = "cluster"
ENV_SPOOL_DIR: Final = "A2RL_SPOOL_DIR"  # where writes wait while the object store is unreachable
ENV_STORE_RETRY_TIMEOUT: Final = "A2RL_STORE_RETRY_TIMEOUT"  # s a submit waits for an unreachable store

# --- operator (cluster mode) -------------------------------------------------------------------
ENV_OPENAI_API_KEY: Final = "OPENAI_API_KEY"
ENV_OPENAI_BASE_URL: Final = "OPENAI_BASE_URL"
ENV_DRIVER_MODEL: Final = "A2RL_DRIVER_MODEL"
WORKSPACE_MOUNT: Final = "/workspace"
# Defaults of the pods the operator creates (the chart's `podDefaults` and `imagePullSecrets`, as
# JSON; `a2rl.api.chart_values.PodDefaults`, read by `a2rl_operator.config.pod_defaults_from_env`).
ENV_POD_DEFAULTS: Final = "A2RL_POD_DEFAULTS"
ENV_IMAGE_PULL_SECRETS: Final = "A2RL_IMAGE_PULL_SECRETS"
#: The operator's queueing limit: seconds a queued run may wait for Kueue's first admission.
ENV_QUEUE_TIMEOUT: Final = "A2RL_QUEUE_TIMEOUT"

# --- grading in a cluster: eval Jobs, end of run, report Job (a2rl_operator.grading.config) ----
ENV_GRADER_IMAGE: Final = "A2RL_GRADER_IMAGE"  # image of eval/report Jobs; unset: the operator grades nothing
ENV_REPORT_TIMEOUT: Final = "A2RL_REPORT_TIMEOUT"  # s the report Job may run (activeDeadlineSeconds)
ENV_GRADING_DRAIN_TIMEOUT: Final = "A2RL_GRADING_DRAIN_TIMEOUT"  # s the end of a run waits for evaluations
ENV_GRADING_RESYNC: Final = "A2RL_GRADING_RESYNC"  # s between re-observations of a run being graded
ENV_HELDOUT_PVC: Final = "A2RL_HELDOUT_PVC"  # PVC with staged held-out data (default: fetched from the store)
ENV_SUBMIT_ALLOWANCE: Final = "A2RL_SUBMIT_ALLOWANCE"  # s a BenchSubmission may be created after the deadline

# --- tracing (OpenTelemetry; docs/architecture.md "Tracing") -----------------------------------
# The run's W3C trace context: a `traceparent` string in this env var for every process of a
# run; in a cluster the BenchRun carries it as a JSON carrier in ANNOTATION_TRACE_CONTEXT.
ENV_TRACEPARENT: Final = "A2RL_TRACEPARENT"
TRACE_SERVICE_PREFIX: Final = "a2rl-"  # service.name = a2rl-<component>
COMPONENT_OPERATOR: Final = "operator"
COMPONENT_RUNNER: Final = "runner"
COMPONENT_GATEWAY: Final = "gateway"

# --- the driver gateway (a2rl_gateway; docs/gateway.md), set by the runner / operator ----------
DRIVER_PROVIDER_ANTHROPIC: Final = "anthropic"
DRIVER_PROVIDER_OPENAI: Final = "openai"
DRIVER_PROVIDER_GEMINI: Final = "gemini"
DRIVER_PROVIDER_OPENAI_COMPATIBLE: Final = "openai-compatible"  # OpenAI wire formats, self-hosted (vLLM)
DRIVER_PROVIDERS: Final = (
    DRIVER_PROVIDER_ANTHROPIC,
    DRIVER_PROVIDER_OPENAI,
    DRIVER_PROVIDER_GEMINI,
    DRIVER_PROVIDER_OPENAI_COMPATIBLE,
)
ENV_GATEWAY_PROVIDER: Final = "A2RL_GATEWAY_PROVIDER"  # one of DRIVER_PROVIDERS
ENV_GATEWAY_BASE_URL: Final = "A2RL_GATEWAY_BASE_URL"  # upstream API root (default: the provider's)
ENV_GATEWAY_MODEL: Final = "A2RL_GATEWAY_MODEL"  # spec.driver.model (recorded, not enforced)
ENV_GATEWAY_TOKEN: Final = "A2RL_GATEWAY_TOKEN"  # the per-run token the agent presents
#: Where the upstream key comes from: "stdin" (one line; the local runner's pipe) or
#: "file:<path>" (a mounted Secret); unset: no key (a self-hosted server without auth).
ENV_GATEWAY_KEY_SOURCE: Final = "A2RL_GATEWAY_KEY_SOURCE"
ENV_GATEWAY_PORT: Final = "A2RL_GATEWAY_PORT"  # also serve on 127.0.0.1:<port> (0 = any free)
ENV_GATEWAY_SOCKET: Final = "A2RL_GATEWAY_SOCKET"  # serve on this Unix socket (the sandbox relays it)
ENV_GATEWAY_UPSTREAM_TIMEOUT: Final = "A2RL_GATEWAY_UPSTREAM_TIMEOUT"  # s without a byte from upstream
ENV_DRIVER_TOKENS: Final = "A2RL_DRIVER_TOKENS"  # spec.budget.driverTokens (unset: no limit)
ENV_DRIVER_COST_USD: Final = "A2RL_DRIVER_COST_USD"  # spec.budget.driverCostUSD (unset: no limit)
#: The admin's price table (YAML or JSON) extending/overriding the built-in one (docs/gateway.md).
ENV_DRIVER_PRICES: Final = "A2RL_DRIVER_PRICES"

# --- the driver gateway in a cluster (a2rl_operator.manifests.gateway; docs/operator.md) -------
#: The address the gateway's TCP listener binds (default 127.0.0.1; its pod: 0.0.0.0, the pod IP).
ENV_GATEWAY_HOST: Final = "A2RL_GATEWAY_HOST"
#: The gateway pod's port (container and Service).
CLUSTER_GATEWAY_PORT: Final = 8080
#: The per-run token of a stack run, from the run's `<run>-gateway-token` Secret (agent container).
ENV_AGENT_GATEWAY_TOKEN: Final = "A2RL_AGENT_GATEWAY_TOKEN"
