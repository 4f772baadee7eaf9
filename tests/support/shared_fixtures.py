"""Session-wide read-only fixtures: the default tiny model and the staged `arith` data.

Registered from the root conftest (`pytest_plugins`), so every tier can ask for them. Each is
built once per session into a tmp dir and made read-only (`make_read_only`) so no test can
change it for the others (as root, where chmod stops nothing, a changed tree fails the session's
teardown); a test that modifies a model copies it first (`writable_copy`).

`build_tiny_model` only skips a build when its `dest` already holds the same parameters (there
is no cache keyed by parameters under A2RL_CACHE_DIR; `builtin:tiny` resolves to one fixed cache
dir), so without these fixtures every module built its own copy.

Note: tree digests (`hash_tree`) include file modes, so the read-only model's digest differs from
a freshly built one's; compare digests of the fixture with digests of the fixture (or its copies).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from a2rl.store.cas import hash_tree
from a2rl.workspace import make_read_only, make_writable

if TYPE_CHECKING:
    from a2rl_tasks.base import StagedData

#: The tiny model's seed and the arith staging seed the tests use.
TINY_SEED = 0
ARITH_SEED = 0


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The default tiny model (`build_tiny_model(seed=0)`), read-only, shared by the session."""
    from a2rl.models.tiny import build_tiny_model

    dest = build_tiny_model(tmp_path_factory.mktemp("shared-tiny") / "tiny", seed=TINY_SEED)
    make_read_only(dest)
    digest = hash_tree(dest).digest
    yield dest
    try:
        _check_unchanged(dest, digest)
    finally:
        make_writable(dest)  # so pytest can clean its tmp dirs


@pytest.fixture(scope="session")
def staged_arith(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StagedData]:
    """The arith task's staged train + held-out dirs for seed 0, read-only, shared by the session."""
    from a2rl_tasks import get_task
    from a2rl_tasks.base import StagedData

    root = tmp_path_factory.mktemp("shared-arith")
    staged = StagedData(train_dir=root / "train", heldout_dir=root / "heldout")
    get_task("arith").stage(staged, seed=ARITH_SEED)
    make_read_only(root)
    digest = hash_tree(root).digest
    yield staged
    try:
        _check_unchanged(root, digest)
    finally:
        make_writable(root)


def _check_unchanged(root: Path, digest: str) -> None:
    # chmod does not stop root (CI containers often run as root): catch a change at teardown.
    if hash_tree(root).digest != digest:
        pytest.fail(f"a test changed the shared read-only tree {root}; copy it first (writable_copy)")


def writable_copy(src: Path, dest: Path) -> Path:
    """A copy of a shared (read-only) tree that the test may change; its modes are writable again.

    `dest` may already exist (e.g. an empty `models/tiny` from a workspace helper)."""
    shutil.copytree(src, dest, dirs_exist_ok=True)
    make_writable(dest)
    return dest
