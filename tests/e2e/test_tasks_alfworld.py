"""alfworld: generated PDDL games in the real engine, staging, ReAct rollouts (batched), scoring.

Every game here is played by the real TextWorld/ALFWorld engine. The model is replaced by
`ScriptedBackend`, an `InferenceBackend` that answers each prompt with the next line of a known
plan (read off the prompt, like a model would), so the episode loop, the prompt format and the
batching can be checked exactly; the tiny real model runs in `test_tasks_alfworld_e2e.py`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from a2rl_cli import main
from a2rl_tasks import get_task
from a2rl_tasks.alfworld import catalog, data, generator, prompting
from a2rl_tasks.alfworld.engine import INVALID_FEEDBACK, LocalEnvPool, TextGame, initial_observation
from a2rl_tasks.alfworld.expert import TaskParams, planner_plan, play_commands, search_expert
from a2rl_tasks.alfworld.rollout import EpisodeSpec, replay, run_episodes
from a2rl_tasks.alfworld.task import ALFWorldTask
from a2rl_tasks.artifacts import check_disjoint, heldout_leaks, stage_artifacts, verify_artifact

from a2rl.constants import ENV_ALFWORLD_MAX_STEPS
from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl.protocols import PROTOCOL_A2RL

SOURCE = "generated:train=4,heldout=4"


@pytest.fixture(scope="module")
def engine() -> TextGame:
    return TextGame()


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return stage_artifacts(
        get_task("alfworld", protocol=PROTOCOL_A2RL),
        source=SOURCE,
        root=tmp_path_factory.mktemp("alf") / "staged",
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# --- the generator -------------------------------------------------------------------------


def test_generation_is_deterministic_and_keys_are_disjoint_per_split() -> None:
    key = generator.game_key(7, "train", "pick_heat_then_place_in_recep", 3)
    a = generator.generate_game(key, "pick_heat_then_place_in_recep", "train")
    b = generator.generate_game(key, "pick_heat_then_place_in_recep", "train")
    assert generator.render_problem(a) == generator.render_problem(b) and a.goal == b.goal
    other = generator.generate_game(
        generator.game_key(8, "train", "pick_heat_then_place_in_recep", 3),
        "pick_heat_then_place_in_recep",
        "train",
    )
    assert generator.render_problem(other) != generator.render_problem(a)
    train_keys = {generator.game_key(0, "train", tt, i) for tt in catalog.TASK_TYPES for i in range(50)}
    held_keys = {generator.game_key(0, "heldout", tt, i) for tt in catalog.TASK_TYPES for i in range(50)}
    assert not train_keys & held_keys
    with pytest.raises(ValueError):
        generator.game_key(0, "test", "pick_and_place_simple", 0)


def test_heldout_rooms_are_unseen_in_training() -> None:
    for room in catalog.ROOMS:
        train = {s.signature for s in generator.train_scenes(room)}
        unseen = generator.unseen_scenes(room)
        assert len(unseen) == generator.UNSEEN_SCENES
        assert not train & {s.signature for s in unseen}
        assert {s.number for s in unseen}.isdisjoint({s.number for s in generator.train_scenes(room)})


def test_problem_uses_alfred_naming_and_the_official_goal() -> None:
    spec = generator.generate_game("k", "pick_clean_then_place_in_recep", "train")
    problem = generator.render_problem(spec)
    assert "(:domain alfred)" in problem and "agent1 - agent" in problem
    assert any(f"{spec.obj}_bar__" in line for line in problem.splitlines())
    assert "(isClean ?o)" in problem and f"(objectType ?o {spec.obj}Type)" in problem
    game = generator.game_json(spec)
    assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable"}
    assert f"Your task is to: {spec.goal}." in game["grammar"]
    assert spec.goal in [
        t.format(obj=spec.obj.lower(), recep=spec.parent.lower())
        for t in catalog.goal_templates(spec.task_type)
    ]
    assert spec.name.startswith(f"pick_clean_then_place_in_recep-{spec.obj}-None-{spec.parent}-")


@pytest.mark.parametrize("task_type", catalog.TASK_TYPES)
def test_generated_games_are_won_by_the_engine_expert_plan(
    task_type: str, tmp_path: Path, engine: TextGame
) -> None:
    spec = generator.generate_game(generator.game_key(0, "train", task_type, 0), task_type, "train")
    game_file = generator.write_game(spec, tmp_path)
    opening = initial_observation(engine.reset(str(game_file)))
    assert opening.startswith("You are in the middle of a room.")
    assert opening.endswith(f"Your task is to: {spec.goal}.")
    assert not engine.won
    plan = planner_plan(game_file)  # fast-downward, from the full state
    assert plan
    played = play_commands(game_file, plan, game=engine)
    assert played.won and len(played.steps) == len(plan)
    assert INVALID_FEEDBACK not in [o for _, o in played.steps]
    # The searching expert (observations only) wins too, within the evaluation's 50 steps.
    traj = search_expert(game_file, TaskParams.from_traj_data(generator.traj_data(spec)), game=engine)
    assert traj.won and len(traj.steps) <= 50
    assert traj.steps[0][0].startswith("think: To solve the task")
    assert all(o == "OK." for a, o in traj.steps if a.startswith("think:"))


def test_parse_cache_leaves_the_engine_output_unchanged(tmp_path: Path, engine: TextGame) -> None:
    """Our engine memoises TextWorld's grammar parsing; a raw engine in a fresh interpreter must
    print exactly the same text and admissible commands for the same commands."""
    spec = generator.generate_game("cache-check", "pick_heat_then_place_in_recep", "train")
    game_file = generator.write_game(spec, tmp_path)
    commands = [*planner_plan(game_file), "look", "inventory", "dance"]
    script = (
        "import json, sys, textworld\n"
        "from textworld.envs.pddl import PddlEnv\n"
        "from alfworld.agents.environment.alfred_tw_env import AlfredDemangler\n"
        "path, commands = sys.argv[1], json.loads(sys.argv[2])\n"
        "env = AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True)))\n"
        "env.load(path); st = env.reset(); out = [[st.feedback, st['admissible_commands']]]\n"
        "for c in commands:\n"
        "    st, _, _ = env.step(c); out.append([st.feedback, st['admissible_commands']])\n"
        "print(json.dumps(out))\n"
    )
    raw = subprocess.run(
        [sys.executable, "-c", script, str(game_file), json.dumps(commands)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    ours = [[engine.reset(str(game_file)), engine.admissible_commands]]
    for c in commands:
        ours.append([engine.step(c)[0], engine.admissible_commands])
    assert json.loads(raw.stdout.strip().splitlines()[-1]) == ours


# --- staging ---------------------------------------------------------------------------------


def test_source_parsing() -> None:
    assert data.parse_source(None) == data.GeneratedSource(600, 134)
    assert data.parse_source("generated:train=9,heldout=3") == data.GeneratedSource(9, 3)
    for bad in ("generated:train=0", "generated:test=3", "/no/such/dir", "s3://bucket/alfworld"):
        with pytest.raises(A2rlError):
            data.parse_source(bad)
    assert data.split_counts(134) == catalog.VALID_UNSEEN_COUNTS
    assert sum(data.split_counts(10).values()) == 10 and sum(data.even_counts(10).values()) == 10


def test_staged_artifacts(staged: Any, engine: TextGame) -> None:
    for split in ("train", "heldout"):
        assert verify_artifact(staged.root / split).task == "alfworld"
    held = _rows(staged.heldout_dir / data.HELDOUT_FILE)
    train = _rows(staged.train_dir / data.TRAIN_FILE)
    sft = _rows(staged.train_dir / data.SFT_FILE)
    assert [r["id"] for r in held] == [f"alfworld-heldout-{i:05d}" for i in range(1, 5)]
    assert len(train) == 4 and len(sft) == 4
    assert sorted(r["task_type"] for r in held) == sorted(t for t, n in data.split_counts(4).items() if n)
    assert set(held[0]) == {"id", "game", "task_type", "observation"}
    assert (staged.train_dir / prompting.EXAMPLES_FILE).read_text() == (
        Path(prompting.__file__).parent / prompting.EXAMPLES_FILE
    ).read_text()
    # Every held-out game opens as indexed, and is played in a room no train game uses.
    train_rooms = {r["observation"].split("\n")[0] for r in train}
    for row in held:
        game_file = staged.heldout_dir / row["game"]
        assert initial_observation(engine.reset(str(game_file))) == row["observation"]
        assert row["observation"].split("\n")[0] not in train_rooms
    # SFT trajectories are won episodes of the train games, in the evaluation's text format.
    for row in sft:
        played = replay(str(staged.train_dir / row["game"]), [s["action"] for s in row["steps"]], game=engine)
        assert played.won and played.observations == [s["observation"] for s in row["steps"]]
        assert row["transcript"] == row["observation"] + "\n" + "".join(
            f"> {s['action']}\n{s['observation']}\n" for s in row["steps"]
        )


def test_splits_are_disjoint_by_content(staged: Any, tmp_path: Path) -> None:
    assert heldout_leaks(staged.train_dir, staged.heldout_dir) == []
    held_games = {
        (staged.heldout_dir / r["game"]).read_text() for r in _rows(staged.heldout_dir / "heldout.jsonl")
    }
    for path in staged.train_dir.rglob(generator.GAME_FILE):
        problem = json.loads(path.read_text())["pddl_problem"]
        assert all(problem not in g for g in held_games)
    # Negative control: a held-out game's opening copied (reformatted) into the train artifact.
    copy = tmp_path / "train"
    shutil.copytree(staged.train_dir, copy)
    held = _rows(staged.heldout_dir / data.HELDOUT_FILE)[2]
    (copy / "notes.jsonl").write_text(
        json.dumps({"id": "x", "text": held["observation"].replace(" ", "  ")}) + "\n"
    )
    with pytest.raises(A2rlError, match="held-out"):
        check_disjoint(copy, staged.heldout_dir)


def test_staging_is_deterministic(staged: Any, tmp_path: Path) -> None:
    """Held-out games depend only on (seed, split, task type, index): staging one held-out game
    again gives the first clean game of the 4-game staging, byte for byte."""
    again = stage_artifacts(
        get_task("alfworld", protocol=PROTOCOL_A2RL),
        source="generated:train=1,heldout=1",
        root=tmp_path / "s",
    )
    (row,) = _rows(again.heldout_dir / data.HELDOUT_FILE)
    (same,) = [r for r in _rows(staged.heldout_dir / data.HELDOUT_FILE) if r["game"] == row["game"]]
    assert same["observation"] == row["observation"]
    assert (again.heldout_dir / row["game"]).read_bytes() == (staged.heldout_dir / row["game"]).read_bytes()
    (train,) = _rows(again.train_dir / data.TRAIN_FILE)
    assert train["game"] == _rows(staged.train_dir / data.TRAIN_FILE)[0]["game"]


def test_staging_from_the_official_layout(staged: Any, tmp_path: Path) -> None:
    """A source laid out like `alfworld-download`'s json_2.1.1 (built from generated games)."""
    root = tmp_path / "alfworld" / "json_2.1.1"
    games = sorted({p.parent for p in (staged.train_dir / "games").rglob(generator.GAME_FILE)})
    held = sorted({p.parent for p in (staged.heldout_dir / "games").rglob(generator.GAME_FILE)})
    for split, dirs in (("train", games[:2]), ("valid_unseen", held[:2])):
        for d in dirs:
            shutil.copytree(d, root / split / d.relative_to(d.parent.parent.parent))
    # Filtered out like AlfredTWEnv does: movable-receptacle trials and unsolvable games.
    movable = root / "train" / "pick_and_place_with_movable_recep-Mug-Cup-Shelf-1" / "trial_x"
    shutil.copytree(games[2], movable)
    unsolvable = root / "train" / "pick_and_place_simple-Book-None-Bed-301" / "trial_y"
    shutil.copytree(games[3], unsolvable)
    game = json.loads((unsolvable / generator.GAME_FILE).read_text())
    (unsolvable / generator.GAME_FILE).write_text(json.dumps({**game, "solvable": False}))
    out = stage_artifacts(
        get_task("alfworld", protocol=PROTOCOL_A2RL),
        source=str(tmp_path / "alfworld"),
        root=tmp_path / "staged",
    )
    train = _rows(out.train_dir / data.TRAIN_FILE)
    heldout = _rows(out.heldout_dir / data.HELDOUT_FILE)
    assert len(train) == 2 and len(heldout) == 2
    assert all("movable" not in r["game"] and "Bed-301" not in r["game"] for r in train)
    assert len(_rows(out.train_dir / data.SFT_FILE)) == 2
    assert heldout_leaks(out.train_dir, out.heldout_dir) == []


