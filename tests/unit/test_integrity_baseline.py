"""The baseline cache a run cannot poison: entries hold no gold answers, carry a MAC under a
machine-local key, are keyed by the held-out data's digest, and a poisoned entry is never used.

Real model (the tiny one), real store, real eval processes (`a2rl eval baseline`, started by the
runner's `_baseline`); A2RL_CACHE_DIR points at a throw-away directory so the machine-local key
is this test's.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any, cast

import pytest
from a2rl_grader.baseline import baseline_cache_key, evaluate_baseline
from a2rl_grader.evaluate import EvalOptions
from a2rl_runner.run import _baseline, _Prepared
from a2rl_tasks import get_task
from a2rl_tasks.base import StagedData

from a2rl import integrity
from a2rl.api.benchrun import BenchRun
from a2rl.local_keys import BASELINE_CACHE_KEY, keys_dir, machine_key
from a2rl.records.result import checked_result
from a2rl.store.cas import hash_tree
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore

LIMIT = 3
OPTIONS = EvalOptions(backend="transformers", limit=LIMIT)
LAYOUT = RunLayout("local", "r", "0123456789ab")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("A2RL_CACHE_DIR", str(path))
    return path


def _entry_key(tiny: Path, heldout: Path) -> str:
    signer = integrity.fingerprint(machine_key(BASELINE_CACHE_KEY))
    return baseline_cache_key(
        get_task("arith"), hash_tree(tiny).digest, LIMIT, hash_tree(heldout).digest, signer
    )


def _evaluate(store: LocalStore, tiny: Path, heldout: Path) -> Any:
    return evaluate_baseline(
        store,
        LAYOUT,
        get_task("arith"),
        tiny,
        heldout,
        options=OPTIONS,
        cache_mac_key=machine_key(BASELINE_CACHE_KEY),
    )


@pytest.mark.slow
def test_cache_entry_is_signed_holds_no_gold_and_a_poisoned_one_is_not_used(
    tmp_path: Path, cache_dir: Path, tiny_model: Path, staged_arith: StagedData
) -> None:
    store = LocalStore(tmp_path / "store")
    heldout = staged_arith.heldout_dir
    first = _evaluate(store, tiny_model, heldout)
    assert first.cached is False and first.score is not None
    key = _entry_key(tiny_model, heldout)
    entry = store.get_json(key)
    # No gold answers: no per-item details, no held-out question or answer anywhere in the entry.
    assert "details" not in entry and entry["mac"]
    text = json.dumps(entry)
    items = [json.loads(line) for line in (heldout / "heldout.jsonl").read_text().splitlines()[:LIMIT]]
    for item in items:
        assert item["question"] not in text and item["answer"] not in text
    # The machine-local key: a 0600 file in a 0700 directory.
    key_file = keys_dir() / BASELINE_CACHE_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and stat.S_IMODE(keys_dir().stat().st_mode) == 0o700

    assert _evaluate(store, tiny_model, heldout).cached is True  # a good entry is used

    # The agent's rewrite: score 42, MAC kept → not used; evaluated again; the entry is rewritten.
    store.put_json(key, {**entry, "score": 42.0})
    again = _evaluate(store, tiny_model, heldout)
    assert again.cached is False and again.score == first.score
    assert again.cache_problem and "failed its integrity check" in again.cache_problem
    assert store.get_json(key)["score"] == first.score
    # MAC removed → the same.
    store.put_json(key, {k: v for k, v in entry.items() if k != "mac"} | {"score": 42.0})
    assert _evaluate(store, tiny_model, heldout).score == first.score


@pytest.mark.slow
def test_cache_key_names_the_heldout_data(
    tmp_path: Path, cache_dir: Path, tiny_model: Path, staged_arith: StagedData
) -> None:
    """Other held-out data (one item changed) never reuses the baseline of the first."""
    store = LocalStore(tmp_path / "store")
    _evaluate(store, tiny_model, staged_arith.heldout_dir)
    other = tmp_path / "heldout"
    shutil.copytree(staged_arith.heldout_dir, other)
    os.chmod(other / "heldout.jsonl", 0o644)
    lines = (other / "heldout.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "question": first["question"] + " ", "id": "changed"})
    (other / "heldout.jsonl").write_text("\n".join(lines) + "\n")
    assert _entry_key(tiny_model, other) != _entry_key(tiny_model, staged_arith.heldout_dir)
    assert _evaluate(store, tiny_model, other).cached is False


@pytest.mark.slow
def test_runner_says_why_a_poisoned_entry_was_not_used_and_seals_the_baseline(
    tmp_path: Path, cache_dir: Path, tiny_model: Path, staged_arith: StagedData
) -> None:
    store = LocalStore(tmp_path / "store")
    first = _evaluate(store, tiny_model, staged_arith.heldout_dir)
    key = _entry_key(tiny_model, staged_arith.heldout_dir)
    store.put_json(key, {**store.get_json(key), "score": 42.0})
    run = BenchRun.model_validate(
        {
            "metadata": {"name": "r"},
            "spec": {
                "task": "arith",
                "baseModel": {"name": "tiny", "source": "builtin:tiny"},
                "agent": {"command": ["true"]},
                "budget": {"wallTimeSeconds": 60},
                "evaluation": {"backend": "transformers", "limit": LIMIT},
            },
        }
    )
    none = cast(Any, None)
    prep = _Prepared(
        run=run,
        layout=LAYOUT,
        store=store,
        task_name="arith",
        evaluator_version="arith-1",
        model_dir=tiny_model,
        model_digest=hash_tree(tiny_model).digest,
        heldout_dir=staged_arith.heldout_dir,
        train_dir=none,
        argv=[],
        logs_dir=tmp_path / "logs",
        run_key=integrity.new_key(),
    )
    said: list[str] = []
    result = _baseline(prep, said.append)
    assert result.score == first.score and not result.cached
    assert any("failed its integrity check" in line for line in said), said
    assert f"[a2rl] baseline score {first.score:.1f}" in said and not any("42.0" in line for line in said)
    # The runner sealed submission 0 before any agent ran: it verifies; a rewrite would not.
    assert prep.run_key is not None
    checked = checked_result(store, LAYOUT, 0, prep.run_key)
    assert checked is not None and checked.score == first.score and not checked.tampered
