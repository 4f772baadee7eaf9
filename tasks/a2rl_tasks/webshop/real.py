"""Hook for the real WebShop environment (princeton-nlp/webshop), used when it is installed.

The real environment is not a PyPI package: it needs the repository's `web_agent_site` package,
its product files and a Pyserini search index (Java 11). Where those exist (an eval image built
for it), `a2rl data stage webshop --source webshop-real[:NUM_PRODUCTS]` stages from it:

- WebShop's own goal split is kept: goals 0-499 are its test goals, 1500+ its training goals;
  the held-out artifact lists the first `N_HELDOUT` test goals (session index + instruction),
  the training artifact the training goals with their target, attributes, options and price;
- `env.json` says `{"kind": "real", "num_products": N, "max_steps": 50, "parallel_envs": P}`,
  and the evaluator then builds `WebAgentTextEnv(observation_mode="text", num_products=N)`
  (P instances stepped in one batch) instead of the small simulated shop.

Seeding (both protocols): WebShop draws product prices and each goal's price bound
(`… price lower than X dollars`) from the global `random` *before* its own `random.seed(233)`,
so in the reference every environment built in a process reads differently (4 built in a row
give different instructions). `make_real_env` seeds the global `random` with
`GOAL_PRICE_SEED` just before building each environment (and restores the caller's state), so
every environment — the evaluator's pool, a re-run, the agent's copy — has the same goals.

What the real environment needs (`missing_requirements` names what is absent; the evaluator and
the agent's sandbox both need it): the `web_agent_site` package (princeton-nlp/webshop on the
Python path), its `data/items_shuffle_1000.json`, `data/items_ins_v2_1000.json` and
`data/items_human_ins.json`, the Pyserini index `search_engine/indexes_1k` (for 1,000 products;
`indexes_100`, `indexes_100k`, `indexes` for 100, 100,000 or all), Java 11 (`java` on PATH),
`pyserini` 0.17, spaCy's `en_core_web_sm`, and `flask` 2.2.5 / `Werkzeug` 2.2.3 / `gym` 0.24.

Nothing here runs on this project's CI (the environment cannot be installed there); the split,
the seeding and the requirement check are tested with a stand-in module.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import random
import shutil
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl_tasks.common.jsonl import write_jsonl

REAL_SOURCE = "webshop-real"
DEFAULT_NUM_PRODUCTS = 1000
TEST_GOALS = range(0, 500)
FIRST_TRAIN_GOAL = 1500
N_HELDOUT = 100
PARALLEL_ENVS = 4
ENV_MODULE = "web_agent_site.envs.web_agent_text_env"
PACKAGE = "web_agent_site"
#: Seeds the global `random` before each environment is built (module docstring).
GOAL_PRICE_SEED = 233
DATA_FILES = ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json")
INDEX_DIRS = {100: "indexes_100", 1000: "indexes_1k", 100000: "indexes_100k"}
#: (module, what to install) for the Python packages the environment imports.
MODULES = (
    ("pyserini", "pyserini 0.17 (pip install pyserini==0.17.0)"),
    ("en_core_web_sm", "spaCy's en_core_web_sm (python -m spacy download en_core_web_sm)"),
    ("flask", "flask 2.2.5 (pip install flask==2.2.5 Werkzeug==2.2.3)"),
    ("gym", "gym 0.24 (pip install gym==0.24.0)"),
)
NOT_INSTALLED = (
    "the real WebShop environment is not installed (no module web_agent_site): install "
    "princeton-nlp/webshop with its data and search index in the evaluation image, or stage the "
    "built-in shop (--source builtin)"
)


def package_root(package: str = PACKAGE) -> Path | None:
    """The WebShop repository (the directory holding `web_agent_site/`), None when not importable."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]).parent if locations else None