# --- rollouts ---------------------------------------------------------------------------------


class ScriptedBackend(InferenceBackend):
    """Answers each prompt with the next line of the script of the game it shows (test double
    of a model; the game is recognised by its opening observation in the prompt)."""

    name = "scripted"

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts = scripts
        self.calls: list[int] = []
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        assert request.max_new_tokens == 100 and tuple(request.stop) == ("\n",) and not request.chat
        self.calls.append(len(prompts))
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            assert prompt.startswith(prompting.HEADER) and prompt.endswith("\n>")
            task = prompt.split(prompting.TASK_INTRO, 1)[1]
            opening, _, history = task.partition("\n>")
            script = self.scripts[opening]
            done = history.count("\n>")
            out.append(" " + script[done] if done < len(script) else " look")
        return out


def _episodes(staged: Any) -> list[EpisodeSpec]:
    return ALFWorldTask(protocol=PROTOCOL_A2RL).load_heldout(staged.heldout_dir)


@pytest.fixture(scope="module")
def expert_scripts(staged: Any, engine: TextGame) -> dict[str, list[str]]:
    """Opening observation -> the searching expert's actions, for every held-out game."""
    scripts = {}
    for row in _rows(staged.heldout_dir / data.HELDOUT_FILE):
        game_file = staged.heldout_dir / row["game"]
        traj_data = json.loads((game_file.parent / generator.TRAJ_FILE).read_text())
        traj = search_expert(game_file, TaskParams.from_traj_data(traj_data), game=engine)
        scripts[row["observation"]] = [a for a, _ in traj.steps]
    return scripts


