"""ALFWorld sources and staging: train games + expert trajectories (agent) / held-out games (evaluation).

Sources (`a2rl data stage alfworld --source …`):

- `generated` (default): games generated from PDDL problems (`generator.py`), 600 train games
  (100 per task type) and 134 held-out games spread over the task types like the official
  `valid_unseen` split; `generated:train=N,heldout=M` changes the counts (both in games).
  Held-out games are played in unseen rooms, and train/held-out keys never coincide.
- a directory with the official ALFWorld data (`alfworld-download`'s `json_2.1.1/` with
  `game.tw-pddl` next to every `traj_data.json`), or `official` for `$ALFWORLD_DATA`
  (default `~/.cache/alfworld`): `train/` → agent, `valid_unseen/` (134 games) → held out.
  Games are filtered like `AlfredTWEnv` (the six task types, no `movable`/`Sliced` trials,
  `solvable` games only).

Every game is reset once in the real engine (its opening observation goes into the index), and
every train game is played by the searching expert: the won episodes (≤ 50 steps) are the SFT
trajectories. Generated games the expert cannot win within 50 steps are replaced by the next
key. Train games whose opening observation equals a held-out game's are dropped.

`games_only` (the `reference` protocol) gives the agent what the reference gives it: the raw
train games and nothing else — the official `json_2.1.1/train/` tree copied as it is (the
reference symlinks it), or the generated train games in the same layout
(`train/<type>-…/<trial>/{game.tw-pddl,traj_data.json}`); no index, no expert trajectories,
no in-context examples. The held-out split is the same in both protocols.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl_tasks.alfworld import catalog, generator, prompting
from a2rl_tasks.alfworld.engine import default_env_workers
from a2rl_tasks.common.jsonl import write_jsonl

TRAIN_FILE = "train.jsonl"
SFT_FILE = "sft.jsonl"
HELDOUT_FILE = "heldout.jsonl"
GAMES_DIR = "games"
#: Where `games_only` staging puts the train games (the reference's `data/train`).
RAW_TRAIN_DIR = "train"
DEFAULT_TRAIN_GAMES = 600
DEFAULT_HELDOUT_GAMES = sum(catalog.VALID_UNSEEN_COUNTS.values())  # 134
GENERATED = "generated"
OFFICIAL = "official"
EXPERT_MAX_STEPS = 50

Row = dict[str, Any]


@dataclass(frozen=True)
class GeneratedSource:
    train: int = DEFAULT_TRAIN_GAMES
    heldout: int = DEFAULT_HELDOUT_GAMES


def parse_source(source: str | None) -> GeneratedSource | Path:
    """`GeneratedSource` for `generated[:train=N,heldout=M]`, else the official data directory."""
    text = (source or GENERATED).strip()
    if text == GENERATED or text.startswith(GENERATED + ":"):
        counts: dict[str, int] = {}
        spec = text[len(GENERATED) + 1 :] if ":" in text else ""
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, _, value = part.partition("=")
            if key not in ("train", "heldout") or not value.isdigit() or int(value) < 1:
                raise A2rlError(
                    f"bad ALFWorld source {text!r}: expected generated:train=N,heldout=M (N, M ≥ 1)"
                )
            counts[key] = int(value)
        return GeneratedSource(**counts)
    if text == OFFICIAL:
        text = os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld")
    if text.startswith("s3://"):
        raise A2rlError("ALFWorld data from S3 is not supported: copy it to a local directory and pass that")
    path = Path(text).expanduser()
    if not path.is_dir():
        raise A2rlError(f"ALFWorld source not found: {text} (a directory with json_2.1.1/, or 'generated')")
    return path


def split_counts(total: int) -> dict[str, int]:
    """`total` games over the six task types in `valid_unseen`'s proportions (largest remainder)."""
    weights = catalog.VALID_UNSEEN_COUNTS
    whole = sum(weights.values())
    exact = {tt: total * w / whole for tt, w in weights.items()}
    counts = {tt: int(v) for tt, v in exact.items()}
    rest = sorted(weights, key=lambda tt: (-(exact[tt] - counts[tt]), catalog.TASK_TYPES.index(tt)))
    for tt in rest[: total - sum(counts.values())]:
        counts[tt] += 1
    return counts


