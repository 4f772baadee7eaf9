"""alfworld, `protocol: reference`: official examples, official data layout, the reference's numbers.

The reference is microsoft/RD-Agent `autorl_bench` @ 471eb30,
`rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py`. `_reference_run_eval` below
re-derives its `ALFWorldEvaluator.run_eval` + `alfworld_run` (the official ReAct notebook
loop), playing the same engine our evaluation plays (TextWorld's PDDL env + ALFWorld's
demangler, what `AlfredTWEnv` wraps). The same model is run through it and through
`ALFWorldTask(protocol=...)`: in `reference` mode the prompts are byte-identical and the score is
the reference's; in `a2rl` mode the examples (and so the score) differ.

The model is a test double that imitates its in-context examples' verb for placing things: with
the official examples it writes `put X in/on Y` (which alfworld 0.4.2 answers "Nothing
happens."), with ours `move X to Y` — the mechanism behind the reference's ≈ 6 % baseline.
The official-layout sample (`json_2.1.1/{train,valid_unseen}/<type>-…/<trial>/`) is built from
generated games.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.alfworld import data, generator, prompting, reference
from a2rl_tasks.alfworld.engine import TextGame
from a2rl_tasks.alfworld.expert import ExpertError, TaskParams, search_expert
from a2rl_tasks.alfworld.task import ALFWorldTask
from a2rl_tasks.artifacts import MANIFEST, StagedArtifacts, stage_artifacts

from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl.protocols import PROTOCOL_A2RL, PROTOCOL_REFERENCE

#: sha256 of `react_prompts.json` (the official examples, verbatim): any edit fails this test.
REACT_PROMPTS_SHA256 = "cc1e4bffa7cd48cbe348a071fc2de9f83e2eef238afd5374615b47717c0d533a"
HELDOUT_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep")
TRAIN_TYPES = ("pick_heat_then_place_in_recep", "pick_two_obj_and_place")
MOVE = re.compile(r"^move (.+) to (.+)$")


# --- the official-layout sample -------------------------------------------------------------


def _winnable_game(engine: TextGame, task_type: str, split: str, scratch: Path) -> tuple[Any, list[str]]:
    """The first generated game of `task_type` the expert wins, and the expert's actions."""
    for index in range(20):
        spec = generator.generate_game(generator.game_key(5, split, task_type, index), task_type, split)
        path = generator.write_game(spec, scratch)
        try:
            traj = search_expert(path, TaskParams.from_traj_data(generator.traj_data(spec)), game=engine)
        except ExpertError:
            continue
        return spec, [a for a, _ in traj.steps]
    raise AssertionError(f"no winnable {task_type} game")


@pytest.fixture(scope="module")
def engine() -> TextGame:
    return TextGame()


@pytest.fixture(scope="module")
def official(tmp_path_factory: pytest.TempPathFactory, engine: TextGame) -> tuple[Path, dict[str, list[str]]]:
    """(ALFWorld data root laid out like `alfworld-download`'s, expert actions per held-out
    opening observation)."""
    root = tmp_path_factory.mktemp("alfworld-data")
    scratch = tmp_path_factory.mktemp("scratch")
    plans: dict[str, list[str]] = {}
    for split, types in (("valid_unseen", HELDOUT_TYPES), ("train", TRAIN_TYPES)):
        for tt in types:
            spec, actions = _winnable_game(
                engine, tt, "heldout" if split == "valid_unseen" else "train", scratch
            )
            game_file = generator.write_game(spec, root / "json_2.1.1" / split)
            (game_file.parent / "initial_state.pddl").write_text(generator.render_problem(spec))
            if split == "valid_unseen":
                opening = reference.opening(engine.reset(str(game_file)))
                plans[opening] = actions
    return root, plans


@pytest.fixture(scope="module")
def staged(
    official: tuple[Path, dict[str, list[str]]], tmp_path_factory: pytest.TempPathFactory
) -> StagedArtifacts:
    root, _ = official
    task = get_task("alfworld", protocol=PROTOCOL_REFERENCE)
    return stage_artifacts(task, source=str(root), root=tmp_path_factory.mktemp("staged") / "alfworld")


# --- a model that copies its examples' verb -----------------------------------------------------


def _examples_part(prompt: str) -> str:
    return prompt.split(prompting.TASK_INTRO, 1)[0]


def imitating_model(plans: dict[str, list[str]]) -> Callable[[str], str]:
    """prompt -> continuation: the next expert action of the game the prompt shows, its `move X to
    Y` written `put X in/on Y` when the examples place things with `put` (as the official ones do)."""

    def model(prompt: str) -> str:
        task = prompt.split(prompting.TASK_INTRO, 1)[1]
        opening, _, history = task.partition("\n>")
        plan = plans[opening]
        done = history.count("\n>")
        action = plan[done] if done < len(plan) else "look"
        if "> move " not in _examples_part(prompt):
            action = MOVE.sub(r"put \1 in/on \2", action)
        return " " + action + "\nOn the countertop 1, you see"  # the backend's stop cuts this

    return model


