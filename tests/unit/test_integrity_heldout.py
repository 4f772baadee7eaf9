"""Generated held-out sets come from a secret seed, not the public `SEED`.

The attack: the agent regenerated `arith`'s held-out set from the public code and `SEED`. Staging
now derives the held-out generation seed from a secret (this machine's `<cache>/keys/heldout-seed`,
or the file `A2RL_HELDOUT_SECRET_FILE` / `--heldout-secret-file` names); the train split still
comes from the public seed alone, and the staging cache directory changes with the secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
from math import prod
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.alfworld import catalog, generator
from a2rl_tasks.arith.data import content_space, generate
from a2rl_tasks.common.jsonl import read_jsonl
from a2rl_tasks.staging import cached_dir, heldout_seed, stage_cached
from a2rl_tasks.webshop import data as webshop_data
from a2rl_tasks.webshop.sim.catalogue import Product, load_catalogue, load_goals

from a2rl.launch import a2rl_argv
from a2rl.local_keys import HELDOUT_SEED_KEY, keys_dir

SEED = 0
EQUATION = re.compile(r"^(\d+) ([+-]) (\d+) = ")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("A2RL_CACHE_DIR", str(path))
    monkeypatch.delenv("A2RL_HELDOUT_SECRET_FILE", raising=False)
    return path


def _questions(rows: list[dict[str, object]]) -> set[object]:
    return {r["question"] for r in rows}


def test_arith_heldout_is_not_what_public_code_and_seed_regenerate(cache_dir: Path) -> None:
    staged = stage_cached("arith", seed=SEED)
    public_train, public_heldout = generate(SEED)  # what the agent can compute
    train = read_jsonl(staged.train_dir / "train.jsonl")
    heldout = read_jsonl(staged.heldout_dir / "heldout.jsonl")
    assert train == public_train  # the train split is the public seed's, unchanged
    assert len(heldout) == len(public_heldout)
    assert heldout != public_heldout
    # Not the same items in another order either: most held-out questions are new to the agent.
    assert len(_questions(heldout) & _questions(public_heldout)) < len(heldout) // 4
    # Still disjoint from train by content (numbers and operation).
    train_contents = {tuple(EQUATION.match(str(r["answer"])).groups()) for r in train}  # type: ignore[union-attr]
    assert not {(str(r["a"]), r["op"], str(r["b"])) for r in heldout} & train_contents
    # The machine-local secret: 0600 in a 0700 directory; the derived seed is written nowhere.
    secret_file = keys_dir() / HELDOUT_SEED_KEY
    assert (
        stat.S_IMODE(secret_file.stat().st_mode) == 0o600 and stat.S_IMODE(keys_dir().stat().st_mode) == 0o700
    )
    derived = heldout_seed(get_task("arith"), SEED)
    assert derived is not None
    for path in staged.train_dir.parent.rglob("*"):
        if path.is_file():
            assert str(derived) not in path.read_text()


def test_another_secret_gives_another_heldout_and_cache_dir(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = get_task("arith")
    mine = stage_cached(task, seed=SEED)
    other_secret = tmp_path / "cluster-secret"
    other_secret.write_text("ab" * 32 + "\n")
    monkeypatch.setenv("A2RL_HELDOUT_SECRET_FILE", str(other_secret))
    assert cached_dir(task, SEED) != mine.train_dir.parent  # the staging cache key follows the secret
    theirs = stage_cached(task, seed=SEED)
    assert (theirs.train_dir / "train.jsonl").read_bytes() == (mine.train_dir / "train.jsonl").read_bytes()
    assert (theirs.heldout_dir / "heldout.jsonl").read_bytes() != (
        mine.heldout_dir / "heldout.jsonl"
    ).read_bytes()
    # Tasks that do not generate a held-out split are not affected.
    assert heldout_seed(get_task("gsm8k"), SEED) is None


def test_data_stage_cli_takes_a_secret_file(cache_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("cd" * 32)
    env = {**os.environ, "A2RL_CACHE_DIR": str(cache_dir)}
    env.pop("A2RL_HELDOUT_SECRET_FILE", None)

    def stage(out: Path, *extra: str) -> dict[str, dict[str, object]]:
        proc = subprocess.run(
            [*a2rl_argv(), "data", "stage", "arith", "--out", str(out), "--json", *extra],
            env=env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return json.loads(proc.stdout)

    with_file = stage(tmp_path / "a", "--heldout-secret-file", str(secret))
    machine = stage(tmp_path / "b")
    assert with_file["train"]["digest"] == machine["train"]["digest"]
    assert with_file["heldout"]["digest"] != machine["heldout"]["digest"]
    manifest = json.loads((tmp_path / "a" / "heldout" / "manifest.json").read_text())
    assert manifest["seed"] == SEED  # the public seed only


def test_webshop_builtin_heldout_goals_follow_the_secret_seed() -> None:
    public = webshop_data.builtin_shop(SEED)
    secret = webshop_data.builtin_shop(SEED, heldout_seed=123456789)
    # The agent's catalogue, the product split and the training goals are public (no secret in them).
    assert public.products == secret.products and public.train_goals == secret.train_goals
    # The held-out targets are in the evaluator's catalogue only.
    assert {g.asin for g in secret.heldout_goals} <= {p.asin for p in secret.eval_products}
    assert not {g.asin for g in secret.heldout_goals} & {p.asin for p in secret.products}
    assert [g.instruction for g in public.heldout_goals] != [g.instruction for g in secret.heldout_goals]
    held_public = {g.instruction for g in public.heldout_goals}
    assert len(held_public & {g.instruction for g in secret.heldout_goals}) < len(held_public) // 2


def _file_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# The train split is the public seed's alone (webshop redraws a held-out goal that would repeat a
# training instruction instead of dropping the training goal).
@pytest.mark.parametrize("task_name", ["arith", "webshop"])
def test_two_machines_stage_different_heldout_sets(
    task_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each machine's first staging makes its own secret (`<cache>/keys/heldout-seed`): the held-out
    set differs from machine to machine (so a test's expected figures must come from a secret the
    test fixes itself: tests/conftest.py, `TEST_HELDOUT_SECRET`)."""
    monkeypatch.delenv("A2RL_HELDOUT_SECRET_FILE", raising=False)
    staged = {}
    for machine in ("machine-a", "machine-b"):
        monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path / machine))
        staged[machine] = stage_cached(task_name, seed=SEED)
        assert (keys_dir() / HELDOUT_SEED_KEY).is_file()
    a, b = staged["machine-a"], staged["machine-b"]
    assert _file_digests(a.train_dir) == _file_digests(b.train_dir)
    assert _file_digests(a.heldout_dir).keys() == _file_digests(b.heldout_dir).keys()
    assert _file_digests(a.heldout_dir) != _file_digests(b.heldout_dir)


