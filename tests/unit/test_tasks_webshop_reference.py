"""webshop, `protocol: reference`: the reference's prompt/parser over the same model; real-env seeding.

The reference is microsoft/RD-Agent `autorl_bench` @ 471eb30,
`rdagent/scenarios/rl/autorl_bench/benchmarks/webshop/eval.py`. `_reference_webshop_run` below
re-derives its `webshop_run` + `build_react_prompt` + `_format_available_actions` (one goal at a
time, `env.reset(session=i)`); `WebShopTask(protocol="reference")` must send the same prompts and
get the same score. The environment is the built-in shop (the real one cannot be installed here).
"""

from __future__ import annotations

import random
import re
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import StagedArtifacts, stage_artifacts
from a2rl_tasks.webshop import data, real, reference
from a2rl_tasks.webshop.sim import SimWebShopEnv, load_catalogue, load_goals
from a2rl_tasks.webshop.task import WebShopTask

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl.protocols import PROTOCOL_A2RL, PROTOCOL_REFERENCE

LIMIT = 12
#: This file's own held-out secret: the built-in shop's held-out goals (and so the scores below)
#: are the same on every machine, whatever secret the session or the machine has.
HELDOUT_SECRET = bytes.fromhex("5e" * 32)


def _listed(action: str, user: str) -> bool:
    """`action` is a line of the prompt's action list (indented or not)."""
    return re.search(rf"(^|\n) *{re.escape(action)} *(\n|$)", user) is not None


def model(user: str) -> str:
    """A policy reading only the prompt: search with the instruction, click the first listed
    product, buy. Goals whose instruction length is a multiple of 3 answer `action: click[...]`
    in lower case, which the reference sends to the shop as it is (an invalid action)."""
    instruction = re.search(r"Instruction: (.*)\n", user).group(1)  # type: ignore[union-attr]
    if _listed("search[<your query>]", user):
        return f"search[{instruction}]"
    if _listed("click[buy now]", user):
        return "Action: choose[buy now]"
    product = re.search(r"(?:^|\n) *click\[(b0\w+)\] *(?=\n|$)", user)
    prefix = "action: " if len(instruction) % 3 == 0 else "Action: "
    return f"{prefix}click[{product.group(1) if product else 'back to search'}]"


class ModelBackend(InferenceBackend):
    """`model` on the prompt's last user text (plain prompts: everything after the system text)."""

    name = "shopper"

    def __init__(self, system: str) -> None:
        self.system = system
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        assert request.max_new_tokens == 100 and tuple(request.stop) == ("\n",)
        self.prompts.extend(prompts)
        return [model(p.split(self.system, 1)[1]) for p in prompts]


# --- the reference's rules, re-derived ----------------------------------------------------------


def _format_available_actions(avail: dict[str, Any]) -> str:
    lines = []
    if avail.get("has_search_bar"):
        lines.append("search[<your query>]")
    for txt in avail.get("clickables", []):
        lines.append(f"click[{txt}]")
    return "\n".join(f"  {a}" for a in lines)


def _build_react_prompt(
    instruction: str, history: list[tuple[str, str]], observation: str, avail: str
) -> str:
    prompt = reference.PROMPT_HEAD.format(instruction=instruction, available_actions=avail)
    recent = history[-5:] if len(history) > 5 else history
    offset = len(history) - len(recent)
    for i, (action, obs) in enumerate(recent):
        prompt += f"\nObservation {offset + i + 1}: {obs}\n"
        prompt += f"Action {offset + i + 1}: {action}\n"
    prompt += f"\nObservation {len(history) + 1}: {observation}\n"
    prompt += f"Action {len(history) + 1}:"
    return prompt


def _reference_webshop_run(
    llm_fn: Callable[[str], str], env: Any, instruction: str, observation: str
) -> bool:
    """eval.py `webshop_run`: success = reward >= 0.5 at `done`, at most 50 steps."""
    history: list[tuple[str, str]] = []
    for _step in range(1, 51):
        prompt = _build_react_prompt(
            instruction, history, observation, _format_available_actions(env.get_available_actions())
        )
        action = llm_fn(prompt).strip()
        if action.startswith("Action:"):
            action = action[7:].strip()
        if action.startswith("choose["):
            action = "click[" + action[7:]
        observation, reward, done, _info = env.step(action)
        history.append((action, observation))
        if done:
            return bool(reward >= 0.5)
    return False


# --- tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> StagedArtifacts:
    task = get_task("webshop", protocol=PROTOCOL_REFERENCE)
    root = tmp_path_factory.mktemp("ws-ref") / "staged"
    return stage_artifacts(task, source=None, root=root, secret=HELDOUT_SECRET)


def test_reference_staging_gives_no_expert_trajectories(staged: StagedArtifacts) -> None:
    assert not (staged.train_dir / data.TRAJECTORIES_FILE).exists()
    shipped = (staged.train_dir / data.SIM_DIR / "prompting.py").read_text()
    assert shipped == Path(reference.__file__).read_text()  # the evaluator's prompt builder
    text = get_task("webshop", protocol=PROTOCOL_REFERENCE).description()
    assert text.startswith("#WebShop tasks") and "trajectories" not in text


