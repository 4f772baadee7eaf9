"""`report/report.json`: the post-hoc run report (schema version "1"), built by the grader's
`a2rl_grader.report.metrics.build_report` and read by the operator, the CLI and the local runner.

Field names are report.json's keys (docs/report.md defines them). The builder sets every field,
null ones included, so `to_json` writes every key — but `driver` and `trajectory`, set only for a
run that has driver records / an agent stack's event stream; a report read back keeps exactly the
keys it had. Numbers that may be integers or floats are typed `int | float` so that a value keeps its
JSON form (`1` stays `1`, `1.0` stays `1.0`).
"""

from __future__ import annotations

from typing import Any

from a2rl.records.base import Record
from a2rl.records.run import AgentRef, BaseModelRef

REPORT_SCHEMA_VERSION = "1"


class ReportBudget(Record):
    """`run.budget`: the wall time in seconds (null when not positive) and the submission cap."""

    wall_time_seconds: int | float | None = None
    max_submissions: int | None = None


class ReportRun(Record):
    """`run`: who and what the run was, from run.json and the run's layout."""

    prefix: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    task: str | None = None
    mode: str | None = None
    #: What isolated the agent (run.json's `sandbox`): "none" means `--no-sandbox`.
    sandbox: str | None = None
    #: The agent's limits (run.json's `agent_limits`); set only for runs that record them.
    agent_limits: str | None = None
    base_model: BaseModelRef | None = None
    agent: AgentRef | None = None
    driver: dict[str, Any] | None = None
    budget: ReportBudget = ReportBudget()
    evaluator_version: str | None = None
    #: The evaluation protocol (`reference` | `a2rl`, run.json's `protocol`); None for older runs.
    protocol: str | None = None
    started_at: str | None = None
    deadline: str | None = None
    ended_at: str | None = None
    end_reason: str | None = None
    agent_exit_code: int | None = None
    #: A cluster run queued through Kueue (run.json's): seconds its workspace Job waited for
    #: admission, and how many times Kueue evicted it; None for a run that was not queued.
    queue_wait_seconds: int | None = None
    evictions: int | None = None


class ReportMetrics(Record):
    """`metrics`: the process metrics (docs/report.md, "Metrics")."""

    baseline_score: int | float | None = None
    best_score: int | float | None = None
    best_submission: int | None = None
    improvement: int | float | None = None
    last_valid_score: int | float | None = None
    total_submissions: int | None = None
    valid_submissions: int | None = None
    invalid_submissions: int | None = None
    valid_submission_rate: int | float | None = None
    invalid_reasons: dict[str, int] = {}
    first_valid_index: int | None = None
    first_valid_delay_s: int | float | None = None
    first_improvement_index: int | None = None
    time_to_first_improvement_s: int | float | None = None
    time_to_best_s: int | float | None = None
    monotonic_ratio: int | float | None = None
    score_trajectory: list[int | float | None] | None = None
    copy_of_base_count: int | None = None
    distinct_models: int | None = None
    duration_s: int | float | None = None
    time_used_ratio: int | float | None = None
    first_submit_delay_s: int | float | None = None
    last_submit_gap_s: int | float | None = None
    eval_seconds_total: int | float | None = None
    code_revisions: int | None = None
    revisions_before_first_submission: int | None = None


class ReportSubmission(Record):
    """A `submissions` row: one agent submission (index >= 1)."""

    index: int | None = None
    submitted_at: str | None = None
    elapsed_s: int | float | None = None
    score: int | float | None = None
    valid: bool | None = None
    error: str | None = None
    best_so_far: int | float | None = None
    model_path: str | None = None
    model_digest: str | None = None
    model_files: int | None = None
    model_bytes: int | None = None
    copy_of_base: bool | None = None
    code_revision: int | None = None
    code_digest: str | None = None
    n: int | None = None
    correct: int | None = None
    eval_duration_s: int | float | None = None
    backend: str | None = None


class ReportBaseline(Record):
    """`baseline`: submission 0, the base model's evaluation."""

    score: int | float | None = None
    error: str | None = None
    model_path: str | None = None
    model_digest: str | None = None
    evaluator_version: str | None = None
    backend: str | None = None
    n: int | None = None
    correct: int | None = None


class ReportRevision(Record):
    """A `revisions` row: one code revision compared with the one before."""

    index: int | None = None
    created_at: str | None = None
    elapsed_s: int | float | None = None
    reason: str | None = None
    digest: str | None = None
    files: int | None = None
    bytes: int | None = None
    added: int | None = None
    changed: int | None = None
    removed: int | None = None
    paths: list[str] = []
    files_uploaded: int | None = None
    bytes_uploaded: int | None = None


class TimelineStep(Record):
    """A `timeline.steps` entry: one top-level span of the run's trace."""

    name: str | None = None
    service: str | None = None
    start_offset_s: int | float | None = None
    duration_s: int | float | None = None
    status: str | None = None
    #: The span's `a2rl.submission.index` attribute, as recorded.
    submission: int | str | None = None
    child_spans: int | None = None


class ReportTimeline(Record):
    """`timeline`: the run's trace as the report saw it (`a2rl.tracing.spans.timeline`)."""

    trace_id: str | None = None
    started_at: str | None = None
    duration_s: int | float | None = None
    spans: int | None = None
    steps: list[TimelineStep] = []


class ReportDriverModel(Record):
    """A `driver.per_model` row: one driver model's calls, tokens, cost and latency."""

    model: str | None = None
    calls: int | None = None
    errors: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: int | float | None = None
    latency_p50_s: int | float | None = None
    latency_p95_s: int | float | None = None


