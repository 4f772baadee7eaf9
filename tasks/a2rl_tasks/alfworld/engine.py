"""Playing ALFWorld games with the real engine: TextWorld's PDDL environment + ALFWorld's demangler.

`TextGame` wraps one environment (one private copy of fast-downward's library); it can load
game after game. `EnvPool` steps many games at once: in this process (`LocalEnvPool`), or spread
over worker processes (`ProcessEnvPool`) because each engine step costs tens of milliseconds of
Python (the grammar is re-derived for every valid command), which would otherwise dominate a
batched evaluation on a GPU.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from multiprocessing.connection import Connection
from typing import Any

INVALID_FEEDBACK = "Nothing happens."
WELCOME_SEPARATOR = "\n\n"


def initial_observation(feedback: str) -> str:
    """The reset text without the TextWorld banner, paragraphs joined by one newline (as the
    ALFWorld ReAct harness does): "You are in the middle of a room. …\\nYour task is to: …"."""
    return "\n".join(feedback.split(WELCOME_SEPARATOR)[1:]).strip("\n")


def _memoised(parse: Callable[..., Any]) -> Callable[..., Any]:
    cache: dict[tuple[Any, ...], Any] = {}

    def parse_cached(text: str, **kwargs: Any) -> Any:
        key = (text, tuple(sorted((k, v) for k, v in kwargs.items() if k != "trace")))
        if key not in cache:
            cache[key] = parse(text, **kwargs)
        # Callers attach contexts to the parsed symbols: hand out copies, never the cached tree.
        return copy.deepcopy(cache[key])

    return parse_cached


@cache
def install_parse_cache() -> None:
    """Memoise TextWorld's grammar parsing (same results, about 5x faster steps).

    The PDDL environment re-parses every command template and feedback rule with tatsu at every
    step (it derives the text of each valid command), which costs ~0.1-0.5 s per step. Parsing
    is a pure function of the rule text, so the parsed trees are cached and deep-copied on use;
    `tests/e2e/test_tasks_alfworld.py` checks that whole episodes read the same with and without it.
    """
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    textgen._parse_and_convert = _memoised(textgen._parse_and_convert)
    parse_query = Rule.parse_conjunctive_query
    queries: dict[str, Any] = {}

    def parse_conjunctive_query(expr: str) -> Any:
        if expr not in queries:
            queries[expr] = parse_query(expr)
        return copy.deepcopy(queries[expr])

    Rule.parse_conjunctive_query = staticmethod(parse_conjunctive_query)


class TextGame:
    """One ALFWorld game engine; `load` + `reset` starts a game, `step` plays one command."""

    def __init__(self, *, plan: bool = False, facts: bool = False) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        install_parse_cache()
        infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=plan, facts=facts)
        self._env: Any = AlfredDemangler(PddlEnv(infos))
        self.state: Any = None

    def reset(self, game_file: str) -> str:
        """Load `game_file` (a `game.tw-pddl`) and return the raw opening text."""
        argv = list(sys.argv)  # fast-downward's translator overwrites sys.argv
        try:
            self._env.load(str(game_file))
            self.state = self._env.reset()
        finally:
            sys.argv[:] = argv
        return str(self.state.feedback)

    def step(self, command: str) -> tuple[str, bool]:
        """(feedback, won) after `command`; an unknown command gives "Nothing happens."."""
        self.state, _, _ = self._env.step(command)
        return str(self.state.feedback), bool(self.state["won"])

    @property
    def won(self) -> bool:
        return bool(self.state is not None and self.state["won"])

    @property
    def admissible_commands(self) -> list[str]:
        return list(self.state["admissible_commands"]) if self.state is not None else []

    @property
    def policy_commands(self) -> list[str]:
        """The engine's expert plan (fast-downward) from the current state (needs `plan=True`)."""
        return list(self.state["policy_commands"]) if self.state is not None else []


# --- pools ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepResult:
    observation: str
    won: bool


class EnvPool(ABC):
    """Games addressed by slot number; a slot is reused for the next game once one ends."""

    @abstractmethod
    def reset_many(self, jobs: Sequence[tuple[int, str]]) -> list[str]:
        """Load and reset `(slot, game_file)` pairs; opening texts in the same order."""

    @abstractmethod
    def step_many(self, jobs: Sequence[tuple[int, str]]) -> list[StepResult]:
        """Play `(slot, command)` pairs; results in the same order."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the engines."""

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalEnvPool(EnvPool):
    """All games in this process, stepped one after the other."""

    def __init__(self) -> None:
        self._games: dict[int, TextGame] = {}

    def _game(self, slot: int) -> TextGame:
        if slot not in self._games:
            self._games[slot] = TextGame()
        return self._games[slot]

    def reset_many(self, jobs: Sequence[tuple[int, str]]) -> list[str]:
        return [self._game(slot).reset(path) for slot, path in jobs]

    def step_many(self, jobs: Sequence[tuple[int, str]]) -> list[StepResult]:
        return [StepResult(*self._game(slot).step(cmd)) for slot, cmd in jobs]

    def close(self) -> None:
        self._games.clear()


def _worker(conn: Connection) -> None:
    pool = LocalEnvPool()
    while True:
        msg = conn.recv()
        if msg is None:
            break
        op, jobs = msg
        try:
            if op == "reset":
                conn.send(("ok", pool.reset_many(jobs)))
            else:
                conn.send(("ok", [(r.observation, r.won) for r in pool.step_many(jobs)]))
        except Exception as exc:  # reported to the parent, which raises
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    conn.close()


class ProcessEnvPool(EnvPool):
    """Games spread over `workers` processes (slot % workers); each call runs them in parallel."""

    def __init__(self, workers: int) -> None:
        ctx = mp.get_context("spawn")  # never fork a process that holds torch threads
        self.workers = max(1, workers)
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for _ in range(self.workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child,), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)

    def _run(self, op: str, jobs: Sequence[tuple[int, str]]) -> list[Any]:
        per_worker: dict[int, list[int]] = {}
        for i, (slot, _) in enumerate(jobs):
            per_worker.setdefault(slot % self.workers, []).append(i)
        for w, idx in per_worker.items():
            self._conns[w].send((op, [jobs[i] for i in idx]))
        out: list[Any] = [None] * len(jobs)
        errors: list[str] = []
        for w, idx in per_worker.items():
            status, payload = self._conns[w].recv()
            if status != "ok":
                errors.append(str(payload))
                continue
            for i, value in zip(idx, payload, strict=True):
                out[i] = value
        if errors:
            raise RuntimeError(f"ALFWorld engine worker failed: {errors[0]}")
        return out

    def reset_many(self, jobs: Sequence[tuple[int, str]]) -> list[str]:
        return [str(x) for x in self._run("reset", jobs)]

    def step_many(self, jobs: Sequence[tuple[int, str]]) -> list[StepResult]:
        return [StepResult(str(obs), bool(won)) for obs, won in self._run("step", jobs)]

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(None)
                conn.close()
            except (OSError, BrokenPipeError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        self._conns, self._procs = [], []


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_env_workers(games: int) -> int:
    """Engine worker processes for `games` concurrent games: one per usable CPU, at most 16."""
    return max(1, min(games, usable_cpus(), 16))


def make_pool(games: int, workers: int | None = None) -> EnvPool:
    """A pool for `games` concurrent games (`workers` ≤ 1 keeps them in this process)."""
    n = default_env_workers(games) if workers is None else workers
    return LocalEnvPool() if n <= 1 else ProcessEnvPool(n)
