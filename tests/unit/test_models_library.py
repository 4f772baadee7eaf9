"""Base models in the object store: `a2rl models push|list|resolve` and `store:<name>` sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_cli import main

from a2rl.errors import A2rlError, NotFoundError
from a2rl.models.library import ModelLayout, fetch_model, library_manifest, list_models, push_model
from a2rl.models.resolve import resolve_base_model
from a2rl.store.cas import hash_tree
from a2rl.store.local import LocalStore


@pytest.fixture(scope="module")
def tiny(tiny_model: Path) -> Path:
    return tiny_model


def test_push_then_fetch_restores_the_same_tree_and_uploads_shared_files_once(
    tiny: Path, tmp_path: Path
) -> None:
    store = LocalStore(tmp_path / "store")
    lines: list[str] = []
    doc = push_model(store, "tiny-0", tiny, say=lines.append)
    assert doc.digest == hash_tree(tiny).digest and doc.bytes == hash_tree(tiny).total_bytes
    assert "uploaded" in lines[0]
    # Same files under a second name: nothing new is uploaded.
    again: list[str] = []
    push_model(store, "tiny-copy", tiny, say=again.append)
    assert "uploaded 0 file(s), 0 bytes" in again[0]
    assert [m.name for m in list_models(store)] == ["tiny-0", "tiny-copy"]
    assert "files" not in list_models(store)[0].summary()

    cache = tmp_path / "cache"
    restored = fetch_model(store, "tiny-0", cache)
    assert hash_tree(restored).digest == doc.digest
    # Restored once: a later fetch uses the cache (it works even with the blobs gone).
    for blob in (tmp_path / "store" / "models" / "blobs").iterdir():
        blob.unlink()
    assert fetch_model(store, "tiny-0", cache) == restored


def test_a_corrupt_blob_is_refused_and_leaves_nothing_half_restored(tiny: Path, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    doc = push_model(store, "tiny", tiny, say=lambda s: None)
    assert doc.files is not None
    victim = doc.files.files[0].sha256
    path = tmp_path / "store" / ModelLayout("tiny").blob(victim)
    path.chmod(0o644)
    path.write_bytes(b"not the weights")
    with pytest.raises(A2rlError, match="corrupt"):
        fetch_model(store, "tiny", tmp_path / "cache")
    assert not (tmp_path / "cache" / str(doc.digest)).exists()


def test_store_sources_resolve_against_the_store_with_clear_errors(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path / "cache"))
    store = LocalStore(tmp_path / "store")
    push_model(store, "base", tiny, say=lambda s: None)
    path = resolve_base_model("store:base", store=store)
    assert path.is_relative_to(tmp_path / "cache") and hash_tree(path).digest == hash_tree(tiny).digest
    with pytest.raises(NotFoundError, match=r"store:other is not in .* `a2rl models push DIR --name other"):
        resolve_base_model("store:other", store=store)
    with pytest.raises(A2rlError, match="no object store"):
        resolve_base_model("store:base")
    with pytest.raises(A2rlError, match="invalid model name"):
        library_manifest(store, "Bad/Name")
    with pytest.raises(A2rlError, match="push it with `a2rl models push`"):
        resolve_base_model("hf:Qwen/Qwen2.5-0.5B")


def test_models_cli_push_list_resolve(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path / "cache"))
    store = str(tmp_path / "store")
    assert main(["models", "push", str(tiny), "--name", "tiny-cli", "--store", store]) == 0
    assert f"store:tiny-cli = {hash_tree(tiny).digest}" in capsys.readouterr().out
    assert main(["models", "list", "--store", store, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["name"] == "tiny-cli" and listed["digest"] == hash_tree(tiny).digest
    assert main(["models", "resolve", "store:tiny-cli", "--store", store]) == 0
    resolved = Path(json.loads(capsys.readouterr().out)["path"])
    assert hash_tree(resolved).digest == hash_tree(tiny).digest
    # User mistakes: one line, exit 2, no traceback.
    assert main(["models", "push", str(tmp_path / "nope"), "--name", "x", "--store", store]) == 2
    assert main(["models", "push", str(tiny), "--name", "Not OK", "--store", store]) == 2
    err = capsys.readouterr().err
    assert "model directory not found" in err and "invalid model name" in err and "Traceback" not in err