class ReportDriverBudget(Record):
    """`driver.budget`: the run's driver budget (null limits: none) and whether it ran out."""

    driver_tokens: int | None = None
    driver_cost_usd: int | float | None = None
    tokens_used_ratio: int | float | None = None
    cost_used_ratio: int | float | None = None
    exhausted: bool | None = None
    exhausted_at: str | None = None
    exhausted_s: int | float | None = None
    reason: str | None = None
    refused_calls: int | None = None


class ReportDriver(Record):
    """`driver`: what the run's driver gateway forwarded, metered and refused (docs/report.md)."""

    provider: str | None = None
    model: str | None = None
    calls: int | None = None
    errors: int | None = None
    refused_calls: int | None = None
    refused: dict[str, int] = {}
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: int | float | None = None
    unpriced_models: list[str] = []
    usage_missing_calls: int | None = None
    latency_p50_s: int | float | None = None
    latency_p95_s: int | float | None = None
    first_byte_p50_s: int | float | None = None
    first_byte_p95_s: int | float | None = None
    first_call_s: int | float | None = None
    last_call_s: int | float | None = None
    per_model: list[ReportDriverModel] = []
    budget: ReportDriverBudget = ReportDriverBudget()


class ReportToolCall(Record):
    """A `trajectory.calls` row: one tool call of the agent's stack."""

    index: int | None = None
    at: str | None = None
    elapsed_s: int | float | None = None
    tool: str | None = None
    kind: str | None = None
    detail: str | None = None
    #: True when the stack moved the command, still running, to the background (set only then).
    backgrounded: bool | None = None


class ReportTrajectory(Record):
    """`trajectory`: the tool calls in the agent stack's event stream, by kind (docs/report.md)."""

    stack: str | None = None
    events: int | None = None
    tool_calls: int | None = None
    kinds: dict[str, int] = {}
    tools: dict[str, int] = {}
    #: Where the calls' times come from: `stream`, `driver` (placed on the driver's calls), `none`.
    timing: str | None = None
    calls: list[ReportToolCall] = []
    #: How many calls' commands the stack moved to the background (set only when some were).
    backgrounded: int | None = None


class ReportHeadline(Record):
    """`headline`: the run's story at a glance (docs/report.md, "Headline"), computed once by
    `a2rl_grader.report.headline.compute_headline` and shown first by every format."""

    #: `improved` | `no change` | `worse` | `no valid submission` | `no baseline`.
    verdict: str | None = None
    #: Why, in words: the comparison, and the run's end reason.
    reason: str | None = None
    baseline_score: int | float | None = None
    best_score: int | float | None = None
    best_submission: int | None = None
    #: `best_score - baseline_score` (null when either is null).
    delta: int | float | None = None
    valid_submissions: int | None = None
    total_submissions: int | None = None
    #: Seconds from the run's start to its end (or last activity) and the wall-clock budget.
    used_s: int | float | None = None
    budget_s: int | float | None = None
    #: `used_s / budget_s` as a percentage (rounded to 1 decimal).
    budget_used_pct: int | float | None = None
    end_reason: str | None = None
    #: When the agent made no submission: the last non-empty lines of its log (run.json
    #: `agent_last_words`), so the report says why without opening agent.log.
    agent_last_words: list[str] | None = None
    #: Held-out items each score is computed on, and `spec.evaluation.limit` (null: no limit).
    eval_items: int | None = None
    eval_limit: int | None = None
    protocol: str | None = None
    #: The task's metric (e.g. "exact match (%)") and its range ([0, 100] for a percentage).
    metric: str | None = None
    metric_range: list[int | float] | None = None
    #: What isolated the agent (run.json `sandbox`); `sandboxed` is false for "none".
    sandbox: str | None = None
    sandboxed: bool | None = None
    #: Whether the results were checked against their seals (the run's key was at hand),
    #: how many passed (`results_verified`) and how many failed (`results_tampered`).
    results_checked: bool | None = None
    #: Results with a seal (`submissions/<n>/seal.json`), whether or not they could be checked.
    results_sealed: int | None = None
    results_verified: int | None = None
    results_tampered: int | None = None
    #: A cluster run queued through Kueue (run.json `queue_wait_seconds`, `evictions`): the wait
    #: for admission (not charged to the budget) and Kueue's evictions; None: not queued.
    queue_wait_s: int | float | None = None
    evictions: int | None = None


class ReportRecord(Record):
    """`<namespace>/<name>-<uid>/report/report.json`; the headline numbers repeat `metrics`'."""

    schema_version: str | None = None
    run: ReportRun = ReportRun()
    baseline_score: int | float | None = None
    best_score: int | float | None = None
    best_submission: int | None = None
    improvement: int | float | None = None
    total_submissions: int | None = None
    valid_submissions: int | None = None
    #: The post-training route (SFT / RL / SFT→RL / copy-of-base); not classified yet (null).
    route: str | None = None
    #: The run's story at a glance; absent in reports written before it existed.
    headline: ReportHeadline | None = None
    baseline: ReportBaseline | None = None
    metrics: ReportMetrics = ReportMetrics()
    submissions: list[ReportSubmission] = []
    revisions: list[ReportRevision] = []
    timeline: ReportTimeline | None = None
    #: Only in reports of runs with an LLM agent stack (absent otherwise: such reports are unchanged).
    driver: ReportDriver | None = None
    trajectory: ReportTrajectory | None = None
