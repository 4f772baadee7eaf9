"""Staged data as two checksummed artifacts: `train/` (agent-visible) and `heldout/` (evaluation only).

Each artifact is a directory (or a store prefix) with a `manifest.json`:

    {"task", "split": "train"|"heldout", "data_version", "seed", "source",
     "files": {"<relative path>": {"sha256", "size"}}, "digest"}

`digest` is the sha256 of the sorted `path, sha256, size` lines, so two artifacts with the same
files have the same digest. Staging refuses to finish when any held-out text (every string
field of 32 characters or more in the held-out JSONL rows, whitespace-normalised) occurs in
the train artifact: the check is by content, not by file name.

`a2rl data stage TASK` writes by default into the local data cache where `a2rl run` looks
(`a2rl_tasks.staging.cached_dir(task, seed)`), or into `--out DIR`, or uploads to
`--store URI` under `data/<task>/<data_version>-seed<seed>/{train,heldout}/`. In a cluster, each
eval pod's init container fetches the held-out artifact back with `fetch_heldout` (`a2rl eval
fetch-heldout`), every checksum verified. The manifest is `a2rl.records.artifact.ArtifactManifest`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError, NotFoundError
from a2rl.records.artifact import ArtifactFile, ArtifactManifest
from a2rl.records.base import load_record, parse_record, write_record
from a2rl.store.base import ObjectStore
from a2rl_tasks.base import StagedData, Task
from a2rl_tasks.staging import HELDOUT, TRAIN, cached_dir, stage_into

MANIFEST = "manifest.json"
SPLITS = (TRAIN, HELDOUT)
MIN_LEAK_CHARS = 32


@dataclass(frozen=True)
class StagedArtifacts:
    root: Path
    manifests: dict[str, ArtifactManifest]
    #: False when an existing, verified staging was reused.
    created: bool

    @property
    def train_dir(self) -> Path:
        return self.root / TRAIN

    @property
    def heldout_dir(self) -> Path:
        return self.root / HELDOUT

    def summary(self) -> dict[str, Any]:
        return {
            split: {"path": str(self.root / split), "digest": m.digest, "files": len(m.files)}
            for split, m in self.manifests.items()
        } | {"created": self.created}


# --- manifests ------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> Iterator[Path]:
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and path.relative_to(root).as_posix() != MANIFEST:
                yield path


def file_entries(root: Path) -> dict[str, ArtifactFile]:
    entries = {
        p.relative_to(root).as_posix(): ArtifactFile(sha256=sha256_file(p), size=p.stat().st_size)
        for p in _files(root)
    }
    return dict(sorted(entries.items()))


def entries_digest(files: Mapping[str, ArtifactFile]) -> str:
    lines = "".join(f"{path}\0{e.sha256}\0{e.size}\n" for path, e in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def build_manifest(root: Path, *, task: Task, split: str, seed: int, source: str | None) -> ArtifactManifest:
    files = file_entries(root)
    return ArtifactManifest(
        task=task.name,
        split=split,
        data_version=task.data_version,
        seed=seed,
        source=source,
        files=files,
        digest=entries_digest(files),
    )


def write_manifest(root: Path, manifest: ArtifactManifest) -> None:
    (root / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")


def read_manifest(root: Path) -> ArtifactManifest:
    """The manifest of the artifact at `root`; a one-line `A2rlError` naming the file when it is
    missing, not JSON or not a valid manifest."""
    path = root / MANIFEST
    if not path.is_file():
        raise A2rlError(f"no {MANIFEST} in {root} (not a staged artifact)")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise A2rlError(f"{path}: not JSON: {exc}") from None
    return parse_record(ArtifactManifest, data, str(path))


def _same(a: ArtifactFile, b: ArtifactFile) -> bool:
    return (a.sha256, a.size) == (b.sha256, b.size)


def verify_artifact(root: Path) -> ArtifactManifest:
    """The manifest of the artifact at `root`, after checking every file against it."""
    manifest = read_manifest(root)
    expected = manifest.files
    actual = file_entries(root)
    problems = [f"missing {p}" for p in expected if p not in actual]
    problems += [f"unexpected {p}" for p in actual if p not in expected]
    problems += [f"changed {p}" for p in expected if p in actual and not _same(actual[p], expected[p])]
    if entries_digest(expected) != manifest.digest:
        problems.append("manifest digest does not match its file list")
    if problems:
        raise A2rlError(f"artifact {root} does not match its manifest: {'; '.join(problems[:5])}")
    return manifest


# --- content disjointness -------------------------------------------------------------------


def _norm(text: str) -> str:
    return " ".join(text.split())


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _jsonl_rows(root: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(_files(root)):
        if path.suffix != ".jsonl":
            continue
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    if isinstance(row, dict):
                        yield row


def _all_text(root: Path) -> str:
    parts: list[str] = []
    for path in sorted(_files(root)):
        if path.suffix == ".jsonl":
            continue
        try:
            parts.append(_norm(path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    for row in _jsonl_rows(root):
        parts.extend(_norm(s) for s in _strings(row))
    return "\n".join(parts)


def heldout_leaks(train_dir: Path, heldout_dir: Path, min_chars: int = MIN_LEAK_CHARS) -> list[str]:
    """Held-out texts (string fields of ≥ `min_chars` characters, `id` excluded) found in the
    train artifact, whitespace-normalised; empty when the splits are disjoint by content."""
    haystack = _all_text(train_dir)
    leaks: list[str] = []
    for row in _jsonl_rows(heldout_dir):
        for key, value in row.items():
            if key == "id":
                continue
            for s in _strings(value):
                needle = _norm(s)
                if len(needle) >= min_chars and needle in haystack:
                    leaks.append(needle)
    return leaks


def check_disjoint(train_dir: Path, heldout_dir: Path) -> None:
    leaks = heldout_leaks(train_dir, heldout_dir)
    if leaks:
        raise A2rlError(
            f"{len(leaks)} held-out text(s) occur in the agent-visible data, e.g. {leaks[0][:80]!r}"
        )


# --- staging --------------------------------------------------------------------------------


def default_root(task: Task, seed: int, secret: bytes | None = None) -> Path:
    """Where `a2rl run` looks for a task's staged data (the local data cache)."""
    return cached_dir(task, seed, secret=secret)