def test_same_model_gives_the_references_prompts_and_score(staged: StagedArtifacts) -> None:
    products = load_catalogue(staged.heldout_dir / data.CATALOGUE_FILE)
    goals = load_goals(staged.heldout_dir / data.GOALS_FILE)[:LIMIT]
    env = SimWebShopEnv(products, goals)
    ref_prompts: list[str] = []

    def llm_fn(prompt: str) -> str:
        ref_prompts.append(prompt)
        return model(prompt)

    wins = 0
    for i in range(len(goals)):
        observation, _ = env.reset(session=i)
        wins += _reference_webshop_run(llm_fn, env, env.get_instruction_text(), observation)
    ref_score = 100.0 * wins / len(goals)

    backend = ModelBackend(reference.SYSTEM)
    result = WebShopTask(protocol=PROTOCOL_REFERENCE).evaluate(backend, staged.heldout_dir, limit=LIMIT)
    assert result.score == pytest.approx(ref_score) and result.n == LIMIT
    assert result.evaluator_version == "webshop-1+reference"
    assert sorted(backend.prompts) == sorted(reference.plain_prompt(p) for p in ref_prompts)  # byte for byte
    lower = [d for d in result.details if len(d["instruction"]) % 3 == 0]
    assert lower and all(d["invalid_actions"] >= 1 for d in lower)  # "action: click[…]" reached the shop

    corrected = WebShopTask(protocol=PROTOCOL_A2RL).evaluate(
        ModelBackend("You are a shopping assistant."), staged.heldout_dir, limit=LIMIT
    )
    assert corrected.evaluator_version == "webshop-1+a2rl"
    assert all(d["invalid_actions"] == 0 for d in corrected.details)
    # The reference loses exactly the goals a2rl wins whose answer is lower case (the shop refuses
    # `action: click[…]` until the step limit), whatever the goals are.
    won = [d["instruction"] for d in corrected.details if d["success"]]
    assert result.correct == sum(1 for instruction in won if len(instruction) % 3 != 0) < len(won)
    # The goals of this file's secret: a2rl 10 of 12 (2 wrong products), the reference 9.
    assert (round(result.score, 2), round(corrected.score, 2)) == (75.0, 83.33)


def test_history_pairs_each_action_with_the_page_after_it() -> None:
    assert reference.history_of(["a1", "a2"], ["p0", "p1"], "p2") == [("a1", "p1"), ("a2", "p2")]
    text = reference.prompt("buy x", [("a1", "p1")], "p1", "  click[x]")
    assert text.endswith("\nObservation 1: p1\nAction 1: a1\n\nObservation 2: p1\nAction 2:")
    assert reference.parse_action(" Action: choose[Buy Now]") == "click[Buy Now]"
    assert (
        reference.parse_action("action: click[x]") == "action: click[x]"
    )  # case-sensitive, as the reference


# --- the real environment: seeding and requirements ------------------------------------------


def _fake_webshop(monkeypatch: pytest.MonkeyPatch) -> str:
    """A stand-in `WebAgentTextEnv` with WebShop's seeding bug: goal prices drawn from the global
    `random` before `random.seed(233)`."""

    class WebAgentTextEnv:
        def __init__(self, observation_mode: str, num_products: int) -> None:
            self.prices = [round(random.uniform(10, 100), 2) for _ in range(5)]
            random.seed(233)
            random.shuffle(self.prices)

    module = types.ModuleType("fakeshop.envs.web_agent_text_env")
    module.WebAgentTextEnv = WebAgentTextEnv  # type: ignore[attr-defined]
    for name in ("fakeshop", "fakeshop.envs"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_real_envs_built_in_a_row_have_the_same_goals(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _fake_webshop(monkeypatch)
    random.seed(1)
    before = random.getstate()
    envs = [real.make_real_env(1000, module_name=name) for _ in range(4)]
    assert all(e.prices == envs[0].prices for e in envs)
    assert random.getstate() == before  # the caller's random state is left alone
    unseeded = [sys.modules[name].WebAgentTextEnv("text", 1000).prices for _ in range(2)]
    assert unseeded[0] != unseeded[1]  # the bug the seeding removes


def test_missing_requirements_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(A2rlError, match="Missing: the nosuchshop package"):
        real.make_real_env(1000, module_name="nosuchshop.envs.web_agent_text_env")
    pkg = tmp_path / "repo" / "fakeshop2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "repo"))
    missing = real.missing_requirements(1000, package="fakeshop2")
    assert any("items_shuffle_1000.json" in m for m in missing)
    assert any("search_engine/indexes_1k" in m for m in missing)
    (tmp_path / "repo" / "data").mkdir()
    for f in real.DATA_FILES:
        (tmp_path / "repo" / "data" / f).write_text("[]")
    (tmp_path / "repo" / "search_engine" / "indexes_1k").mkdir(parents=True)
    still = real.missing_requirements(1000, package="fakeshop2")
    assert not any("data" in m or "indexes" in m for m in still)