def even_counts(total: int) -> dict[str, int]:
    """`total` games spread evenly over the six task types (earlier types get the remainder)."""
    n = len(catalog.TASK_TYPES)
    return {tt: total // n + (1 if i < total % n else 0) for i, tt in enumerate(catalog.TASK_TYPES)}


# --- workers (one engine per process) -----------------------------------------------------------


@cache
def _engine() -> Any:
    """This process's engine (one copy of fast-downward's library per process, reused)."""
    # lazy: TextWorld, only when games are built or played
    from a2rl_tasks.alfworld.engine import TextGame

    return TextGame()


def _trajectory_row(traj: Any) -> dict[str, Any]:
    return {
        "steps": [{"action": a, "observation": o} for a, o in traj.steps],
        "n_steps": len(traj.steps),
        "transcript": traj.transcript(),
    }


def _play_generated(job: tuple[str, str, str, str, int | None]) -> dict[str, Any] | None:
    """Generate the game for `key`, reset it, let the expert play it; None when it loses."""
    import tempfile

    # lazy: TextWorld, only when games are built or played
    from a2rl_tasks.alfworld.expert import ExpertError, TaskParams, search_expert

    key, task_type, split, scratch, scene_seed = job
    spec = generator.generate_game(key, task_type, split, scene_seed)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        path = generator.write_game(spec, Path(tmp))
        params = TaskParams.from_traj_data(generator.traj_data(spec))
        try:
            traj = search_expert(path, params, max_steps=EXPERT_MAX_STEPS, game=_engine())
        except ExpertError:
            return None
    return {
        "name": spec.name,
        "game": generator.game_json(spec),
        "traj_data": generator.traj_data(spec),
        "task_type": task_type,
        "goal": spec.goal,
        "observation": traj.observation,
        "trajectory": _trajectory_row(traj),
    }


def _play_official(job: tuple[str, bool]) -> dict[str, Any]:
    """The opening of an official game, and the expert's winning episode when asked (None when
    the expert cannot win it within 50 steps)."""
    # lazy: TextWorld, only when games are built or played
    from a2rl_tasks.alfworld.engine import initial_observation
    from a2rl_tasks.alfworld.expert import ExpertError, TaskParams, search_expert

    game_dir, with_expert = Path(job[0]), job[1]
    game_file = str(game_dir / generator.GAME_FILE)
    if with_expert:
        try:
            params = TaskParams.from_traj_data(json.loads((game_dir / generator.TRAJ_FILE).read_text()))
            traj = search_expert(game_file, params, max_steps=EXPERT_MAX_STEPS, game=_engine())
            return {"observation": traj.observation, "trajectory": _trajectory_row(traj)}
        except (ExpertError, ValueError, KeyError):
            pass
    return {"observation": initial_observation(_engine().reset(game_file)), "trajectory": None}


def _executor(jobs: int, workers: int | None) -> ProcessPoolExecutor | None:
    import multiprocessing as mp

    n = default_env_workers(jobs) if workers is None else workers
    return None if n <= 1 else ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))


def _map(fn: Any, jobs: list[Any], executor: ProcessPoolExecutor | None) -> list[Any]:
    if executor is None:
        return [fn(j) for j in jobs]
    return list(executor.map(fn, jobs, chunksize=1))


# --- generated games -----------------------------------------------------------------------


def generate_split(
    seed: int, split: str, counts: dict[str, int], scratch: Path, executor: ProcessPoolExecutor | None
) -> list[dict[str, Any]]:
    """Games of `split` (expert-winnable within 50 steps), `counts[task type]` of each, ordered
    so that every prefix of the list mixes the task types. A key whose game the expert cannot
    win is skipped for the next one, so the result depends only on (seed, split, counts).
    Held-out games are played in the unseen rooms drawn from `seed` (`generator.unseen_scenes`)."""
    scene_seed = seed if split == "heldout" else None
    got: dict[str, list[dict[str, Any]]] = {tt: [] for tt in catalog.TASK_TYPES}
    next_index = dict.fromkeys(catalog.TASK_TYPES, 0)
    while any(len(got[tt]) < counts.get(tt, 0) for tt in catalog.TASK_TYPES):
        jobs: list[tuple[str, str, str, str, int | None]] = []
        for tt in catalog.TASK_TYPES:
            need = counts.get(tt, 0) - len(got[tt])
            if need <= 0:
                continue
            if next_index[tt] > 20 * counts[tt] + 50:
                raise A2rlError(f"could not generate {counts[tt]} winnable {tt} games")
            keys = range(next_index[tt], next_index[tt] + need)
            jobs += [
                (generator.game_key(seed, split, tt, i), tt, split, str(scratch), scene_seed) for i in keys
            ]
            next_index[tt] += need
        for job, res in zip(jobs, _map(_play_generated, jobs, executor), strict=True):
            if res is not None:
                got[job[1]].append(res)
    taken = dict.fromkeys(catalog.TASK_TYPES, 0)
    out: list[dict[str, Any]] = []
    for tt in generator.task_type_plan(counts):
        out.append(got[tt][taken[tt]])
        taken[tt] += 1
    return out


