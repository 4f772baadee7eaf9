"""The BenchCampaign custom resource: a BenchRun template run over a matrix of settings.

Each combination of the matrix's axes (seeds and repeats aside) is a *cell*; each cell runs once
per seed and repeat. `a2rl.campaign.matrix` expands a campaign into its runs (deterministic names,
so a restart or a re-sync creates no duplicate); `a2rl.campaign.rollup` summarises their
outcomes. The operator and `a2rl campaign run` share both.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from a2rl.api.benchrun import AgentSpec, BaseModelSpec, BenchRunSpec, DriverSpec, ObjectMeta
from a2rl.api.common import X_VALIDATIONS, ApiModel, Condition, Name, cel, immutable, map_list, rule_error
from a2rl.constants import BENCHCAMPAIGN_KIND
from a2rl.protocols import EvalProtocol
from a2rl.stacks import AgentMode, StackName

#: Room a campaign's name leaves for its runs' suffix (`-<cell hash 8>-s<seed ≤ 10 digits>-r<n>`),
#: so every run name stays a 63-character DNS label.
MAX_CAMPAIGN_NAME = 63 - 26
MAX_RUNS = 1000
MAX_REPEATS = 20


class AgentVariant(ApiModel):
    """One agent of the `agents` axis: a whole `spec.agent` (and its driver) under a short name."""

    name: Name = Field(max_length=40, description="The variant's name in tables and cell keys.")
    agent: AgentSpec = Field(description="Replaces the template's `spec.agent`.")
    driver: DriverSpec | None = Field(
        default=None, description="Replaces the template's `spec.driver` (an agent stack needs one)."
    )


class CampaignMatrix(ApiModel):
    """The axes a campaign varies; an axis left out keeps the template's value. The campaign runs
    every combination of the given axes, once per seed (and repeat)."""

    tasks: list[str] | None = Field(
        default=None, min_length=1, max_length=32, description="`spec.task` values (`a2rl tasks list`)."
    )
    agents: list[AgentVariant] | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        description="Whole agents (`spec.agent` + `spec.driver`) by name, e.g. scripted agents.",
        json_schema_extra=map_list("name"),
    )
    stacks: list[StackName] | None = Field(
        default=None, min_length=1, max_length=16, description="`spec.agent.stack` values (LLM agent stacks)."
    )
    driver_models: list[str] | None = Field(
        default=None, min_length=1, max_length=32, description="`spec.driver.model` values."
    )
    modes: list[AgentMode] | None = Field(
        default=None, min_length=1, max_length=4, description="`spec.agent.mode` values."
    )
    base_models: list[BaseModelSpec] | None = Field(
        default=None, min_length=1, max_length=16, description="`spec.baseModel` values."
    )
    protocols: list[EvalProtocol] | None = Field(
        default=None, min_length=1, max_length=2, description="`spec.evaluation.protocol` values."
    )
    seeds: list[int] = Field(
        default_factory=lambda: [0],
        min_length=1,
        max_length=100,
        description="`spec.seed` values: each cell runs once per seed (its spread is over these).",
    )

    @model_validator(mode="after")
    def _distinct(self) -> CampaignMatrix:
        for field in ("tasks", "stacks", "driver_models", "modes", "protocols", "seeds"):
            values = getattr(self, field)
            if values is not None and len(set(values)) != len(values):
                raise rule_error("values must be distinct", field)
        if self.agents is not None and len({a.name for a in self.agents}) != len(self.agents):
            raise rule_error("agent names must be distinct", "agents")
        if self.base_models is not None and len({b.name for b in self.base_models}) != len(self.base_models):
            raise rule_error("base model names must be distinct", "baseModels")
        if any(not 0 <= seed <= 2**31 - 1 for seed in self.seeds):
            raise rule_error("seeds must be between 0 and 2147483647", "seeds")
        return self


class BenchCampaignSpec(ApiModel):
    """What to run (template x matrix) and how many at once. The template and the matrix are fixed
    once created; `maxConcurrentRuns` may change and takes effect at the next reconcile."""

    template: BenchRunSpec = Field(
        description="The BenchRun spec every run starts from; the matrix's axes override it.",
        json_schema_extra=immutable("template"),
    )
    matrix: CampaignMatrix = Field(
        default_factory=CampaignMatrix,
        description="The axes to vary.",
        json_schema_extra=immutable("matrix"),
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=MAX_REPEATS,
        description="Runs per cell and seed (more samples of the same setting).",
        json_schema_extra=immutable("repeats"),
    )
    max_concurrent_runs: int = Field(
        default=1, ge=1, le=MAX_RUNS, description="Runs in flight at once (created and not finished)."
    )


class CampaignPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ScoreSpread(ApiModel):
    """Mean and 95 % confidence interval (Student's t over the runs) of one figure of a cell."""

    n: int = Field(ge=0, description="Runs with a value.")
    mean: float | None = Field(default=None, description="Mean over the runs.")
    ci_low: float | None = Field(default=None, description="Lower end of the 95 % t-interval (n ≥ 2).")
    ci_high: float | None = Field(default=None, description="Upper end of the 95 % t-interval (n ≥ 2).")


class CellStatus(ApiModel):
    """The roll-up of one cell's runs."""

    key: str = Field(description="The cell's key (also the runs' `a2rl.dev/campaign-cell` label).")
    axes: dict[str, str] = Field(
        default_factory=dict, description="The cell's axis values, e.g. `stack: codex`."
    )
    runs: int = Field(default=0, ge=0, description="Runs of the cell (seeds x repeats).")
    finished: int = Field(default=0, ge=0, description="Runs that ended (succeeded or failed).")
    failed: int = Field(default=0, ge=0, description="Runs that ended Failed.")
    best_score: ScoreSpread | None = Field(default=None, description="Best score over the finished runs.")
    improvement: ScoreSpread | None = Field(
        default=None, description="Best score minus the baseline, over the finished runs."
    )
    success_rate: float | None = Field(
        default=None, description="Share of finished runs whose best submission beat the baseline."
    )
    driver_cost_usd: float | None = Field(
        default=None, alias="driverCostUSD", description="Driver cost of the cell's runs, in US dollars."
    )


class PhaseCounts(ApiModel):
    """How many of the campaign's runs are in each phase (`notCreated`: not created yet)."""

    total: int = Field(default=0, ge=0, description="Runs the campaign has in all.")
    not_created: int = Field(default=0, ge=0, description="Runs not created yet.")
    pending: int = Field(default=0, ge=0, description="Created, not queued or running yet.")
    queued: int = Field(default=0, ge=0, description="Waiting for quota or admission.")
    running: int = Field(default=0, ge=0, description="The agent is running.")
    grading: int = Field(default=0, ge=0, description="The agent ended; the report is being written.")
    succeeded: int = Field(default=0, ge=0, description="Ended Succeeded.")
    failed: int = Field(default=0, ge=0, description="Ended Failed.")


class BenchCampaignStatus(ApiModel):
    """Observed state, written only by the operator (local mode: `a2rl campaign run`'s report)."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The `metadata.generation` the status was computed from."
    )
    phase: CampaignPhase | None = Field(default=None, description="Summary of the conditions for display.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="`Reconciling`, `Stalled`, `Ready`, `Finished`, `Succeeded`, `Failed` (docs/gitops.md).",
        json_schema_extra=map_list("type"),
    )
    progress: str | None = Field(default=None, description="`finished/total`, for `kubectl get`.")
    runs: PhaseCounts | None = Field(default=None, description="Runs per phase.")
    cells: list[CellStatus] = Field(
        default_factory=list,
        description="Per cell: spread of best score and improvement, success rate, cost.",
    )
    best_cell: str | None = Field(
        default=None, description="The cell with the highest mean improvement, with its figures (one line)."
    )
    driver_cost_usd: float | None = Field(
        default=None, alias="driverCostUSD", description="Driver cost of all runs so far, in US dollars."
    )
    completion_time: datetime | None = Field(default=None, description="When the last run ended.")
    report_uri: str | None = Field(
        default=None, description="The campaign report in the store, once written."
    )


_CAMPAIGN_NAME_RULE = f"!has(self.metadata.name) || size(self.metadata.name) <= {MAX_CAMPAIGN_NAME}"


class BenchCampaign(ApiModel):
    """A campaign: a BenchRun template over a matrix of settings and seeds."""

    model_config = ConfigDict(
        json_schema_extra={
            X_VALIDATIONS: [
                cel(
                    _CAMPAIGN_NAME_RULE,
                    f"metadata.name must be at most {MAX_CAMPAIGN_NAME} characters: "
                    "it prefixes its runs' names",
                )
            ]
        }
    )

    api_version: Literal["a2rl.dev/v1alpha1"] = Field(default="a2rl.dev/v1alpha1", description="API version.")
    kind: Literal["BenchCampaign"] = Field(default=BENCHCAMPAIGN_KIND, description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: BenchCampaignSpec = Field(description="Template, matrix and concurrency.")
    status: BenchCampaignStatus | None = Field(default=None, description="Observed state.")

    @model_validator(mode="after")
    def _name(self) -> BenchCampaign:
        name = self.metadata.name
        if len(name) > MAX_CAMPAIGN_NAME or "." in name:
            raise rule_error(
                f"must be a DNS label of at most {MAX_CAMPAIGN_NAME} characters (no dots): it prefixes "
                f"its runs' names, got {name!r}",
                "metadata.name",
            )
        return self
