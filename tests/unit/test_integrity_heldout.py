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
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.arith.data import generate
from a2rl_tasks.common.jsonl import read_jsonl
from a2rl_tasks.staging import cached_dir, heldout_seed, stage_cached
from a2rl_tasks.webshop import data as webshop_data

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
    assert public.products == secret.products  # the catalogue and the product split are public
    assert {g.asin for g in public.heldout_goals} <= {p.asin for p in public.products}
    assert [g.instruction for g in public.heldout_goals] != [g.instruction for g in secret.heldout_goals]
    held_public = {g.instruction for g in public.heldout_goals}
    assert len(held_public & {g.instruction for g in secret.heldout_goals}) < len(held_public) // 2


def _file_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# webshop's train goals drop instructions that a held-out goal has (`data.finish_split`), so its
# train split is the same everywhere only up to those.
@pytest.mark.parametrize(("task_name", "same_train"), [("arith", True), ("webshop", False)])
def test_two_machines_stage_different_heldout_sets(
    task_name: str, same_train: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
    if same_train:
        assert _file_digests(a.train_dir) == _file_digests(b.train_dir)
    assert _file_digests(a.heldout_dir).keys() == _file_digests(b.heldout_dir).keys()
    assert _file_digests(a.heldout_dir) != _file_digests(b.heldout_dir)
