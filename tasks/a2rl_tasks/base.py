"""The task plug-in structure every benchmark task follows.

A task knows four things: how to stage its data (an agent-visible train split and a held-out
split that never enters the workspace), what to tell the agent (`description.md`), how to
evaluate a model on the held-out split, and which version of that evaluation it is (the
baseline cache keys on it).

Every task is built for one evaluation protocol (`a2rl.protocols`: `reference` reproduces the
reference implementation, `a2rl` is ours). The protocol reaches three places:
- the evaluator version: a task names it with `self.versioned(base)` (`gsm8k-2+reference`), so
  the baseline cache and every result say which rules scored them;
- the agent-facing description: `description.<protocol>.md` when the task ships one, else
  `description.md` (override `description()` for anything else);
- the staged data, only for a task that sets `protocol_data = True` (its agent-visible or
  held-out data differ by protocol): its `data_version` then carries `+<protocol>`, so the
  staging cache directory, the store prefix and the manifests keep the two apart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from a2rl.protocols import DEFAULT_PROTOCOL, EvalProtocol

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend


@dataclass
class EvalResult:
    """What an evaluator returns. `score` is in 0-100, like the reference."""

    score: float
    n: int
    correct: int
    evaluator_version: str
    metrics: dict[str, float] = field(default_factory=dict)
    #: Per-item records (id, prediction, correct, …) kept for the report, never shown to the agent.
    details: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class StagedData:
    """Where a task's two artifacts live once staged."""

    train_dir: Path
    heldout_dir: Path


class Task(ABC):
    #: Task id used in `spec.task`.
    name: str
    #: "L1", "L2", "L3" for the paper's tasks, "cpu" for the small CPU tasks.
    level: str
    #: Human-readable metric, e.g. "exact match (%)".
    metric: str
    #: The range every score lies in (the report's plot spans it): 0 to 100 for a percentage.
    metric_range: ClassVar[tuple[float, float]] = (0.0, 100.0)
    #: Bumped whenever prompts, decoding or scoring change; part of the baseline cache key.
    evaluator_version: str
    #: Version of the staged data format/content; part of the staging cache key.
    data_version: str
    #: Environment variables holding the URLs of services the evaluation calls (the LLM judge,
    #: a search API). Such a task reads its settings from `environ` (default: `os.environ`) and
    #: names them in its evaluator version; in a cluster the eval pods may reach those URLs.
    endpoint_env: ClassVar[tuple[str, ...]] = ()
    #: The task generates its held-out split: staging derives the held-out generation seed from
    #: a secret (`a2rl_tasks.staging.heldout_seed`), so public code and the public seed do not
    #: regenerate it; the train split still comes from the public seed alone.
    secret_heldout: ClassVar[bool] = False
    #: The staged data (agent-visible or held-out) depend on the protocol: `data_version`
    #: becomes `<data_version>+<protocol>` (see the module docstring).
    protocol_data: ClassVar[bool] = False

    def __init__(
        self, environ: Mapping[str, str] | None = None, *, protocol: EvalProtocol = DEFAULT_PROTOCOL
    ) -> None:
        """`environ`: the evaluation's settings (`endpoint_env`); tasks without any ignore it.
        `protocol`: `reference` (the paper's rules) or `a2rl` (ours), see `a2rl.protocols`."""
        del environ
        self.protocol: EvalProtocol = protocol
        if self.protocol_data:
            self.data_version = f"{type(self).data_version}+{protocol}"

    def versioned(self, base: str) -> str:
        """`base` (e.g. `gsm8k-2`) with this task's protocol: `gsm8k-2+reference`. Every task's
        `evaluator_version` is built with it, so results of the two protocols never mix."""
        return f"{base}+{self.protocol}"

    @abstractmethod
    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        """Write the agent-visible split into `staged.train_dir` and the held-out split into
        `staged.heldout_dir`. The two must share no item. A `secret_heldout` task generates the
        held-out split from `heldout_seed` (None: from `seed`); the others ignore it."""

    @abstractmethod
    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:
        """Score a loaded model on the held-out split."""

    def description(self) -> str:
        """The agent-facing description (English, consistent with `evaluate` under this task's
        protocol): `description.<protocol>.md` of the task's package when it exists, else
        `description.md`."""
        pkg = resources.files(type(self).__module__.rsplit(".", 1)[0])
        specific = pkg.joinpath(f"description.{self.protocol}.md")
        return (specific if specific.is_file() else pkg.joinpath("description.md")).read_text()

    def default_generation_batch(self) -> int:
        return 32
