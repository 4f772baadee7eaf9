"""The model-library and task-data artifact manifests as records (`a2rl.records.library`,
`a2rl.records.artifact`): the same bytes in the store as the dict writers wrote, older documents
still read, and a corrupt one is a one-line error naming its key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import (
    MANIFEST,
    entries_digest,
    fetch_artifact,
    file_entries,
    stage_to_store,
    store_prefix,
    verify_artifact,
)

from a2rl.errors import A2rlError, NotFoundError
from a2rl.models.library import ModelLayout, fetch_model, library_manifest, list_models, push_model
from a2rl.records.artifact import ArtifactManifest
from a2rl.records.base import RecordError, load_record, write_record
from a2rl.records.library import ModelLibraryManifest
from a2rl.store.cas import hash_tree
from a2rl.store.local import LocalStore

MODEL_DOC: dict[str, Any] = {
    "name": "tiny-0",
    "digest": "d" * 64,
    "bytes": 15,
    "files": {
        "digest": "d" * 64,
        "files": [
            {"path": "config.json", "sha256": "a" * 64, "size": 2, "mode": 0o644},
            {"path": "model.safetensors", "sha256": "b" * 64, "size": 13, "mode": 0o600},
        ],
    },
    "pushed_at": "2026-11-24T19:00:00.123456Z",
}

ARTIFACT_DOC: dict[str, Any] = {
    "task": "arith",
    "split": "heldout",
    "data_version": "1",
    "seed": 0,
    "source": None,
    "files": {
        "heldout.jsonl": {"sha256": "c" * 64, "size": 123},
        "sub/x.txt": {"sha256": "e" * 64, "size": 0},
    },
    "digest": "f" * 64,
}


def _model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    (model / "weights.bin").write_bytes(b"\x00\x01weights")
    return model


@pytest.mark.parametrize(
    ("doc", "model", "key"),
    [
        (MODEL_DOC, ModelLibraryManifest, "models/tiny-0/manifest.json"),
        (ARTIFACT_DOC, ArtifactManifest, "a/m.json"),
    ],
)
def test_a_stored_manifest_reads_and_writes_back_byte_identical(
    tmp_path: Path, doc: dict[str, Any], model: type[ModelLibraryManifest | ArtifactManifest], key: str
) -> None:
    store = LocalStore(tmp_path / "store")
    store.put_json(key, {**doc, "added_later": {"kept": True}})
    before = store.get_bytes(key)
    record = load_record(store, key, model)
    write_record(store, key, record)
    assert store.get_bytes(key) == before


def test_push_writes_the_bytes_the_dict_writer_wrote(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    model = _model_dir(tmp_path)
    doc = push_model(store, "m", model, say=lambda s: None)
    tree = hash_tree(model)
    legacy = {
        "name": "m",
        "digest": tree.digest,
        "bytes": tree.total_bytes,
        "files": tree.to_json(),
        "pushed_at": doc.pushed_at,
    }
    expected = json.dumps(legacy, indent=2, sort_keys=True).encode() + b"\n"
    assert store.get_bytes(ModelLayout("m").manifest) == expected
    assert library_manifest(store, "m") == doc
    assert [m.summary() for m in list_models(store)] == [{k: v for k, v in legacy.items() if k != "files"}]


def test_an_older_minimal_library_manifest_still_fetches(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    model = _model_dir(tmp_path)
    pushed = push_model(store, "m", model, say=lambda s: None)
    assert pushed.files is not None
    # No bytes/pushed_at/name, a tree without its digest and entries without a mode.
    files = [{k: v for k, v in f.items() if k != "mode"} for f in pushed.files.to_json()["files"]]
    store.put_json(ModelLayout("m").manifest, {"digest": pushed.digest, "files": {"files": files}})
    restored = fetch_model(store, "m", tmp_path / "cache")
    assert hash_tree(restored).digest == pushed.digest
    (listed,) = list_models(store)
    assert listed.name is None and listed.summary() == {"digest": pushed.digest}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "is not valid JSON"),
        (b"[1]", "is not a JSON object"),
        (json.dumps({**MODEL_DOC, "bytes": "many"}).encode(), "not a valid ModelLibraryManifest: bytes: "),
        (json.dumps({"name": "m"}).encode(), "not a valid ModelLibraryManifest: files: Field required"),
        (json.dumps({**MODEL_DOC, "digest": "0" * 64}).encode(), "digest does not match"),
    ],
)
def test_a_corrupt_library_manifest_is_one_line_naming_its_key(
    tmp_path: Path, body: bytes, message: str
) -> None:
    store = LocalStore(tmp_path / "store")
    key = ModelLayout("m").manifest
    store.put_bytes(key, body)
    with pytest.raises(A2rlError) as info:
        fetch_model(store, "m", tmp_path / "cache")
    text = str(info.value)
    assert message in text and key in text and "\n" not in text
    assert not isinstance(info.value, NotFoundError)


def test_staged_artifact_manifests_keep_todays_bytes(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    task = get_task("arith")
    stage_to_store(task, store, source=None, seed=0)
    key = f"{store_prefix(task, 0)}/heldout"
    stored = store.get_bytes(f"{key}/{MANIFEST}")
    doc = json.loads(stored)
    assert set(doc) == {"task", "split", "data_version", "seed", "source", "files", "digest"}
    assert stored == json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"
    dest = tmp_path / "fetched"
    manifest = fetch_artifact(store, key, dest)
    # The local copy is the store's document, byte for byte (both sorted, two-space indent).
    assert (dest / MANIFEST).read_bytes() == stored
    assert manifest.to_json() == doc and verify_artifact(dest) == manifest


def test_an_older_minimal_artifact_manifest_reads(tmp_path: Path) -> None:
    root = tmp_path / "artifact"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    files = file_entries(root)
    minimal = {"files": {p: e.to_json() for p, e in files.items()}, "digest": entries_digest(files)}
    (root / MANIFEST).write_text(json.dumps(minimal))
    manifest = verify_artifact(root)
    assert manifest.task is None and manifest.seed is None and manifest.to_json() == minimal


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {**ARTIFACT_DOC, "files": {"x": {"sha256": "c" * 64}}},
            "not a valid ArtifactManifest: files.x.size: Field required",
        ),
        ({**ARTIFACT_DOC, "files": ["x"]}, "not a valid ArtifactManifest: files: "),
        ({**ARTIFACT_DOC, "seed": "zero"}, "not a valid ArtifactManifest: seed: "),
    ],
)
def test_a_corrupt_artifact_manifest_is_one_line_naming_its_key(
    tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    store = LocalStore(tmp_path / "store")
    store.put_json(f"p/{MANIFEST}", doc)
    with pytest.raises(RecordError) as info:
        fetch_artifact(store, "p", tmp_path / "dest")
    text = str(info.value)
    assert message in text and f"p/{MANIFEST}" in text and "\n" not in text
    # The same document in a staging directory: the error names the file.
    root = tmp_path / "local"
    root.mkdir()
    (root / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(A2rlError, match="not a valid ArtifactManifest") as local:
        verify_artifact(root)
    assert str(root / MANIFEST) in str(local.value) and "\n" not in str(local.value)
    with pytest.raises(NotFoundError):
        fetch_artifact(store, "absent", tmp_path / "dest2")
