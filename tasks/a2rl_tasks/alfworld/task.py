"""The `alfworld` task: household text games, ReAct in completion mode, success rate."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.constants import ENV_ALFWORLD_MAX_STEPS
from a2rl.errors import A2rlError
from a2rl.protocols import DEFAULT_PROTOCOL, PROTOCOL_REFERENCE, EvalProtocol
from a2rl_tasks.alfworld import catalog, data, prompting, reference
from a2rl_tasks.alfworld.engine import INVALID_FEEDBACK, initial_observation
from a2rl_tasks.alfworld.rollout import MAX_STEPS, EpisodeSpec, is_think, replay, run_episodes
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.common.jsonl import read_heldout
from a2rl_tasks.scoring import index_predictions, read_rows

if TYPE_CHECKING:
    # lazy: TextWorld, only when games are built or played
    from a2rl.inference import InferenceBackend

EVALUATOR_VERSION = "alfworld-1"


def max_steps_from_env() -> int:
    """The step limit: 50, or `A2RL_ALFWORLD_MAX_STEPS` for smoke tests (versioned separately)."""
    raw = os.environ.get(ENV_ALFWORLD_MAX_STEPS, "").strip()
    if not raw:
        return MAX_STEPS
    if not raw.isdigit() or int(raw) < 1:
        raise A2rlError(f"{ENV_ALFWORLD_MAX_STEPS} must be a positive integer, not {raw!r}")
    return int(raw)


def summarise(records: list[dict[str, Any]], evaluator_version: str) -> EvalResult:
    n = len(records)
    won = sum(1 for r in records if r["won"])
    by_prefix: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        by_prefix[prompting.prefix_for(r["task_type"])].append(bool(r["won"]))
    steps = [r["steps"] for r in records]
    actions = sum(steps)
    metrics: dict[str, float] = {"success_rate": 100.0 * won / n if n else 0.0}
    for prefix in catalog.PREFIXES.values():
        if by_prefix.get(prefix):
            results = by_prefix[prefix]
            metrics[f"success_{prefix}"] = 100.0 * sum(results) / len(results)
            metrics[f"games_{prefix}"] = float(len(results))
    metrics["mean_steps"] = sum(steps) / n if n else 0.0
    won_steps = [r["steps"] for r in records if r["won"]]
    metrics["mean_steps_won"] = sum(won_steps) / len(won_steps) if won_steps else 0.0
    if actions:
        metrics["invalid_action_rate"] = 100.0 * sum(r.get("invalid_actions", 0) for r in records) / actions
        metrics["think_rate"] = 100.0 * sum(r.get("think_actions", 0) for r in records) / actions
    return EvalResult(
        score=metrics["success_rate"],
        n=n,
        correct=won,
        evaluator_version=evaluator_version,
        metrics=metrics,
        details=records,
    )


class ALFWorldTask(Task):
    name = "alfworld"
    level = "L3"
    metric = "success rate (%)"
    data_version = "3"  # 3: generated held-out games' unseen rooms come from the secret seed
    #: `reference` stages the raw train games only (no index, SFT trajectories or examples).
    protocol_data = True
    secret_heldout = True  # generated games (the official release's split is its own)
    #: Staging works without `--source` (games are generated).
    default_source: str | None = data.GENERATED

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        protocol: EvalProtocol = DEFAULT_PROTOCOL,
        max_steps: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        super().__init__(environ, protocol=protocol)
        self.max_steps = max_steps if max_steps is not None else max_steps_from_env()
        #: Live games per generation call (None: all held-out games at once).
        self.concurrency = concurrency

    @property
    def evaluator_version(self) -> str:  # type: ignore[override]
        """`alfworld-1+<protocol>`, with `+steps<N>` when the step limit is not the protocol's 50."""
        suffix = "" if self.max_steps == MAX_STEPS else f"+steps{self.max_steps}"
        return self.versioned(EVALUATOR_VERSION) + suffix

    @property
    def is_reference(self) -> bool:
        return self.protocol == PROTOCOL_REFERENCE

    def examples(self) -> dict[str, list[str]]:
        """The in-context examples: the official ReAct ones (`reference`) or ours (`a2rl`)."""
        return reference.official_examples() if self.is_reference else prompting.react_examples()

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        data.stage(
            Path(staged.train_dir),
            Path(staged.heldout_dir),
            source=source,
            seed=seed,
            heldout_seed=heldout_seed,
            games_only=self.is_reference,
        )

    def load_heldout(self, heldout_dir: Path, limit: int | None = None) -> list[EpisodeSpec]:
        rows = read_heldout(Path(heldout_dir) / data.HELDOUT_FILE, limit)
        return [self._spec(row, Path(heldout_dir)) for row in rows]

    @staticmethod
    def _spec(row: dict[str, Any], base: Path) -> EpisodeSpec:
        for key in ("id", "game", "task_type"):
            if not isinstance(row.get(key), str):
                raise A2rlError(f'held-out row {row.get("id")!r} needs a string "{key}"')
        game = Path(row["game"])
        game = game if game.is_absolute() else base / game
        if not game.is_file():
            raise A2rlError(f"game file not found: {game}")
        prompting.prefix_for(row["task_type"])  # validates the task type
        return EpisodeSpec(id=row["id"], game_file=str(game), task_type=row["task_type"])

    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:
        specs = self.load_heldout(heldout_dir, limit)
        episodes, stats = run_episodes(
            backend,
            specs,
            max_steps=self.max_steps,
            concurrency=self.concurrency,
            examples=self.examples(),
            opening_of=reference.opening if self.is_reference else initial_observation,
            observe=reference.process_ob if self.is_reference else str,
        )
        result = summarise([ep.details(self.max_steps) for ep in episodes], self.evaluator_version)
        result.metrics["generate_calls"] = float(stats.generate_calls)
        result.metrics["max_steps"] = float(self.max_steps)
        return result

    def default_generation_batch(self) -> int:
        return 32

    def score_prediction_files(self, predictions_path: Path, references_path: Path) -> EvalResult:
        """Offline scoring (`a2rl tasks score alfworld`): references are the held-out
        `heldout.jsonl` (or its directory); relative game paths resolve beside it."""

        ref = references_path / data.HELDOUT_FILE if references_path.is_dir() else references_path
        references = read_rows(ref, "references")
        if not references:
            raise A2rlError(f"references file is empty: {ref}")
        ids = [str(r["id"]) for r in references]
        if len(set(ids)) != len(ids):
            raise A2rlError("reference ids are not unique")
        predictions = index_predictions(read_rows(predictions_path, "predictions"), set(ids))
        result = self._replay_all(predictions, references, ref.parent)
        result.metrics["missing"] = float(sum(1 for i in ids if i not in predictions))
        return result

    def score_predictions(self, predictions: dict[str, str], references: list[dict[str, Any]]) -> EvalResult:
        """Replay saved raw outputs; relative game paths resolve against the current directory."""
        return self._replay_all(predictions, references, Path.cwd())

    def _replay_all(
        self, predictions: dict[str, str], references: list[dict[str, Any]], base: Path
    ) -> EvalResult:
        """Each prediction is an episode's raw outputs, one per line (the `prediction` of the
        evaluator's details), played again from the start of the reference's game; a game counts
        as won when the replay wins within the step limit. A missing prediction is a loss."""
        # lazy: TextWorld, only when games are built or played
        from a2rl_tasks.alfworld.engine import TextGame

        engine = TextGame()
        records = []
        for ref in references:
            spec = self._spec(ref, base)
            outputs = predictions[spec.id].split("\n") if spec.id in predictions else []
            observe = reference.process_ob if self.is_reference else str
            played = replay(spec.game_file, outputs, max_steps=self.max_steps, game=engine, observe=observe)
            records.append(
                {
                    "id": spec.id,
                    "task_type": spec.task_type,
                    "won": played.won,
                    "correct": played.won,
                    "steps": len(played.actions),
                    "invalid_actions": sum(1 for o in played.observations if o == INVALID_FEEDBACK),
                    "think_actions": sum(1 for a in played.actions if is_think(a)),
                    "actions": played.actions,
                    "observations": played.observations,
                }
            )
        return summarise(records, self.evaluator_version)