def missing_requirements(n_products: int = DEFAULT_NUM_PRODUCTS, package: str = PACKAGE) -> list[str]:
    """What the real environment lacks here, each with how to get it (empty: all there)."""
    root = package_root(package)
    if root is None:
        return [f"the {package} package (git clone princeton-nlp/webshop and put it on the Python path)"]
    missing = [
        f"{root / 'data' / name} (the WebShop product/instruction files, setup.sh downloads them)"
        for name in DATA_FILES
        if not (root / "data" / name).is_file()
    ]
    index = root / "search_engine" / INDEX_DIRS.get(n_products, "indexes")
    if not index.is_dir():
        missing.append(f"{index} (build it with search_engine/run_indexing.sh)")
    if shutil.which("java") is None:
        missing.append("Java 11 (java on PATH, for pyserini)")
    missing += [what for module, what in MODULES if importlib.util.find_spec(module) is None]
    return missing


def is_real_source(source: str | None) -> bool:
    return source is not None and (source == REAL_SOURCE or source.startswith(REAL_SOURCE + ":"))


def num_products(source: str) -> int:
    _, _, n = source.partition(":")
    if not n:
        return DEFAULT_NUM_PRODUCTS
    if not n.isdigit() or int(n) < 1:
        raise A2rlError(f"bad webshop source {source!r}: expected {REAL_SOURCE}[:NUM_PRODUCTS]")
    return int(n)


def make_real_env(n_products: int, module_name: str = ENV_MODULE) -> Any:
    """A `WebAgentTextEnv` with the goals every other one has (the global `random` seeded with
    `GOAL_PRICE_SEED` while it is built); a clear error naming what is missing otherwise."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = missing_requirements(n_products, module_name.split(".", 1)[0])
        detail = "; ".join(missing) if missing else f"{type(exc).__name__}: {exc}"
        raise A2rlError(f"{NOT_INSTALLED}. Missing: {detail}") from exc
    state = random.getstate()
    random.seed(GOAL_PRICE_SEED)
    try:
        return module.WebAgentTextEnv(observation_mode="text", num_products=n_products)
    finally:
        random.setstate(state)


def split_real_goals(
    goals: list[dict[str, Any]], n_heldout: int = N_HELDOUT
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, held-out rows) from WebShop's goal list, by its own index split."""
    held: list[dict[str, Any]] = [
        {"id": f"webshop-test-{i:04d}", "session": i, "instruction": str(goals[i]["instruction_text"])}
        for i in TEST_GOALS
        if i < len(goals)
    ][:n_heldout]
    held_texts = {" ".join(str(r["instruction"]).lower().split()) for r in held}
    train: list[dict[str, Any]] = []
    for i in range(FIRST_TRAIN_GOAL, len(goals)):
        g = goals[i]
        text = str(g["instruction_text"])
        if " ".join(text.lower().split()) in held_texts:
            continue
        options = g.get("goal_options", {})
        train.append({
            "id": f"webshop-train-{i:05d}", "session": i, "instruction": text, "asin": g.get("asin"),
            "attributes": list(g.get("attributes", [])),
            "goal_options": dict(options) if isinstance(options, dict) else list(options),
            "price_upper": g.get("price_upper"),
        })  # fmt: skip
    if not held or not train:
        raise A2rlError(f"the real WebShop environment has only {len(goals)} goals: too few to split")
    return train, held


def stage_real(train_dir: Path, heldout_dir: Path, source: str) -> None:
    n = num_products(source)
    env = make_real_env(n)
    goals = getattr(getattr(env, "server", None), "goals", None)
    if not isinstance(goals, list):
        raise A2rlError("the installed WebShop environment exposes no goal list (env.server.goals)")
    train, held = split_real_goals(goals)
    write_jsonl(train_dir / "goals.jsonl", train)
    write_jsonl(heldout_dir / "goals.jsonl", held)
    (heldout_dir / "env.json").write_text(
        json.dumps({"kind": "real", "num_products": n, "max_steps": 50, "parallel_envs": PARALLEL_ENVS})
        + "\n"
    )
