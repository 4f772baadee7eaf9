"""ReAct episodes, many games at once: one batched generation call per step for every live game.

The step rule is the ALFWorld ReAct harness': the model continues the prompt (greedy, at most
100 new tokens, cut at the first newline); the stripped text is the action; an action starting
with `think:` is answered "OK." without touching the game (the harness sends it to the game,
which ignores it, then overwrites the reply); anything else is played in the engine ("Nothing
happens." when it is not a valid command). An episode ends when the game reports `won`, or
after `max_steps` actions (thoughts included).

`run_episodes` keeps up to `concurrency` games live. Each round it sends the prompts of all live
games to the backend in **one** `generate` call, then steps every game (in parallel across
engine worker processes). Finished games free their slot for the next game. `concurrency=1`
is the reference's one-game-at-a-time evaluation.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from a2rl.inference import GenerationRequest
from a2rl_tasks.alfworld import prompting
from a2rl_tasks.alfworld.engine import INVALID_FEEDBACK, EnvPool, initial_observation, make_pool
from a2rl_tasks.alfworld.expert import THINK_FEEDBACK, THINK_PREFIX

if TYPE_CHECKING:
    # lazy: TextWorld, only when games are built or played
    from a2rl.inference import InferenceBackend

MAX_STEPS = 50


@dataclass(frozen=True)
class EpisodeSpec:
    id: str
    game_file: str
    task_type: str


@dataclass
class Episode:
    spec: EpisodeSpec
    opening: str = ""
    prompt: str = ""
    outputs: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    won: bool = False

    @property
    def steps(self) -> int:
        return len(self.actions)

    def record(self, output: str, action: str, observation: str) -> None:
        self.outputs.append(output)
        self.actions.append(action)
        self.observations.append(observation)
        self.prompt = prompting.continue_prompt(self.prompt, action, observation)

    def details(self, max_steps: int) -> dict[str, Any]:
        return {
            "id": self.spec.id,
            "task_type": self.spec.task_type,
            "prefix": prompting.prefix_for(self.spec.task_type),
            "won": self.won,
            "correct": self.won,
            "steps": self.steps,
            "end": "won" if self.won else ("step_limit" if self.steps >= max_steps else "stopped"),
            "invalid_actions": sum(1 for o in self.observations if o == INVALID_FEEDBACK),
            "think_actions": sum(1 for a in self.actions if is_think(a)),
            "opening": self.opening,
            "actions": list(self.actions),
            "observations": list(self.observations),
            # Raw outputs, one per line: `a2rl tasks score alfworld` replays them.
            "prediction": "\n".join(self.outputs),
        }


@dataclass
class RolloutStats:
    generate_calls: int = 0
    prompts: int = 0
    generate_s: float = 0.0
    env_s: float = 0.0
    wall_s: float = 0.0
    max_live: int = 0


def is_think(action: str) -> bool:
    return action.startswith(THINK_PREFIX)


def action_of(output: str) -> str:
    """The action in a generated continuation (the text before any newline, stripped)."""
    return output.split("\n", 1)[0].strip()


def generation_request() -> Any:

    return GenerationRequest(max_new_tokens=prompting.MAX_NEW_TOKENS, stop=(prompting.STOP,))


def run_episodes(
    backend: InferenceBackend,
    episodes: Sequence[EpisodeSpec],
    *,
    max_steps: int = MAX_STEPS,
    concurrency: int | None = None,
    pool: EnvPool | None = None,
    examples: dict[str, list[str]] | None = None,
    on_round: Callable[[int, int], None] | None = None,
    opening_of: Callable[[str], str] = initial_observation,
    observe: Callable[[str], str] = str,
) -> tuple[list[Episode], RolloutStats]:
    """Play every episode with `backend`; returns them in input order, plus timing stats.

    `concurrency` live games (default: all of them) share each generation call; `pool` runs the
    engines (default: worker processes, one per core). `examples` replaces the in-context
    examples, `opening_of` the reset text -> opening rule and `observe` cleans each game reply
    (the reference protocol's rules, `reference.py`)."""
    width = max(1, min(concurrency or len(episodes), len(episodes) or 1))
    own_pool = pool is None
    pool = pool or make_pool(width)
    request = generation_request()
    stats = RolloutStats()
    t_start = time.monotonic()
    done: list[Episode | None] = [None] * len(episodes)
    pending = deque(enumerate(episodes))
    free = list(range(width))
    live: dict[int, tuple[int, Episode]] = {}
    try:
        while pending or live:
            starts: list[tuple[int, int, EpisodeSpec]] = []
            while pending and free:
                index, spec = pending.popleft()
                starts.append((free.pop(0), index, spec))
            if starts:
                t0 = time.monotonic()
                openings = pool.reset_many([(slot, spec.game_file) for slot, _, spec in starts])
                stats.env_s += time.monotonic() - t0
                for (slot, index, spec), raw in zip(starts, openings, strict=True):
                    ep = Episode(spec=spec, opening=opening_of(raw))
                    ep.prompt = prompting.first_prompt(spec.task_type, ep.opening, examples)
                    live[slot] = (index, ep)
            slots = sorted(live)
            stats.max_live = max(stats.max_live, len(slots))
            t0 = time.monotonic()
            outputs = backend.generate([live[s][1].prompt for s in slots], request)
            stats.generate_s += time.monotonic() - t0
            stats.generate_calls += 1
            stats.prompts += len(slots)
            if len(outputs) != len(slots):
                raise RuntimeError(
                    f"the backend returned {len(outputs)} completions for {len(slots)} prompts"
                )
            jobs: list[tuple[int, str]] = []
            played: dict[int, tuple[str, str]] = {}
            for slot, output in zip(slots, outputs, strict=True):
                action = action_of(output)
                if is_think(action):
                    live[slot][1].record(output, action, THINK_FEEDBACK)
                else:
                    jobs.append((slot, action))
                    played[slot] = (output, action)
            if jobs:
                t0 = time.monotonic()
                results = pool.step_many(jobs)
                stats.env_s += time.monotonic() - t0
                for (slot, _), res in zip(jobs, results, strict=True):
                    output, action = played[slot]
                    ep = live[slot][1]
                    ep.record(output, action, observe(res.observation))
                    ep.won = res.won
            for slot in slots:
                index, ep = live[slot]
                if ep.won or ep.steps >= max_steps:
                    done[index] = ep
                    del live[slot]
                    free.append(slot)
            free.sort()
            if on_round is not None:
                on_round(stats.generate_calls, sum(1 for d in done if d is not None))
    finally:
        if own_pool:
            pool.close()
    stats.wall_s = time.monotonic() - t_start
    return [ep for ep in done if ep is not None], stats


@dataclass(frozen=True)
class Replay:
    won: bool
    actions: list[str]
    observations: list[str]


def replay(
    game_file: str,
    outputs: Sequence[str],
    *,
    max_steps: int = MAX_STEPS,
    game: Any = None,
    observe: Callable[[str], str] = str,
) -> Replay:
    """Play saved raw outputs (one per step) the way `run_episodes` does, from the game's start."""
    # lazy: TextWorld, only when games are built or played
    from a2rl_tasks.alfworld.engine import TextGame

    engine = game or TextGame()
    engine.reset(game_file)
    actions: list[str] = []
    observations: list[str] = []
    won = False
    for output in list(outputs)[:max_steps]:
        action = action_of(output)
        actions.append(action)
        if is_think(action):
            observations.append(THINK_FEEDBACK)
            continue
        obs, won = engine.step(action)
        observations.append(observe(obs))
        if won:
            break
    return Replay(won=won, actions=actions, observations=observations)
