"""webshop: reward, environment interface, batched episode loop, staging and split, offline replay."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from a2rl_cli import main
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import heldout_leaks, stage_artifacts
from a2rl_tasks.webshop import data, generate, real
from a2rl_tasks.webshop.expert import expert_action
from a2rl_tasks.webshop.generate import category
from a2rl_tasks.webshop.prompting import parse_reply, user_message
from a2rl_tasks.webshop.rollout import Slot, run_episodes
from a2rl_tasks.webshop.sim import Goal, Product, SimWebShopEnv, get_reward, load_catalogue, load_goals
from a2rl_tasks.webshop.sim.textmatch import normalise_color, token_set_ratio
from a2rl_tasks.webshop.task import summarise

from a2rl.errors import A2rlError
from a2rl.protocols import PROTOCOL_A2RL

SHOE = Product(
    asin="B0SHOE0001", title="Alder Lightweight Running Shoe - Non slip, Rubber sole", query="running shoes",
    product_category=category("Clothing", "Shoes", "Athletic", "Running"), price=45.0,
    attributes=["lightweight", "non slip", "rubber sole"],
    options={"color": ["black", "navy blue"], "size": ["9", "10"]},
    description="A breathable shoe with memory foam insole.", bullet_points=["Lightweight: made with care"],
)  # fmt: skip
CANDLE = Product(
    asin="B0CAND0001", title="Lumen Soy Wax Scented Candle - Hand poured", query="candles",
    product_category=category("Home & Kitchen", "Home Decor", "Candles"), price=12.0,
    attributes=["soy wax", "hand poured"], options={"scent": ["lavender", "vanilla"]},
)  # fmt: skip
SHOE2 = replace(
    SHOE, asin="B0SHOE0002", title="Kestrel Trail Running Shoe - Rubber sole", price=70.0,
    attributes=["rubber sole"], description="", bullet_points=[],
)  # fmt: skip
GOAL = Goal(
    id="g1", asin="B0SHOE0001", instruction="i need a lightweight running shoe with black color and 10 size, "
    "and price lower than 50.00 dollars", attributes=["lightweight", "memory foam insole"],
    goal_options={"color": "black", "size": "10"}, price_upper=50.0,
)  # fmt: skip


@pytest.mark.parametrize(
    ("a", "b", "high"),
    [("dark brown", "Dark  Brown", True), ("navy", "navy blue", True), ("red", "black", False),
     ("12 ounce (pack of 3)", "12 ounce pack of 3", True), ("size 10", "9", False), ("", "x", False)],
)  # fmt: skip
def test_token_set_ratio(a: str, b: str, high: bool) -> None:
    assert (token_set_ratio(a, b) > 85) is high


def test_colour_normalisation() -> None:
    assert normalise_color("Dark Navy Blue") == "navy blue"
    assert normalise_color("jet black") == "jet black"
    assert normalise_color("18 inch") == "18 inch"


@pytest.mark.parametrize(
    ("product", "options", "expected"),
    [
        (SHOE, {"color": "black", "size": "10"}, 1.0),  # attr 2/2 (one via description), options, price
        (SHOE, {"color": "navy blue", "size": "10"}, 4 / 5),
        (SHOE, {}, 3 / 5),
        (SHOE2, {"color": "black", "size": "10"}, 2 / 5),  # over budget, neither attribute
        (CANDLE, {"scent": "lavender"}, 0.0),  # another kind of product: no type word in common
    ],
)
def test_reward(product: Product, options: dict[str, str], expected: float) -> None:
    r = get_reward(product, SHOE, GOAL, options, product.price)
    assert r.reward == pytest.approx(expected)


def test_type_reward_levels() -> None:
    # Same family (query) → r_type 1; another family sharing few type words → lower.
    other = replace(CANDLE, title="Shoe Candle Holder", query="candles")
    r = get_reward(other, SHOE, GOAL, {}, 1.0)
    assert 0 < r.r_type < 1 and not r.query_match and not r.category_match


def _env(goals: list[Goal] | None = None) -> SimWebShopEnv:
    return SimWebShopEnv([SHOE, SHOE2, CANDLE], goals or [GOAL])


def test_env_interface_and_page_flow() -> None:
    env = _env()
    obs, info = env.reset(session=0)
    assert info is None and obs.startswith("WebShop [SEP] Instruction: [SEP] i need a lightweight")
    assert env.get_instruction_text() == GOAL.instruction
    assert env.get_available_actions() == {"has_search_bar": True, "clickables": ["search"]}
    obs, reward, done, info = env.step("search[running shoe lightweight]")
    assert (reward, done, info) == (0.0, False, {"valid": True})
    assert "Page 1 (Total results: 2)" in obs and "B0SHOE0001" in obs
    clickables = env.get_available_actions()["clickables"]
    assert clickables[0] == "back to search" and "b0shoe0001" in clickables
    assert env.get_available_actions()["has_search_bar"] is False
    env.step("click[B0SHOE0001]")  # case does not matter
    acts = env.get_available_actions()["clickables"]
    assert acts == ["back to search", "< prev", "black", "navy blue", "9", "10", "description", "features",
                    "reviews", "buy now"]  # fmt: skip
    obs, *_ = env.step("click[description]")
    assert obs.endswith("A breathable shoe with memory foam insole.")
    env.step("click[< prev]")
    env.step("click[black]")
    env.step("click[10]")
    obs, reward, done, info = env.step("click[buy now]")
    assert done and reward == 1.0 and info is not None and info["asin"] == "B0SHOE0001"
    assert info["options"] == {"color": "black", "size": "10"}
    assert env.get_available_actions() == {"has_search_bar": False, "clickables": []}
    # After the purchase nothing changes any more.
    assert env.step("click[buy now]")[1:3] == (0.0, True)


@pytest.mark.parametrize("action", ["click[buy now]", "search[]", "buy the shoe", "click[b0nothere00]", ""])
def test_invalid_actions_leave_the_page(action: str) -> None:
    env = _env()
    obs, _ = env.reset(session="g1")
    assert env.step(action) == (obs, 0.0, False, {"valid": False})


def test_search_is_only_on_the_search_page_and_results_paginate() -> None:
    products = generate.catalogue(0)
    goal = replace(GOAL, asin=products[0].asin)
    env = SimWebShopEnv(products, [goal])
    env.reset(0)
    obs, *_ = env.step("search[black white red color size]")
    assert "Total results: 50" in obs and "next >" in env.clickables()
    assert env.step("search[red]")[3] == {"valid": False}
    env.step("click[next >]")
    assert env.page_no == 2 and "< prev" in env.clickables()
    for _ in range(3):
        env.step("click[next >]")
    assert "next >" not in env.clickables()


def _expert(slots: list[Slot]) -> list[str]:
    return [expert_action(s.env) for s in slots]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return stage_artifacts(
        get_task("webshop", protocol=PROTOCOL_A2RL),
        source=None,
        root=tmp_path_factory.mktemp("ws") / "staged",
    )


def test_expert_solves_every_heldout_goal_in_one_batch(staged: Any) -> None:
    products = load_catalogue(staged.heldout_dir / "catalogue.json")
    goals = load_goals(staged.heldout_dir / "goals.jsonl")
    calls: list[int] = []

    def policy(slots: list[Slot]) -> list[str]:
        calls.append(len(slots))
        return _expert(slots)

    envs = [SimWebShopEnv(products, goals) for _ in range(10)]
    episodes = run_episodes(envs, [(g.id, i) for i, g in enumerate(goals)], policy, parse_reply, 50)
    assert [e.goal_id for e in episodes] == [g.id for g in goals]
    assert all(e.done and e.reward == 1.0 and e.invalid_actions == 0 for e in episodes)
    # 10 slots stepped together: every call but the last few carries 10 episodes.
    assert calls[0] == 10 and max(calls) == 10 and sum(calls) == sum(len(e.actions) for e in episodes)
    from a2rl_tasks.webshop.task import episode_record

    result = summarise([episode_record(e, None, None) for e in episodes], "v", 50)
    assert result.score == 100.0 and result.metrics["strict_success_rate"] == 100.0
    assert result.metrics["mean_reward"] == 1.0


def test_step_limit_and_errors_end_only_their_episode() -> None:
    class Broken(SimWebShopEnv):
        def step(self, action: str) -> Any:
            if self.goal is not None and self.goal.id == "g2":
                raise RuntimeError("server down")
            return super().step(action)

    goals = [GOAL, replace(GOAL, id="g2"), replace(GOAL, id="g3")]
    envs = [Broken([SHOE, SHOE2, CANDLE], goals) for _ in range(3)]
    episodes = run_episodes(
        envs, [(g.id, i) for i, g in enumerate(goals)], lambda s: ["click[nothing]"] * len(s), parse_reply, 4
    )
    assert [len(e.actions) for e in episodes] == [4, 1, 4]
    assert episodes[1].error == "step failed: RuntimeError: server down"
    assert episodes[0].invalid_actions == 4 and not episodes[0].done and episodes[0].reward == 0.0


@pytest.mark.parametrize(
    ("reply", "action"),
    [("Action: click[Buy Now]", "click[Buy Now]"), ("choose[black]", "click[black]"),
     ("  search[red shoes]  ", "search[red shoes]"), ("", "")],
)  # fmt: skip
def test_parse_reply(reply: str, action: str) -> None:
    assert parse_reply(reply) == action


def test_prompt_shows_actions_rules_and_last_five_steps() -> None:
    history = [(f"obs{i}", f"click[a{i}]") for i in range(7)]
    text = user_message(
        "buy x", "current page", {"has_search_bar": False, "clickables": ["buy now"]}, history, 50
    )
    actions = text.split("Available actions:\n", 1)[1].split("\n\n", 1)[0]
    assert actions == "click[buy now]"
    assert "obs1" not in text and "obs2" in text and "click[a6]" in text
    assert text.endswith("Current observation:\ncurrent page") and "after 50 actions" in text


def test_staged_split_is_disjoint_by_target_and_text(staged: Any) -> None:
    train = load_goals(staged.train_dir / "goals.jsonl")
    held = load_goals(staged.heldout_dir / "goals.jsonl")
    assert len(held) == data.N_HELDOUT and len(train) > 300
    assert not {g.asin for g in train} & {g.asin for g in held}
    assert not {g.instruction for g in train} & {g.instruction for g in held}
    assert heldout_leaks(staged.train_dir, staged.heldout_dir) == []
    trajs = [json.loads(x) for x in (staged.train_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == len(train) and all(t["reward"] == 1.0 for t in trajs)
    assert json.loads((staged.heldout_dir / "env.json").read_text()) == {"kind": "sim", "max_steps": 50}


def test_staging_is_deterministic_per_seed() -> None:
    a, b, c = data.builtin_shop(0), data.builtin_shop(0), data.builtin_shop(1)
    assert a == b
    assert [g.instruction for g in a.heldout_goals] != [g.instruction for g in c.heldout_goals]


def test_shipped_environment_runs_without_a2rl(staged: Any, tmp_path: Path) -> None:
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from webshop_sim import SimWebShopEnv, load_catalogue, load_goals; "
        "from webshop_sim.prompting import user_message; "
        "d = sys.argv[1]; "
        "env = SimWebShopEnv(load_catalogue(d + '/catalogue.json'), load_goals(d + '/goals.jsonl')); "
        "obs, _ = env.reset(session=0); print(env.step('search[coffee]')[3]['valid'])"
    )
    # -S -I: no site-packages, so nothing of a2rl can be imported.
    out = subprocess.run(
        ["python3", "-S", "-I", "-c", script, str(staged.train_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"


def _write_source(root: Path, products: list[Product], goals: list[Goal]) -> Path:
    root.mkdir(parents=True)
    (root / "catalogue.json").write_text(json.dumps([p.to_dict() for p in products]))
    (root / "goals.jsonl").write_text("".join(json.dumps(g.to_dict()) + "\n" for g in goals))
    return root


def test_directory_source(tmp_path: Path) -> None:
    products = generate.catalogue(3, per_family=2)
    import random

    rng = random.Random(0)
    goals = [generate.goal_for(rng, p, f"src-{i}") for i, p in enumerate(products)]
    src = _write_source(tmp_path / "src", products, goals)
    st = stage_artifacts(get_task("webshop", protocol=PROTOCOL_A2RL), source=str(src), root=tmp_path / "out")
    train, held = load_goals(st.train_dir / "goals.jsonl"), load_goals(st.heldout_dir / "goals.jsonl")
    assert len(train) + len(held) == len(goals) and len(held) == round(len(products) * 0.3)
    assert not {g.asin for g in train} & {g.asin for g in held}


def test_directory_source_errors(tmp_path: Path) -> None:
    with pytest.raises(A2rlError, match=r"lacks goals\.jsonl"):
        (tmp_path / "a").mkdir()
        (tmp_path / "a" / "catalogue.json").write_text("[]")
        data.load_shop(str(tmp_path / "a"), 0)
    bad = _write_source(tmp_path / "b", [SHOE, CANDLE], [replace(GOAL, asin="B0UNKNOWN1")])
    with pytest.raises(A2rlError, match="not in the catalogue"):
        data.load_shop(str(bad), 0)
    with pytest.raises(A2rlError, match="at least two different target products"):
        data.load_shop(str(_write_source(tmp_path / "c", [SHOE], [GOAL])), 0)
    with pytest.raises(A2rlError, match="webshop source not found"):
        data.load_shop(str(tmp_path / "nope"), 0)


def test_real_environment_hook() -> None:
    assert real.is_real_source("webshop-real") and real.is_real_source("webshop-real:100")
    assert not real.is_real_source("builtin") and not real.is_real_source(None)
    assert real.num_products("webshop-real") == 1000 and real.num_products("webshop-real:50") == 50
    with pytest.raises(A2rlError, match="NUM_PRODUCTS"):
        real.num_products("webshop-real:x")
    goals = [{"instruction_text": f"instruction number {i}", "asin": f"A{i}", "attributes": ["x"],
              "goal_options": ["red"], "price_upper": 10.0} for i in range(1600)]  # fmt: skip
    goals[1550]["instruction_text"] = "Instruction  number 3"  # repeats a held-out goal
    train, held = real.split_real_goals(goals)
    assert [h["session"] for h in held] == list(range(100))
    assert [t["session"] for t in train] == [i for i in range(1500, 1600) if i != 1550]
    try:
        import web_agent_site  # noqa: F401
    except ImportError:
        with pytest.raises(A2rlError, match="not installed"):
            real.make_real_env(10)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_offline_replay_scoring(staged: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    products = load_catalogue(staged.heldout_dir / "catalogue.json")
    goals = load_goals(staged.heldout_dir / "goals.jsonl")[:4]
    env = SimWebShopEnv(products, goals)
    preds = []
    for i, g in enumerate(goals):
        env.reset(i)
        replies: list[str] = []
        while not env.done:
            replies.append(expert_action(env))
            env.step(replies[-1])
        if i == 1:  # buy without choosing options: the options do not match
            replies = [r for r in replies if r.startswith("search") or "b0" in r] + ["click[buy now]"]
        if i == 2:
            replies = ["Action: search[nothing useful]", "junk"]
        preds.append({"id": g.id, "prediction": "\n".join(replies)})
    pred_file = tmp_path / "preds.jsonl"
    pred_file.write_text("".join(json.dumps(p) + "\n" for p in preds[:3]))
    refs = tmp_path / "refs"
    refs.mkdir()
    (refs / "catalogue.json").write_bytes((staged.heldout_dir / "catalogue.json").read_bytes())
    (refs / "goals.jsonl").write_text("".join(json.dumps(g.to_dict()) + "\n" for g in goals))
    code, out, _ = _cli(capsys, "tasks", "score", "webshop", "--protocol", "a2rl",
                        "--predictions", str(pred_file),
                        "--references", str(refs / "goals.jsonl"), "--json")  # fmt: skip
    assert code == 0
    res = json.loads(out)
    n_opts = len(goals[1].goal_options)
    partial = (len(goals[1].attributes) + 1) / (len(goals[1].attributes) + n_opts + 1)
    assert res["n"] == 4 and res["metrics"]["missing"] == 1
    assert res["metrics"]["mean_reward"] == pytest.approx((1.0 + partial) / 4, abs=1e-4)
    assert res["correct"] == 1 + (partial >= 0.5)
    assert res["metrics"]["strict_success_rate"] == 25.0
    # The held-out directory works as references too.
    code, out2, _ = _cli(capsys, "tasks", "score", "webshop", "--protocol", "a2rl",
                        "--predictions", str(pred_file),
                         "--references", str(refs), "--json")  # fmt: skip
    assert code == 0 and json.loads(out2) == res
    (refs / "catalogue.json").unlink()
    code, _, err = _cli(capsys, "tasks", "score", "webshop", "--protocol", "a2rl",
                        "--predictions", str(pred_file),
                        "--references", str(refs / "goals.jsonl"))  # fmt: skip
    assert code == 2 and "needs" in err and "catalogue.json" in err