class ModelBackend(InferenceBackend):
    """`InferenceBackend` over `imitating_model`, applying the request's stop strings; records prompts."""

    name = "imitating"

    def __init__(self, model: Callable[[str], str]) -> None:
        self.model = model
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        assert request.max_new_tokens == 100 and tuple(request.stop) == ("\n",) and not request.chat
        self.prompts.extend(prompts)
        return [self.model(p).split("\n", 1)[0] for p in prompts]


# --- the reference's rules, re-derived ----------------------------------------------------------


def _reference_alfworld_run(
    llm_fn: Callable[[str, list[str]], str], env: TextGame, prompt: str, ob: str, max_steps: int = 50
) -> int:
    """eval.py `alfworld_run`: the whole history in the prompt, `think:` -> "OK.", reward = won."""
    init_prompt = prompt + ob + "\n>"
    history = ""
    for _ in range(1, max_steps + 1):
        action = llm_fn(init_prompt + history, ["\n"]).strip()
        observation, won = env.step(action)  # env.step([action]); reward = info["won"][0]; done
        observation = reference.process_ob(observation)
        if action.startswith("think:"):
            observation = "OK."
        history += f" {action}\n{observation}\n>"
        if won:
            return 1
    return 0


def _reference_run_eval(
    llm_fn: Callable[[str, list[str]], str],
    env: TextGame,
    game_files: list[Path],
    react_prompts: dict[str, str],
) -> float:
    """eval.py `ALFWorldEvaluator.run_eval`: the task type from the game's directory name, the
    prompt from `react_<k>_1` + `react_<k>_0`, score = won / played * 100 (unknown types skipped)."""
    cnts, rs = [0] * 6, [0] * 6
    for game_file in game_files:
        ob = "\n".join(env.reset(str(game_file)).split("\n\n")[1:])
        name = "/".join(str(game_file).split("/")[-3:-1])
        for i, (prefix, key) in enumerate(reference.TASK_PREFIXES.items()):
            if name.startswith(prefix):
                prompt = (
                    "Interact with a household to solve a task. Here are two examples.\n"
                    + react_prompts[f"react_{key}_1"]
                    + react_prompts[f"react_{key}_0"]
                    + "\nHere is the task.\n"
                )
                rs[i] += _reference_alfworld_run(llm_fn, env, prompt, ob)
                cnts[i] += 1
                break
    return sum(rs) / sum(cnts) * 100 if sum(cnts) else 0.0


def _by_game(prompts: list[str]) -> dict[str, list[str]]:
    games: dict[str, list[str]] = defaultdict(list)
    for p in prompts:
        games[p.split(prompting.TASK_INTRO, 1)[1].partition("\n>")[0]].append(p)
    return dict(games)


# --- tests ------------------------------------------------------------------------------------


def test_official_examples_file_is_pinned() -> None:
    """The official examples, verbatim: 18 `react_*` entries, their quirks kept (`sparybottle`,
    a missing `OK.`), `put … in/on …` placements; the MIT notice ships beside them."""
    raw = (Path(reference.__file__).parent / reference.OFFICIAL_PROMPTS_FILE).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == REACT_PROMPTS_SHA256
    assert len(raw) == 36957  # 36954 characters of the upstream file, then "\n}\n"
    prompts = reference.official_react_prompts()
    assert sorted(prompts) == sorted(
        f"react_{k}_{i}" for k in reference.TASK_PREFIXES.values() for i in range(3)
    )
    assert "I need to find and take a sparybottle" in prompts["react_put_0"]
    assert "Next, I need to take it.\n> take apple 3 from garbagecan 1" in prompts["react_put_1"]
    assert all("in/on" in prompts[f"react_{k}_0"] for k in ("put", "clean", "heat", "cool", "puttwo"))
    assert all(" move " not in p for p in prompts.values())
    notice = (Path(reference.__file__).parent / "REACT_PROMPTS_LICENSE.txt").read_text()
    assert "MIT License" in notice and "ysymyth/ReAct" in notice