def test_batched_rollouts_match_one_game_at_a_time(staged: Any, expert_scripts: dict[str, list[str]]) -> None:
    scripts = dict(expert_scripts)
    first = next(iter(scripts))
    scripts[first] = ["fly to the moon", *scripts[first]]  # one invalid action
    specs = _episodes(staged)
    batched = ScriptedBackend(scripts)
    eps, stats = run_episodes(batched, specs, pool=LocalEnvPool())
    assert all(ep.won for ep in eps) and [ep.spec.id for ep in eps] == [s.id for s in specs]
    longest = max(len(s) for s in scripts.values())
    # One generate call per step for every live game; games leave the batch when won.
    assert stats.generate_calls == longest == len(batched.calls)
    assert batched.calls[0] == len(specs) and sorted(batched.calls, reverse=True) == batched.calls
    assert eps[0].observations[0] == INVALID_FEEDBACK
    assert all(
        o == "OK."
        for ep in eps
        for a, o in zip(ep.actions, ep.observations, strict=True)
        if a.startswith("think:")
    )
    # The prompt keeps the whole history in the reference's format.
    last = eps[1]
    assert last.prompt.endswith(f" {last.actions[-1]}\n{last.observations[-1]}\n>")
    shots = prompting.react_examples()[prompting.prefix_for(last.spec.task_type)]
    assert last.prompt.startswith(
        prompting.HEADER + shots[0] + shots[1] + prompting.TASK_INTRO + last.opening + "\n>"
    )

    one_by_one = ScriptedBackend(scripts)
    seq, seq_stats = run_episodes(one_by_one, specs, concurrency=1, pool=LocalEnvPool())
    assert set(one_by_one.calls) == {1}
    assert seq_stats.generate_calls == sum(ep.steps for ep in seq)
    assert [ep.details(50) for ep in seq] == [ep.details(50) for ep in eps]