def _existing(root: Path) -> dict[str, ArtifactManifest] | None:
    if not root.exists():
        return None
    if all((root / s / MANIFEST).is_file() for s in SPLITS):
        return {s: verify_artifact(root / s) for s in SPLITS}
    if all((root / s).is_dir() for s in SPLITS):
        return None  # staged by `a2rl run` without manifests: they are added in place
    raise A2rlError(f"{root} exists and is not a staged data directory; pick another --out or pass --force")


def stage_artifacts(
    task: Task,
    *,
    source: str | None,
    seed: int = 0,
    root: Path | None = None,
    force: bool = False,
    secret: bytes | None = None,
) -> StagedArtifacts:
    """Stage `task` into `root/{train,heldout}` with manifests (reusing a verified staging); a
    generated held-out split comes from a seed derived from `secret` (`a2rl_tasks.staging`)."""
    root = root or default_root(task, seed, secret)
    if root.exists() and not force:
        found = _existing(root)
        if found is not None:
            return StagedArtifacts(root=root, manifests=found, created=False)
        check_disjoint(root / TRAIN, root / HELDOUT)
        manifests = {
            s: build_manifest(root / s, task=task, split=s, seed=seed, source=source) for s in SPLITS
        }
        for s in SPLITS:
            write_manifest(root / s, manifests[s])
        return StagedArtifacts(root=root, manifests=manifests, created=False)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.staging-", dir=root.parent))
    try:
        staged = StagedData(train_dir=tmp / TRAIN, heldout_dir=tmp / HELDOUT)
        staged.train_dir.mkdir()
        staged.heldout_dir.mkdir()
        stage_into(task, staged, source=source, seed=seed, secret=secret)
        check_disjoint(staged.train_dir, staged.heldout_dir)
        manifests = {s: build_manifest(tmp / s, task=task, split=s, seed=seed, source=source) for s in SPLITS}
        for s in SPLITS:
            write_manifest(tmp / s, manifests[s])
        tmp.chmod(0o755)
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return StagedArtifacts(root=root, manifests=manifests, created=True)


# --- store ----------------------------------------------------------------------------------


def store_prefix(task: Task, seed: int) -> str:
    return f"data/{task.name}/{task.data_version}-seed{seed}"


def upload_artifact(store: ObjectStore, prefix: str, root: Path) -> ArtifactManifest:
    """Upload a verified artifact directory; the manifest goes last (readers wait for it)."""
    manifest = verify_artifact(root)
    for rel in manifest.files:
        store.put_file(f"{prefix}/{rel}", root / rel)
    write_record(store, f"{prefix}/{MANIFEST}", manifest)
    return manifest


def fetch_artifact(store: ObjectStore, prefix: str, dest: Path) -> ArtifactManifest:
    """Download the artifact at `prefix` into `dest` and verify every checksum (`NotFoundError`
    when it is not staged; a one-line `RecordError` naming the key when its manifest is corrupt)."""
    manifest = load_record(store, f"{prefix}/{MANIFEST}", ArtifactManifest)
    for rel in manifest.files:
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise A2rlError(f"artifact {prefix}: unsafe path {rel!r} in manifest")
        store.get_file(f"{prefix}/{rel}", dest / rel)
    write_manifest(dest, manifest)
    return verify_artifact(dest)


def heldout_key(task: Task, seed: int) -> str:
    """Store key of the task's staged held-out artifact (`a2rl data stage TASK --seed S --store`)."""
    return f"{store_prefix(task, seed)}/{HELDOUT}"


def fetch_heldout(store: ObjectStore, task: Task, seed: int, dest: Path) -> ArtifactManifest:
    """Download the task's staged held-out artifact into `dest` and verify every checksum; a
    one-line NotFoundError naming the command that stages it when it is not staged."""
    key = heldout_key(task, seed)
    if not store.exists(f"{key}/{MANIFEST}"):
        command = f"a2rl data stage {task.name} --seed {seed} --store {store.uri}"
        raise NotFoundError(f"held-out data not staged at {store.url_for(key)}: run `{command}`")
    return fetch_artifact(store, key, dest)


def stage_to_store(
    task: Task, store: ObjectStore, *, source: str | None, seed: int = 0, secret: bytes | None = None
) -> dict[str, Any]:
    """Stage into a temp dir and upload both artifacts; returns {split: {"key", "digest", "files"}}."""
    with tempfile.TemporaryDirectory(prefix="a2rl-stage-") as tmp:
        staged = stage_artifacts(task, source=source, seed=seed, root=Path(tmp) / "staged", secret=secret)
        prefix = store_prefix(task, seed)
        out: dict[str, Any] = {}
        for split in SPLITS:
            manifest = upload_artifact(store, f"{prefix}/{split}", staged.root / split)
            out[split] = {
                "key": store.url_for(f"{prefix}/{split}"),
                "digest": manifest.digest,
                "files": len(manifest.files),
            }
        return out