# --- held-out sets that public code cannot enumerate ------------------------------------------
#
# The attack (issue 17): every secret `arith` held-out item lay in a 1,000-content reserve that the
# agent computed from the public code and SEED, so it could train on the whole reserve. Each test
# below runs what the agent can run — the public generators with SEED, the default held-out seed
# and guessed ones, and enumerations of what public code generates — and measures how much of
# the real held-out set (staged with the secret) it covers. `arith`'s two-digit space (the one a
# tiny model learns on a CPU) is enumerable whole, so there the measure is how small a set the
# agent can narrow the held-out split to, and whether its guesses cover more than chance.

#: Held-out seeds an agent would try: the public default (SEED) and small integers.
GUESSED_SEEDS = (SEED, *range(1, 20), 42, 1234, 2**31 - 1)


def _arith_content(row: dict[str, object]) -> tuple[int, str, int]:
    m = EQUATION.match(str(row["answer"]))
    assert m, row
    return int(m[1]), m[2], int(m[3])


def test_arith_heldout_cannot_be_narrowed_below_the_unseen_half_of_its_space(cache_dir: Path) -> None:
    staged = stage_cached("arith", seed=SEED)
    real = {_arith_content(r) for r in read_jsonl(staged.heldout_dir / "heldout.jsonl")}
    seen = {_arith_content(r) for r in read_jsonl(staged.train_dir / "train.jsonl")}
    space = {(c.a, c.op, c.b) for c in content_space()}
    # The agent's narrowest computable candidates: every content its train split does not show
    # (before: a 1,000-content reserve holding all 500 held-out contents). It is the task's
    # unseen half; the secret held-out set is spread over it, not gathered in a corner.
    unseen = space - seen
    assert real <= unseen
    assert len(unseen) >= 15 * len(real) and len(unseen) >= 0.45 * len(space)
    # The public generators with guessed held-out seeds: what they produce covers the real set
    # at the rate of a random subset of the unseen contents of that size (per operation: half the
    # held-out items are of each), no better.
    guessed: set[tuple[int, str, int]] = set()
    for guess in GUESSED_SEEDS[:8]:
        guessed |= {_arith_content(r) for r in generate(SEED, n_train=0, heldout_seed=guess)[1]}
    assert guessed <= unseen
    for op in ("+", "-"):
        real_op, guessed_op = {c for c in real if c[1] == op}, {c for c in guessed if c[1] == op}
        chance = len(guessed_op) / len({c for c in unseen if c[1] == op})
        covered = len(real_op & guessed_op) / len(real_op)
        assert covered <= chance + 0.1, (op, covered, chance)