def test_step_limit_and_task_metrics(staged: Any, expert_scripts: dict[str, list[str]]) -> None:
    scripts = dict(expert_scripts)
    backend = ScriptedBackend(scripts)
    result = ALFWorldTask(protocol=PROTOCOL_A2RL, max_steps=3).evaluate(backend, staged.heldout_dir)
    assert result.score == 0.0 and result.n == 4
    assert all(d["steps"] == 3 and d["end"] == "step_limit" for d in result.details)
    assert result.evaluator_version == "alfworld-1+a2rl+steps3"
    full = ALFWorldTask(protocol=PROTOCOL_A2RL).evaluate(
        ScriptedBackend(scripts), staged.heldout_dir, limit=2
    )
    assert full.score == 100.0 and full.n == 2 and full.evaluator_version == "alfworld-1+a2rl"
    assert full.metrics["generate_calls"] == max(d["steps"] for d in full.details)
    prefix = prompting.prefix_for(full.details[0]["task_type"])
    assert full.metrics[f"success_{prefix}"] == 100.0


def test_max_steps_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ALFWorldTask(protocol=PROTOCOL_A2RL).max_steps == 50
    monkeypatch.setenv(ENV_ALFWORLD_MAX_STEPS, "4")
    assert (
        ALFWorldTask(protocol=PROTOCOL_A2RL).max_steps == 4
        and ALFWorldTask(protocol=PROTOCOL_A2RL).evaluator_version == "alfworld-1+a2rl+steps4"
    )
    monkeypatch.setenv(ENV_ALFWORLD_MAX_STEPS, "zero")
    with pytest.raises(A2rlError):
        ALFWorldTask(protocol=PROTOCOL_A2RL)