def test_reference_staging_gives_the_agent_the_raw_train_games_only(
    official: tuple[Path, dict[str, list[str]]], staged: StagedArtifacts
) -> None:
    root, _ = official
    src = root / "json_2.1.1" / "train"
    copied = staged.train_dir / data.RAW_TRAIN_DIR
    src_files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    assert sorted(p.relative_to(copied) for p in copied.rglob("*") if p.is_file()) == src_files
    assert all((copied / f).read_bytes() == (src / f).read_bytes() for f in src_files)
    top = sorted(p.name for p in staged.train_dir.iterdir() if p.name != MANIFEST)
    assert top == [data.RAW_TRAIN_DIR]  # no train.jsonl, sft.jsonl, react_examples.json
    held = [json.loads(x) for x in (staged.heldout_dir / data.HELDOUT_FILE).read_text().splitlines()]
    assert sorted(r["task_type"] for r in held) == sorted(HELDOUT_TYPES)  # = valid_unseen


def test_reference_description_is_the_references_with_no_sft_hints() -> None:
    text = get_task("alfworld", protocol=PROTOCOL_REFERENCE).description()
    assert text.startswith("#ALFWorldQuest") and "- Place: `put {object} {id} in/on {location} {id}`" in text
    assert "react_<type>_1" in text and "sft.jsonl" not in text and "SFT" not in text
    assert "sft.jsonl" in get_task("alfworld", protocol=PROTOCOL_A2RL).description()


def test_same_model_gives_the_references_prompts_and_score_in_reference_mode(
    official: tuple[Path, dict[str, list[str]]], staged: StagedArtifacts, engine: TextGame
) -> None:
    root, plans = official
    model = imitating_model(plans)
    ref_prompts: list[str] = []

    def llm_fn(prompt: str, stop: list[str]) -> str:
        ref_prompts.append(prompt)
        return model(prompt).split(stop[0], 1)[0]  # vLLM's stop

    games = sorted((root / "json_2.1.1" / "valid_unseen").rglob(generator.GAME_FILE))
    ref_score = _reference_run_eval(llm_fn, engine, games, reference.official_react_prompts())
    # Only the examine game needs no placing: the reference scores 1/3.
    assert ref_score == pytest.approx(100 / 3)

    ours = ModelBackend(model)
    result = ALFWorldTask(protocol=PROTOCOL_REFERENCE).evaluate(ours, staged.heldout_dir)
    assert result.score == pytest.approx(ref_score) and result.n == 3 and result.correct == 1
    assert _by_game(ours.prompts) == _by_game(ref_prompts)  # byte for byte, every step
    won = {d["task_type"]: d["won"] for d in result.details}
    assert won == {
        "look_at_obj_in_light": True,
        "pick_and_place_simple": False,
        "pick_clean_then_place_in_recep": False,
    }
    official_prompts = reference.official_react_prompts()
    for d in result.details:
        k = prompting.prefix_for(d["task_type"])
        examples = official_prompts[f"react_{k}_1"] + official_prompts[f"react_{k}_0"]
        assert prompting.HEADER + examples + prompting.TASK_INTRO + d["opening"] + "\n>" in ours.prompts

    # a2rl: our examples (with `move`) -> the same model wins every game.
    a2rl = ModelBackend(model)
    corrected = ALFWorldTask(protocol=PROTOCOL_A2RL).evaluate(a2rl, staged.heldout_dir)
    assert corrected.score == 100.0
    assert any("> move " in _examples_part(p) for p in a2rl.prompts)


def test_reference_staging_of_generated_games_uses_the_official_layout(tmp_path: Path) -> None:
    task = get_task("alfworld", protocol=PROTOCOL_REFERENCE)
    out = stage_artifacts(task, source="generated:train=2,heldout=1", root=tmp_path / "staged")
    assert sorted(p.name for p in out.train_dir.iterdir() if p.name != MANIFEST) == [data.RAW_TRAIN_DIR]
    files = [
        p.relative_to(out.train_dir / data.RAW_TRAIN_DIR)
        for p in (out.train_dir / data.RAW_TRAIN_DIR).rglob("*")
    ]
    games = sorted(f for f in files if f.name == generator.GAME_FILE)
    assert len(games) == 2 and len([f for f in files if f.name == generator.TRAJ_FILE]) == 2
    for game in games:  # <type>-<Object>-None-<Receptacle>-<scene>/trial_…/game.tw-pddl
        assert reference.reference_prefix("/".join(game.parts[:2])) is not None
        assert game.parts[1].startswith("trial_") and len(game.parts) == 3
    # Both protocols' versions are the task's own, each marked with its protocol.
    ours = get_task("alfworld", protocol=PROTOCOL_A2RL)
    for theirs_v, ours_v in (
        (task.data_version, ours.data_version),
        (task.evaluator_version, ours.evaluator_version),
    ):
        assert theirs_v.endswith("+reference") and ours_v.endswith("+a2rl")
        assert theirs_v.removesuffix("+reference") == ours_v.removesuffix("+a2rl")