def _write_game_files(root: Path, name: str, game: dict[str, Any], traj: dict[str, Any]) -> str:
    game_dir = root / GAMES_DIR / name
    game_dir.mkdir(parents=True, exist_ok=True)
    (game_dir / generator.GAME_FILE).write_text(json.dumps(game))
    (game_dir / generator.TRAJ_FILE).write_text(json.dumps(traj, indent=1, sort_keys=True))
    return f"{GAMES_DIR}/{name}/{generator.GAME_FILE}"


# --- official games -------------------------------------------------------------------------


def official_split_dirs(root: Path) -> tuple[Path, Path]:
    """(train dir, valid_unseen dir) inside an ALFWorld data directory."""
    for base in (root / "json_2.1.1", root):
        if (base / "train").is_dir() and (base / "valid_unseen").is_dir():
            return base / "train", base / "valid_unseen"
    raise A2rlError(f"{root}: no json_2.1.1/train and json_2.1.1/valid_unseen (official ALFWorld layout)")


def official_games(split_dir: Path) -> Iterator[Path]:
    """Game directories kept by `AlfredTWEnv`'s rules, sorted by path."""
    for traj_path in sorted(split_dir.rglob(generator.TRAJ_FILE)):
        game_dir = traj_path.parent
        rel = str(game_dir.relative_to(split_dir))
        if "movable" in rel or "Sliced" in rel or not (game_dir / generator.GAME_FILE).is_file():
            continue
        try:
            traj = json.loads(traj_path.read_text())
            solvable = json.loads((game_dir / generator.GAME_FILE).read_text()).get("solvable")
        except ValueError:
            continue
        if traj.get("task_type") in catalog.TASK_TYPES and solvable:
            yield game_dir


# --- staging --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GameRecord:
    """One staged game: where it goes, its files, and what the index and SFT rows say."""

    name: str
    game: dict[str, Any]
    traj_data: dict[str, Any]
    task_type: str
    goal: str
    observation: str
    trajectory: dict[str, Any] | None


def _goal_of(observation: str) -> str:
    marker = "Your task is to: "
    return observation.rsplit(marker, 1)[-1].strip() if marker in observation else ""


def _generated_records(
    parsed: GeneratedSource, seed: int, heldout_seed: int, scratch: Path, workers: int | None
) -> tuple[list[GameRecord], list[GameRecord]]:
    executor = _executor(parsed.train + parsed.heldout, workers)
    try:
        held = generate_split(heldout_seed, "heldout", split_counts(parsed.heldout), scratch, executor)
        train = generate_split(seed, "train", even_counts(parsed.train), scratch, executor)
    finally:
        if executor is not None:
            executor.shutdown()

    def record(g: dict[str, Any], with_trajectory: bool) -> GameRecord:
        return GameRecord(
            name=g["name"],
            game=g["game"],
            traj_data=g["traj_data"],
            task_type=g["task_type"],
            goal=g["goal"],
            observation=g["observation"],
            trajectory=g["trajectory"] if with_trajectory else None,
        )

    return [record(g, False) for g in held], [record(g, True) for g in train]


