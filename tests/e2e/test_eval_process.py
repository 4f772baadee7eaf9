"""The eval process end to end: `a2rl eval submission|baseline` in a fresh process on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.base import StagedData

from a2rl.integrity import fingerprint
from a2rl.launch import run_a2rl
from a2rl.local_keys import BASELINE_CACHE_KEY, machine_key
from a2rl.store.base import ObjectStore
from a2rl.store.cas import hash_tree, snapshot_tree
from a2rl.store.layout import RunLayout, baseline_data_key
from a2rl.store.open import open_store

pytestmark = pytest.mark.slow

RESULT_KEYS = {
    "index", "task", "score", "error", "evaluator_version", "backend", "n", "correct", "metrics",
    "model_digest", "started_at", "finished_at", "duration_s",
}  # fmt: skip
LIMIT = 12


@pytest.fixture(scope="module")
def heldout(staged_arith: StagedData) -> Path:
    return staged_arith.heldout_dir


@pytest.fixture
def store_uri(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


def _submit(store: ObjectStore, layout: RunLayout, index: int, model_dir: Path) -> str:
    tree, _ = snapshot_tree(store, layout, model_dir)
    store.put_json(
        layout.submission_manifest(index),
        {"index": index, "model_path": "output/v1", "model": tree.to_json(), "model_digest": tree.digest},
    )
    return tree.digest


def _eval(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    import os

    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = run_a2rl(["eval", *args], env=env, timeout_s=600)
    return proc.returncode, proc.stdout, proc.stderr


def _common(store_uri: str, layout: RunLayout, heldout: Path) -> list[str]:
    return ["--store", store_uri, "--run-prefix", layout.prefix, "--task", "arith", "--heldout", str(heldout),
            "--backend", "transformers", "--limit", str(LIMIT)]  # fmt: skip


def test_submission_end_to_end(tiny_model: Path, heldout: Path, store_uri: str, tmp_path: Path) -> None:
    store = open_store(store_uri)
    layout = RunLayout("local", "run", "0123456789ab")
    digest = _submit(store, layout, 1, tiny_model)

    rc, out, err = _eval(["submission", *_common(store_uri, layout, heldout), "--index", "1"], tmp_path)
    assert rc == 0, err
    result = store.get_json(layout.submission_result(1))
    assert set(result) == RESULT_KEYS
    assert result["index"] == 1 and result["task"] == "arith" and result["error"] is None
    assert result["model_digest"] == digest and result["backend"] == "transformers"
    assert result["n"] == LIMIT and result["evaluator_version"] == get_task("arith").evaluator_version
    assert 0.0 <= result["score"] <= 20.0  # a random model is (almost) never right
    assert result["score"] == pytest.approx(100.0 * result["correct"] / LIMIT)
    assert json.loads(out) == result
    details = store.get_bytes(layout.submission_details(1)).decode().splitlines()
    assert len(details) == LIMIT
    first = json.loads(details[0])
    assert {"id", "gold", "completion", "prediction", "correct"} <= set(first)
    # The restored copy lived in a temp dir that is gone afterwards.
    assert not list((tmp_path / "tmp").iterdir())


def test_unloadable_model_is_a_result_not_a_crash(heldout: Path, store_uri: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 10}))
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    store = open_store(store_uri)
    layout = RunLayout("local", "run", "0123456789ac")
    _submit(store, layout, 2, bad)

    rc, _, err = _eval(["submission", *_common(store_uri, layout, heldout), "--index", "2"], tmp_path)
    assert rc == 0, err
    result = store.get_json(layout.submission_result(2))
    assert set(result) == RESULT_KEYS
    assert result["score"] is None and result["n"] == 0
    assert result["error"].startswith("model could not be loaded: ")


def test_missing_submission_is_a_one_line_error(heldout: Path, store_uri: str, tmp_path: Path) -> None:
    layout = RunLayout("local", "run", "0123456789ad")
    rc, _, err = _eval(["submission", *_common(store_uri, layout, heldout), "--index", "7"], tmp_path)
    assert rc == 2
    assert err.strip().startswith("a2rl: error:") and len(err.strip().splitlines()) == 1


def test_baseline_is_cached_across_runs(
    tiny_model: Path, heldout: Path, store_uri: str, tmp_path: Path
) -> None:
    store = open_store(store_uri)
    run_a = RunLayout("local", "first", "0123456789ae")
    run_b = RunLayout("local", "second", "0123456789af")
    args = ["--model-dir", str(tiny_model), "--base-name", "tiny"]

    rc, out, err = _eval(["baseline", *_common(store_uri, run_a, heldout), *args], tmp_path)
    assert rc == 0, err
    first = json.loads(out)
    assert first["cached"] is False and first["error"] is None and first["index"] == 0
    digest = hash_tree(tiny_model).digest
    version = get_task("arith").evaluator_version
    # Local mode's key: the held-out data's digest and the signing key's fingerprint are in it.
    signer = fingerprint(machine_key(BASELINE_CACHE_KEY))
    data = hash_tree(heldout).digest
    assert store.exists(baseline_data_key("arith", digest, f"{version}+limit{LIMIT}", data, signer))
    assert not store.exists(baseline_data_key("arith", digest, version, data, signer))  # never poses as full

    rc, out, err = _eval(["baseline", *_common(store_uri, run_b, heldout), *args], tmp_path)
    assert rc == 0, err
    second = json.loads(out)
    assert second["cached"] is True
    for key in ("score", "n", "correct", "metrics", "started_at", "duration_s"):
        assert second[key] == first[key]  # reused, not re-evaluated

    # The evaluated run has its per-item details; the cached one none (the cache keeps no gold answers).
    for run, details in ((run_a, LIMIT), (run_b, 0)):
        manifest = store.get_json(run.submission_manifest(0))
        assert manifest["index"] == 0 and manifest["identical_to_base"] is True
        assert manifest["model_path"] == "models/tiny" and manifest["code_revision"] is None
        assert manifest["model_digest"] == manifest["base_model_digest"] == digest
        result = store.get_json(run.submission_result(0))
        assert set(result) >= RESULT_KEYS and result["score"] == first["score"]
        assert len(store.get_bytes(run.submission_details(0)).decode().splitlines()) == details
