"""Base models kept in the object store: `a2rl models push`, and `baseModel.source: store:<name>`.

A cluster's workspace has no model hub to download from (its NetworkPolicy allows the store, the
API server and DNS only), so a base model is pushed once to the run store and named by runs:

    models/<name>/manifest.json     {"name", "digest", "files": TreeManifest, "bytes", "pushed_at"}
                                    (a2rl.records.library.ModelLibraryManifest)
    models/blobs/<sha256>           file contents, shared by every pushed model

Content-addressed like run snapshots: pushing a model that shares files with one already there
uploads only the new files. Resolving `store:<name>` restores the tree into the local model cache
under its digest (every sha256 verified) and reuses it on later runs.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from a2rl.errors import A2rlError, NotFoundError
from a2rl.records.base import RecordError, load_record, write_record
from a2rl.records.library import ModelLibraryManifest
from a2rl.records.times import utc_now
from a2rl.records.tree import TreeRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import restore_tree, snapshot_tree

STORE_PREFIX = "store:"
LIBRARY = "models"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
COMPLETE_SUFFIX = ".complete"  # beside the tree, never in it (it would change the tree's digest)


@dataclass(frozen=True)
class ModelLayout:
    """Keys of one pushed model (blobs are shared by the whole library)."""

    name: str

    @property
    def manifest(self) -> str:
        return f"{LIBRARY}/{self.name}/manifest.json"

    def blob(self, digest: str) -> str:
        return f"{LIBRARY}/blobs/{digest}"


def source_layouts(source: str) -> tuple[ModelLayout, ...]:
    """Where a snapshot of the model named by `source` can copy its blobs from inside the store."""
    source = source.strip()
    return (ModelLayout(source[len(STORE_PREFIX) :]),) if source.startswith(STORE_PREFIX) else ()


def check_model_name(name: str) -> str:
    if not _NAME.match(name):
        raise A2rlError(
            f"invalid model name {name!r}: use lower-case letters, digits, '.', '_' and '-' "
            "(at most 100 characters, starting with a letter or digit)"
        )
    return name


def push_model(
    store: ObjectStore, name: str, model_dir: Path, *, say: Callable[[str], None] = print
) -> ModelLibraryManifest:
    """Upload `model_dir` as `store:<name>` (replacing what the name pointed to); its manifest."""
    layout = ModelLayout(check_model_name(name))
    if not (model_dir / "config.json").is_file():
        raise A2rlError(f"{model_dir} is not a Hugging Face model directory (no config.json)")
    tree, stats = snapshot_tree(store, layout, model_dir)
    say(
        f"{stats.files} file(s), {stats.bytes_total} bytes; uploaded {stats.files_uploaded} file(s), "
        f"{stats.bytes_uploaded} bytes in {stats.seconds:.1f}s"
    )
    doc = ModelLibraryManifest(
        name=name,
        digest=tree.digest,
        bytes=tree.total_bytes,
        files=TreeRecord.of(tree),
        pushed_at=utc_now(),
    )
    write_record(store, layout.manifest, doc)  # last: a reader never sees a model with missing blobs
    return doc


def library_manifest(store: ObjectStore, name: str) -> ModelLibraryManifest:
    """The manifest of `store:<name>`: a one-line `NotFoundError` naming the push command when it
    is not pushed, a one-line `RecordError` naming its key when it is corrupt."""
    layout = ModelLayout(check_model_name(name))
    try:
        return load_record(store, layout.manifest, ModelLibraryManifest)
    except NotFoundError:
        raise NotFoundError(
            f"base model not found: store:{name} is not in {store.uri} "
            f"(push it once with `a2rl models push DIR --name {name} --store {store.uri}`)"
        ) from None


def list_models(store: ObjectStore) -> list[ModelLibraryManifest]:
    """Every pushed model's manifest, sorted by name (`ModelLibraryManifest.summary` drops the
    file list)."""
    found = []
    for key in store.list(LIBRARY):
        parts = key.split("/")
        if len(parts) == 3 and parts[2] == "manifest.json" and parts[1] != "blobs":
            found.append(load_record(store, key, ModelLibraryManifest))
    return sorted(found, key=lambda d: str(d.name))


def fetch_model(store: ObjectStore, name: str, cache_root: Path) -> Path:
    """The local directory of `store:<name>`: restored under `cache_root/<digest>` once, verified."""
    doc = library_manifest(store, name)
    where = store.url_for(ModelLayout(name).manifest)
    if doc.files is None:
        raise RecordError(f"{where} is not a valid {ModelLibraryManifest.__name__}: files: Field required")
    try:
        tree = doc.files.manifest()
    except ValueError as exc:
        raise RecordError(f"{where}: {exc}") from None
    dest = cache_root / tree.digest
    complete = cache_root / f"{tree.digest}{COMPLETE_SUFFIX}"
    if complete.is_file() and dest.is_dir():
        return dest
    tmp = cache_root / f".{tree.digest}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    restore_tree(store, ModelLayout(name), tree, tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    complete.write_text(name + "\n")
    return dest