def test_webshop_heldout_targets_cannot_be_enumerated_from_public_code_and_seed(cache_dir: Path) -> None:
    staged = stage_cached("webshop", seed=SEED)
    real = load_goals(staged.heldout_dir / "goals.jsonl")
    agent_catalogue = load_catalogue(staged.train_dir / "catalogue.json")
    eval_catalogue = {p.asin: p for p in load_catalogue(staged.heldout_dir / "catalogue.json")}
    targets = [eval_catalogue[g.asin] for g in real]
    # What the agent can compute: its catalogue (every goal the generator writes — ~10,000 for the
    # reserved products alone — targets one of these), and the shop under guessed held-out seeds.
    computed = list(agent_catalogue)
    for guess in GUESSED_SEEDS:
        computed += webshop_data.builtin_shop(SEED, heldout_seed=guess).eval_products

    def content(p: Product) -> tuple[str, float, tuple[str, ...]]:
        return p.title, p.price, tuple(p.attributes)

    assert not {p.asin for p in targets} & {p.asin for p in computed}
    assert not {content(p) for p in targets} & {content(p) for p in computed}
    # Same shop size for the evaluator, the reserved products replaced by the secret targets.
    assert len(eval_catalogue) == len(agent_catalogue)


def test_alfworld_unseen_rooms_cannot_be_enumerated_from_public_code_and_seed() -> None:
    secret_seed = heldout_seed(get_task("alfworld"), SEED, bytes.fromhex("5e" * 32))
    assert secret_seed is not None
    for room in catalog.ROOM_RECEPTACLES:
        real = {s.signature for s in generator.unseen_scenes(room, secret_seed)}
        seen = {s.signature for s in generator.train_scenes(room)}
        assert len(real) == generator.UNSEEN_SCENES and not real & seen
        # The agent's guesses: the public default pool and the pools of the guessed seeds.
        computed = {s.signature for s in generator.unseen_scenes(room)}
        for guess in GUESSED_SEEDS[:5]:
            computed |= {s.signature for s in generator.unseen_scenes(room, guess)}
        assert len(real & computed) <= 2, room
        layouts = prod(hi - lo + 1 for lo, hi in catalog.ROOM_RECEPTACLES[room].values())
        assert layouts >= 200 * generator.UNSEEN_SCENES
    # A held-out game drawn with the secret is played in one of the secret's unseen rooms.
    game = generator.generate_game(
        generator.game_key(secret_seed, "heldout", "pick_and_place_simple", 0), "pick_and_place_simple",
        "heldout", secret_seed,
    )  # fmt: skip
    assert game.scene in generator.unseen_scenes(game.scene.room, secret_seed)


def test_tasks_without_generated_heldout_sets_take_them_from_their_source() -> None:
    # deepsearchqa and alpacaeval have no built-in data: their held-out rows come from the source
    # (the published benchmark), never from code or the workspace, and no held-out seed is used.
    for name in ("deepsearchqa", "alpacaeval", "gsm8k", "humaneval"):
        assert not get_task(name).secret_heldout and heldout_seed(get_task(name), SEED) is None
