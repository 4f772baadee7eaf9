"""WebShop data: the built-in shop or a shop from a directory, split into training goals for the
agent and held-out goals for evaluation.

The **goals** are what is held out, as in WebShop (its catalogue is shared by all goals). Our
split is stricter than WebShop's: held-out goals are written for *target products* that no
training goal targets (30 % of the products, chosen by the seed), and a training goal whose
instruction equals a held-out one (normalised) is dropped. In the built-in shop the held-out
targets are moreover secret: each of those 30 % is replaced, in the evaluator's catalogue only,
by a new product of the same family drawn from the held-out seed (a secret, `a2rl_tasks.staging`),
so the agent's catalogue, code and seed cannot enumerate the held-out goals (without this, the
~10,000 goals the generator can write for the public reserved products would hold them all), and
a held-out goal that would repeat a training instruction is drawn again (the training goals never
depend on the secret). The reference evaluated on goals 0-99 that its agent could also roll out
on; ours are disjoint by construction and checked by content at staging.

Artifacts:

- `train/`: `catalogue.json` (the shop), `goals.jsonl` (training goals with their target
  product, attributes, options and price bound), `trajectories.jsonl` (one expert demonstration
  per training goal, reward 1.0 each), `webshop_sim/` (the environment's and the prompt
  builder's source, the same code the evaluator runs);
- `heldout/`: `catalogue.json` (built-in shop: the agent's, with the reserved products replaced by
  the secret held-out targets), `goals.jsonl` (the held-out goals), `env.json`
  (`{"kind": "sim", "max_steps": 50}`).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl_tasks.webshop import generate
from a2rl_tasks.webshop.expert import expert_action
from a2rl_tasks.webshop.sim.catalogue import (
    CATALOGUE_FILE,
    GOALS_FILE,
    Goal,
    Product,
    load_catalogue,
    load_goals,
    save_catalogue,
    save_goals,
)
from a2rl_tasks.webshop.sim.env import SimWebShopEnv
from a2rl_tasks.webshop.sim.textmatch import normalise

BUILTIN = "builtin"
ENV_FILE = "env.json"
TRAJECTORIES_FILE = "trajectories.jsonl"
SIM_DIR = "webshop_sim"
MAX_STEPS = 50
N_HELDOUT = 100
HELDOUT_PRODUCT_FRACTION = 0.3
TRAIN_GOALS_PER_PRODUCT = 5
HELDOUT_GOALS_PER_PRODUCT = 3
EXPERT_MAX_STEPS = 20


@dataclass(frozen=True)
class Shop:
    #: The agent's catalogue.
    products: list[Product]
    train_goals: list[Goal]
    heldout_goals: list[Goal]
    #: The evaluator's catalogue, when it differs from the agent's (the built-in shop).
    heldout_products: list[Product] | None = None

    @property
    def eval_products(self) -> list[Product]:
        return self.products if self.heldout_products is None else self.heldout_products


def split_products(asins: list[str], seed: int, fraction: float = HELDOUT_PRODUCT_FRACTION) -> set[str]:
    """The target products reserved for held-out goals (at least one, never all)."""
    if len(asins) < 2:
        raise A2rlError("webshop needs goals for at least two different target products to split them")
    shuffled = sorted(set(asins))
    random.Random(f"webshop-split-{seed}").shuffle(shuffled)
    n = min(len(shuffled) - 1, max(1, round(len(shuffled) * fraction)))
    return set(shuffled[:n])


def _renumber(goals: list[Goal], prefix: str, width: int) -> list[Goal]:
    return [replace(g, id=f"{prefix}-{i:0{width}d}") for i, g in enumerate(goals, 1)]


def finish_split(
    train: list[Goal], heldout: list[Goal], n_heldout: int = N_HELDOUT
) -> tuple[list[Goal], list[Goal]]:
    """Cap the held-out goals, drop training goals that repeat a held-out instruction, renumber."""
    heldout = heldout[:n_heldout]
    held_texts = {normalise(g.instruction) for g in heldout}
    train = [g for g in train if normalise(g.instruction) not in held_texts]
    return _renumber(train, "webshop-train", 5), _renumber(heldout, "webshop-test", 4)


def builtin_shop(
    seed: int, per_family: int = 12, n_heldout: int = N_HELDOUT, heldout_seed: int | None = None
) -> Shop:
    """The agent's catalogue, the product split and the training goals come from `seed`; the
    held-out target products (replacing the reserved ones in the evaluator's catalogue) and goals
    from `heldout_seed` (default `seed`; staging passes one derived from a secret)."""
    products = generate.catalogue(seed, per_family)
    held_asins = split_products([p.asin for p in products], seed)
    held_seed = seed if heldout_seed is None else heldout_seed
    secret = generate.secret_products(
        held_seed, [p for p in products if p.asin in held_asins], {p.asin for p in products}
    )
    eval_products = [secret.get(p.asin, p) for p in products]
    train_rng = random.Random(f"webshop-goals-{seed}")
    held_rng = random.Random(f"webshop-heldout-goals-{held_seed}")
    train = [
        g for p in products if p.asin not in held_asins for g in _goals(train_rng, p, TRAIN_GOALS_PER_PRODUCT)
    ]
    # A held-out goal never repeats a training instruction: it is drawn again, so the public
    # training goals never depend on the secret (dropping a training goal would reveal its text).
    train_texts = frozenset(normalise(g.instruction) for g in train)
    heldout = [
        g
        for p in products
        if p.asin in held_asins
        for g in _goals(held_rng, secret[p.asin], HELDOUT_GOALS_PER_PRODUCT, train_texts)
    ]
    random.Random(f"webshop-order-{held_seed}").shuffle(heldout)
    train_goals, heldout_goals = finish_split(train, heldout, n_heldout)
    return Shop(products, train_goals, heldout_goals, eval_products)


def _goals(
    rng: random.Random, product: Product, want: int, taken: frozenset[str] = frozenset()
) -> list[Goal]:
    """Up to `want` goals for `product` with distinct instructions, none of them in `taken`."""
    seen: set[str] = set()
    out: list[Goal] = []
    for _ in range(want * 4):
        g = generate.goal_for(rng, product, "")
        text = normalise(g.instruction)
        if text not in seen and text not in taken:
            seen.add(text)
            out.append(g)
        if len(out) == want:
            break
    return out


def directory_shop(path: Path, seed: int, n_heldout: int = N_HELDOUT) -> Shop:
    """A shop in our format: `catalogue.json` (array of products) + `goals.jsonl`."""
    cat, goals_path = path / CATALOGUE_FILE, path / GOALS_FILE
    for f in (cat, goals_path):
        if not f.is_file():
            raise A2rlError(
                f"webshop source {path} lacks {f.name} (expected {CATALOGUE_FILE} + {GOALS_FILE})"
            )
    try:
        products = load_catalogue(cat)
        goals = load_goals(goals_path)
    except (ValueError, KeyError, TypeError) as exc:
        raise A2rlError(f"webshop source {path}: {type(exc).__name__}: {exc}") from exc
    known = {p.asin for p in products}
    unknown = sorted({g.asin for g in goals} - known)
    if unknown:
        raise A2rlError(f"webshop source {path}: goals target products not in the catalogue: {unknown[:3]}")
    held_asins = split_products([g.asin for g in goals], seed)
    train = [g for g in goals if g.asin not in held_asins]
    heldout = [g for g in goals if g.asin in held_asins]
    train_goals, heldout_goals = finish_split(train, heldout, n_heldout)
    return Shop(products, train_goals, heldout_goals)


def load_shop(source: str | None, seed: int, heldout_seed: int | None = None) -> Shop:
    """The built-in shop (held-out goals from `heldout_seed`) or a directory's (split by `seed`)."""
    if source is None or source.strip() in ("", BUILTIN):
        return builtin_shop(seed, heldout_seed=heldout_seed)
    path = Path(source).expanduser()
    if not path.is_dir():
        raise A2rlError(
            f"webshop source not found: {source} (use 'builtin', a directory with {CATALOGUE_FILE} + "
            f"{GOALS_FILE}, or 'webshop-real[:N]' where the real WebShop environment is installed)"
        )
    return directory_shop(path, seed)


def expert_trajectory(env: SimWebShopEnv, index: int) -> dict[str, Any]:
    obs, _ = env.reset(session=index)
    goal = env._goal()
    steps: list[dict[str, Any]] = []
    reward, done = 0.0, False
    while not done and len(steps) < EXPERT_MAX_STEPS:
        action = expert_action(env)
        steps.append({"observation": obs, "action": action})
        obs, reward, done, _ = env.step(action)
    return {"id": f"traj-{goal.id}", "goal_id": goal.id, "instruction": goal.instruction,
            "steps": steps, "reward": reward}  # fmt: skip


def copy_sim_source(dest: Path, prompt_module: str = "prompting.py") -> None:
    """The environment (`sim/`) and the evaluator's prompt builder (`prompt_module`, copied as
    `prompting.py`), standard library only."""
    here = Path(__file__).parent
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted((here / "sim").glob("*.py")):
        shutil.copyfile(f, dest / f.name)
    shutil.copyfile(here / prompt_module, dest / "prompting.py")


def write_shop(train_dir: Path, heldout_dir: Path, shop: Shop, *, reference: bool = False) -> None:
    """Both artifacts; `reference` (the reference protocol): no expert trajectories, and the
    reference's prompt builder beside the environment."""
    save_catalogue(train_dir / CATALOGUE_FILE, shop.products)
    save_goals(train_dir / GOALS_FILE, shop.train_goals)
    if not reference:
        env = SimWebShopEnv(shop.products, shop.train_goals)
        with (train_dir / TRAJECTORIES_FILE).open("w", encoding="utf-8") as f:
            for i in range(len(shop.train_goals)):
                f.write(json.dumps(expert_trajectory(env, i), ensure_ascii=False, sort_keys=True) + "\n")
    copy_sim_source(train_dir / SIM_DIR, "reference.py" if reference else "prompting.py")
    save_catalogue(heldout_dir / CATALOGUE_FILE, shop.eval_products)
    save_goals(heldout_dir / GOALS_FILE, shop.heldout_goals)
    (heldout_dir / ENV_FILE).write_text(json.dumps({"kind": "sim", "max_steps": MAX_STEPS}) + "\n")


def read_env_config(heldout_dir: Path) -> dict[str, Any]:
    path = heldout_dir / ENV_FILE
    if not path.is_file():
        raise A2rlError(f"held-out data not found: {path}")
    config: dict[str, Any] = json.loads(path.read_text())
    if config.get("kind") not in ("sim", "real"):
        raise A2rlError(f"{path}: unknown environment kind {config.get('kind')!r}")
    return config
