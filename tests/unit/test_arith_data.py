"""`arith` data: deterministic, content-disjoint splits, staging and the staging cache."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.arith.data import N_HELDOUT, N_TRAIN, generate
from a2rl_tasks.base import StagedData
from a2rl_tasks.common.jsonl import read_jsonl
from a2rl_tasks.staging import stage_cached

EQUATION = re.compile(r"^(\d+) ([+-]) (\d+) = (-?\d+)\n#### (-?\d+)$")


def _content(row: dict[str, object]) -> tuple[int, str, int]:
    """(a, op, b) read back from the answer text, and a check that the answer is right."""
    m = EQUATION.match(str(row["answer"]))
    assert m, row
    a, op, b, c, final = int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5])
    assert c == final == (a + b if op == "+" else a - b)
    assert str(a) in str(row["question"]) and str(b) in str(row["question"])
    return a, op, b


@pytest.fixture(scope="module")
def staged(staged_arith: StagedData) -> StagedData:
    return staged_arith


def test_split_sizes_and_formats(staged: StagedData) -> None:
    train = read_jsonl(staged.train_dir / "train.jsonl")
    heldout = read_jsonl(staged.heldout_dir / "heldout.jsonl")
    assert len(train) == N_TRAIN and len(heldout) == N_HELDOUT
    assert set(train[0]) == {"id", "question", "answer"}
    assert train[0]["id"] == "arith-train-000001"
    assert len({r["id"] for r in train}) == len(train)
    ops = [_content(r)[1] for r in heldout]
    assert ops.count("+") == ops.count("-") == N_HELDOUT // 2
    assert all(_content(r)[0] - (_content(r)[2] if _content(r)[1] == "-" else 0) >= 0 for r in train[:2000])


def test_heldout_disjoint_from_train_by_content(staged: StagedData) -> None:
    train = {_content(r) for r in read_jsonl(staged.train_dir / "train.jsonl")}
    heldout = [_content(r) for r in read_jsonl(staged.heldout_dir / "heldout.jsonl")]
    assert len(set(heldout)) == len(heldout)
    assert not train & set(heldout)
    # No question text of the held-out split appears in train either.
    train_q = {r["question"] for r in read_jsonl(staged.train_dir / "train.jsonl")}
    assert not train_q & {r["question"] for r in read_jsonl(staged.heldout_dir / "heldout.jsonl")}


def test_generation_is_deterministic_per_seed() -> None:
    a_train, a_held = generate(seed=7, n_train=300, n_heldout=40)
    b_train, b_held = generate(seed=7, n_train=300, n_heldout=40)
    _, c_held = generate(seed=8, n_train=300, n_heldout=40)
    assert (a_train, a_held) == (b_train, b_held)
    assert [r["answer"] for r in a_held] != [r["answer"] for r in c_held]


def test_both_phrasings_present(staged: StagedData) -> None:
    heldout = read_jsonl(staged.heldout_dir / "heldout.jsonl")
    styles = {r["style"] for r in heldout}
    assert styles == {"plain", "word"}
    assert any(r["question"].startswith("What is") for r in heldout)


def test_stage_cached_once_and_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path))
    first = stage_cached("arith", seed=0)
    # <data version>-seed<seed>-h<tag of this machine's held-out secret> (a2rl_tasks.staging)
    assert first.train_dir.parent.parent == tmp_path / "data" / "arith"
    version = get_task("arith").data_version
    assert first.train_dir.parent.name.startswith(f"{version}-seed0-h") and first.train_dir.name == "train"
    train_file = first.train_dir / "train.jsonl"
    mtime = train_file.stat().st_mtime_ns
    second = stage_cached(get_task("arith"), seed=0)
    assert second == first and train_file.stat().st_mtime_ns == mtime
    assert json.loads(train_file.read_text().splitlines()[0])["id"] == "arith-train-000001"
    assert [p.name for p in (tmp_path / "data" / "arith").iterdir()] == [first.train_dir.parent.name]


def test_arith_refuses_a_data_source(tmp_path: Path) -> None:
    from a2rl.errors import A2rlError

    with pytest.raises(A2rlError, match="takes no data source"):
        get_task("arith").stage(StagedData(tmp_path / "t", tmp_path / "h"), source="hf:x")