def _official_records(
    root: Path, workers: int | None, *, with_train: bool = True
) -> tuple[list[GameRecord], list[GameRecord]]:
    """(held-out records, train records); `with_train=False` skips the train games (empty list)."""
    train_src, held_src = official_split_dirs(root)
    held_dirs, train_dirs = list(official_games(held_src)), list(official_games(train_src))
    if not held_dirs or not train_dirs:
        raise A2rlError(f"{root}: no playable games in {train_src.name}/ or {held_src.name}/")
    train_dirs = train_dirs if with_train else []
    executor = _executor(len(held_dirs) + len(train_dirs), workers)
    try:
        held_res = _map(_play_official, [(str(d), False) for d in held_dirs], executor)
        train_res = _map(_play_official, [(str(d), True) for d in train_dirs], executor)
    finally:
        if executor is not None:
            executor.shutdown()

    def records(src: Path, dirs: list[Path], results: list[dict[str, Any]]) -> list[GameRecord]:
        out = []
        for d, res in zip(dirs, results, strict=True):
            traj = json.loads((d / generator.TRAJ_FILE).read_text())
            out.append(
                GameRecord(
                    name=d.relative_to(src).as_posix(),
                    game=json.loads((d / generator.GAME_FILE).read_text()),
                    traj_data=traj,
                    task_type=str(traj["task_type"]),
                    goal=_goal_of(res["observation"]),
                    observation=res["observation"],
                    trajectory=res["trajectory"],
                )
            )
        return out

    return records(held_src, held_dirs, held_res), records(train_src, train_dirs, train_res)


def _write_heldout(heldout_dir: Path, held: list[GameRecord]) -> None:
    rows = [
        {
            "id": f"alfworld-heldout-{i:05d}",
            "game": _write_game_files(heldout_dir, g.name, g.game, g.traj_data),
            "task_type": g.task_type,
            "observation": g.observation,
        }
        for i, g in enumerate(held, 1)
    ]
    write_jsonl(heldout_dir / HELDOUT_FILE, rows)


def _write_raw_game(game_dir: Path, game: dict[str, Any], traj: dict[str, Any]) -> None:
    """A game in the official layout (`game.tw-pddl` + `traj_data.json`)."""
    game_dir.mkdir(parents=True, exist_ok=True)
    (game_dir / generator.GAME_FILE).write_text(json.dumps(game))
    (game_dir / generator.TRAJ_FILE).write_text(json.dumps(traj, indent=1, sort_keys=True))


def _norm(text: str) -> str:
    return " ".join(text.split())


def stage(
    train_dir: Path,
    heldout_dir: Path,
    *,
    source: str | None,
    seed: int,
    workers: int | None = None,
    heldout_seed: int | None = None,
    games_only: bool = False,
) -> None:
    """Write both artifacts (see the module docstring). Generated games: train games from `seed`,
    held-out games from `heldout_seed` (default `seed`; staging passes one derived from a secret).
    `games_only`: the agent gets the raw train games only (the reference protocol)."""
    from importlib import resources

    parsed = parse_source(source)
    if isinstance(parsed, GeneratedSource):
        scratch = train_dir.parent / ".scratch"
        scratch.mkdir(exist_ok=True)
        try:
            held_seed = seed if heldout_seed is None else heldout_seed
            held, train = _generated_records(parsed, seed, held_seed, scratch, workers)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    else:
        held, train = _official_records(parsed, workers, with_train=not games_only)
    if games_only:
        _write_heldout(heldout_dir, held)
        if isinstance(parsed, GeneratedSource):
            for g in train:
                _write_raw_game(train_dir / RAW_TRAIN_DIR / g.name, g.game, g.traj_data)
        else:
            shutil.copytree(official_split_dirs(parsed)[0], train_dir / RAW_TRAIN_DIR)
        return
    held_openings = {_norm(g.observation) for g in held}
    kept = [g for g in train if _norm(g.observation) not in held_openings]
    if len(kept) < len(train):
        print(
            f"[alfworld] dropped {len(train) - len(kept)} train game(s) that open like a held-out game",
            file=sys.stderr,
        )
    _write_heldout(heldout_dir, held)
    train_rows: list[Row] = []
    sft_rows: list[Row] = []
    for i, g in enumerate(kept, 1):
        row = {
            "id": f"alfworld-train-{i:05d}",
            "game": _write_game_files(train_dir, g.name, g.game, g.traj_data),
            "task_type": g.task_type,
            "goal": g.goal,
            "observation": g.observation,
        }
        train_rows.append(row)
        if g.trajectory is not None:
            sft_rows.append({**row, "won": True, **g.trajectory})
    write_jsonl(train_dir / TRAIN_FILE, train_rows)
    write_jsonl(train_dir / SFT_FILE, sft_rows)
    examples = resources.files("a2rl_tasks.alfworld").joinpath(prompting.EXAMPLES_FILE).read_text()
    (train_dir / prompting.EXAMPLES_FILE).write_text(examples)