def test_offline_scoring_replays_saved_outputs(
    staged: Any,
    expert_scripts: dict[str, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scripts = dict(expert_scripts)
    held = _rows(staged.heldout_dir / data.HELDOUT_FILE)
    preds = tmp_path / "pred.jsonl"
    lines = [
        {"id": held[0]["id"], "prediction": "\n".join(f" {a}" for a in scripts[held[0]["observation"]])},
        {"id": held[1]["id"], "prediction": " go to the moon\n think: hm\n look"},
        {"id": held[2]["id"], "prediction": "\n".join(scripts[held[2]["observation"]][:-1])},  # stops short
    ]  # held[3]: missing
    preds.write_text("".join(json.dumps(x) + "\n" for x in lines))
    references = staged.heldout_dir / data.HELDOUT_FILE
    code = main(
        ["tasks", "score", "alfworld", "--predictions", str(preds), "--references", str(references), "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["n"] == 4 and out["correct"] == 1 and out["score"] == 25.0
    assert out["metrics"]["missing"] == 1.0
    # The held-out directory works as the references too.
    result = ALFWorldTask(protocol=PROTOCOL_A2RL).score_prediction_files(preds, staged.heldout_dir)
    assert result.correct == 1 and result.details[1]["invalid_actions"] == 1
    assert result.details[1]["think_actions"] == 1 and result.details[3]["steps"] == 0


def test_description_matches_the_evaluator() -> None:
    text = get_task("alfworld", protocol=PROTOCOL_A2RL).description()
    for fact in (
        "Interact with a household to solve a task. Here are two examples.",
        "Here is the task.",
        "100 new tokens",
        "50 steps",
        "think:",
        "OK.",
        "Nothing happens.",
        "sft.jsonl",
        "react_examples.json",
        "move",
    ):
        assert fact in text, fact


@pytest.mark.slow
def test_react_examples_file_is_a_fresh_build(tmp_path: Path) -> None:
    built = prompting.build_react_examples(tmp_path)
    stored = json.loads((Path(prompting.__file__).parent / prompting.EXAMPLES_FILE).read_text())
    assert built == stored
    for prefix, shots in stored["examples"].items():
        assert len(shots) == 2 and all(s.endswith("\n") for s in shots), prefix


def test_engine_workers_in_processes(staged: Any) -> None:
    from a2rl_tasks.alfworld.engine import ProcessEnvPool

    specs = _episodes(staged)[:2]
    with ProcessEnvPool(2) as pool:
        openings = pool.reset_many([(0, specs[0].game_file), (1, specs[1].game_file)])
        results = pool.step_many([(0, "look"), (1, "jump")])
    assert [initial_observation(o) for o in openings] == [
        r["observation"] for r in _rows(staged.heldout_dir / data.HELDOUT_FILE)[:2]
    ]
    assert results[1].observation == INVALID_FEEDBACK and not results[0].won
