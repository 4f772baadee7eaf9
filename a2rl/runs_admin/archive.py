"""`a2rl runs export` / `a2rl runs import`: a run as one tar file.

The tar holds every object under the run's prefix as `objects/<key relative to the prefix>`, then
`a2rl-export.json`, the manifest: the prefix, and each object's key, size and sha256. An import
checks the whole file before it writes anything — only regular files with safe names (no absolute
path, no `..`, no link, device or FIFO), exactly the objects the manifest lists, each with its
digest — then writes the objects with run.json last (a run appears in listings only once all of it
is there). A store that already holds the run with other contents is never overwritten; one that
holds the same contents is left as it is (an import that stopped half-way is completed).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from a2rl.errors import A2rlError
from a2rl.records.times import utc_now
from a2rl.runs_admin.delete import check_run_prefix
from a2rl.runs_admin.durations import format_bytes
from a2rl.store.base import ContentChangedError, ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.local import check_key

EXPORT_FORMAT = "a2rl-run-export"
EXPORT_VERSION = 1
MANIFEST_NAME = "a2rl-export.json"
OBJECTS_DIR = "objects"
RUN_JSON = "run.json"
#: A manifest larger than this is refused unread (a real one is ~150 bytes per object).
MAX_MANIFEST_BYTES = 256 << 20
#: Progress is reported every this many bytes (and at the end).
PROGRESS_BYTES = 256 << 20
CHUNK = 1 << 20

Say = Callable[[str], None]


@dataclass(frozen=True)
class ObjectEntry:
    """One object of the run: its key relative to the prefix, size and sha256."""

    key: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class ExportManifest:
    prefix: str
    objects: tuple[ObjectEntry, ...]
    exported_at: str | None = None
    source: str | None = None

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "prefix": self.prefix,
            "exported_at": self.exported_at,
            "source": self.source,
            "objects": [o.to_json() for o in self.objects],
        }

    @classmethod
    def from_json(cls, data: Any) -> ExportManifest:
        """Parse and check a manifest (`A2rlError` naming what is wrong)."""
        if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
            raise A2rlError(f"{MANIFEST_NAME} is not an a2rl run export manifest")
        if data.get("version") != EXPORT_VERSION:
            raise A2rlError(
                f"export format version {data.get('version')!r} is not supported (expected {EXPORT_VERSION})"
            )
        prefix = data.get("prefix")
        if not isinstance(prefix, str):
            raise A2rlError(f"{MANIFEST_NAME} names no run prefix")
        _check_prefix(prefix)
        raw = data.get("objects")
        if not isinstance(raw, list):
            raise A2rlError(f"{MANIFEST_NAME} has no object list")
        objects = []
        for item in raw:
            if not isinstance(item, dict):
                raise A2rlError(f"{MANIFEST_NAME}: an object entry is not an object")
            key, size, digest = item.get("key"), item.get("size"), item.get("sha256")
            if not isinstance(key, str) or not _safe_key(key):
                raise A2rlError(f"{MANIFEST_NAME}: unsafe object key {key!r}")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise A2rlError(f"{MANIFEST_NAME}: object {key!r} has no valid size")
            if not isinstance(digest, str) or len(digest) != 64:
                raise A2rlError(f"{MANIFEST_NAME}: object {key!r} has no valid sha256")
            objects.append(ObjectEntry(key, size, digest.lower()))
        keys = [o.key for o in objects]
        if len(set(keys)) != len(keys):
            raise A2rlError(f"{MANIFEST_NAME} lists an object twice")
        if RUN_JSON not in keys:
            raise A2rlError(f"{MANIFEST_NAME} lists no {RUN_JSON}: not a run")
        exported_at, source = data.get("exported_at"), data.get("source")
        return cls(
            prefix=prefix,
            objects=tuple(objects),
            exported_at=exported_at if isinstance(exported_at, str) else None,
            source=source if isinstance(source, str) else None,
        )


class Progress:
    """A line through `say` every `PROGRESS_BYTES` and at the end: `verb n/N objects, x/y`."""

    def __init__(self, say: Say | None, verb: str, total_objects: int, total_bytes: int) -> None:
        self.say, self.verb = say, verb
        self.total_objects, self.total_bytes = total_objects, total_bytes
        self.objects = 0
        self.bytes = 0
        self._next = PROGRESS_BYTES

    def add(self, size: int) -> None:
        self.objects += 1
        self.bytes += size
        if self.bytes >= self._next:
            self._next = self.bytes + PROGRESS_BYTES
            self._line()

    def done(self) -> None:
        self._line()

    def _line(self) -> None:
        if self.say is not None:
            self.say(
                f"{self.verb} {self.objects}/{self.total_objects} objects, "
                f"{format_bytes(self.bytes)}/{format_bytes(self.total_bytes)}"
            )


def _check_prefix(prefix: str) -> None:
    try:
        check_key(prefix)
        RunLayout.from_prefix(prefix)
    except ValueError as exc:
        raise A2rlError(f"{MANIFEST_NAME}: not a run prefix: {prefix!r}") from exc
    check_run_prefix(prefix)


def _safe_key(key: str) -> bool:
    try:
        check_key(key)
    except ValueError:
        return False
    return True


def _copy_hashing(src: IO[bytes], out: IO[bytes] | None, size: int | None = None) -> tuple[str, int]:
    digest = hashlib.sha256()
    n = 0
    while chunk := src.read(CHUNK):
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
        n += len(chunk)
    if size is not None and n != size:
        raise A2rlError(f"object changed size while it was read ({n} bytes, expected {size})")
    return digest.hexdigest(), n


def export_run(store: ObjectStore, layout: RunLayout, out: Path, *, say: Say | None = None) -> ExportManifest:
    """Write the run's objects and manifest to the tar `out` (a new file: refused when it exists).

    The tar is written beside `out` under a temporary name and renamed when complete.
    """
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise A2rlError(f"{out} exists; remove it or choose another -o")
    if not out.parent.is_dir():
        raise A2rlError(f"no such directory: {out.parent}")
    prefix = layout.prefix
    check_run_prefix(prefix)
    listed = list(store.sizes(prefix))
    if not any(key == layout.run_json for key, _ in listed):
        raise A2rlError(f"no run at {store.url_for(prefix)} (run.json missing)")
    progress = Progress(say, "exported", len(listed), sum(n for _, n in listed))
    entries: list[ObjectEntry] = []
    now = int(time.time())
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        with (
            tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar,
            tempfile.TemporaryDirectory(prefix="a2rl-export-") as scratch,
        ):
            staged = Path(scratch) / "object"
            for key, _size in listed:
                rel = key[len(prefix) + 1 :]
                store.get_file(key, staged)
                with staged.open("rb") as f:
                    digest, size = _copy_hashing(f, None)
                    f.seek(0)
                    info = tarfile.TarInfo(f"{OBJECTS_DIR}/{rel}")
                    info.size, info.mtime, info.mode = size, now, 0o644
                    tar.addfile(info, f)
                entries.append(ObjectEntry(rel, size, digest))
                progress.add(size)
            manifest = ExportManifest(prefix, tuple(entries), exported_at=utc_now(), source=store.uri)
            data = json.dumps(manifest.to_json(), indent=2, sort_keys=True).encode() + b"\n"
            info = tarfile.TarInfo(MANIFEST_NAME)
            info.size, info.mtime, info.mode = len(data), now, 0o644
            staged.write_bytes(data)
            with staged.open("rb") as f:
                tar.addfile(info, f)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    progress.done()
    return manifest


@dataclass(frozen=True)
class ImportResult:
    prefix: str
    #: Objects written (0 when the store already held the same run).
    written: int
    bytes: int
    #: Objects the store already held with the same contents.
    present: int


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """Why `member`'s name or kind is unsafe (None: a regular file with a safe name)."""
    name = member.name
    if name.startswith("/") or "\\" in name or "\x00" in name:
        return "an absolute or odd path"
    if any(part == ".." for part in name.split("/")):
        return "a '..' path"
    if member.issym() or member.islnk():
        return "a link"
    if member.isdir():  # tools that tar a folder write these: harmless, skipped
        return None
    if not member.isreg():
        return "not a regular file"
    if name != MANIFEST_NAME and not (
        name.startswith(f"{OBJECTS_DIR}/") and _safe_key(name[len(OBJECTS_DIR) + 1 :])
    ):
        return f"not {MANIFEST_NAME} or {OBJECTS_DIR}/<key>"
    return None


def _open_tar(path: Path) -> tarfile.TarFile:
    if not Path(path).is_file():
        raise A2rlError(f"no such file: {path}")
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise A2rlError(f"{path} is not a readable tar file: {exc}") from exc


def verify_archive(
    tar: tarfile.TarFile, *, say: Say | None = None
) -> tuple[ExportManifest, dict[str, tarfile.TarInfo]]:
    """Check every member of an export (names, kinds, the manifest, each digest) without writing
    anything; returns the manifest and each object's member, by key."""
    members: dict[str, tarfile.TarInfo] = {}
    digests: dict[str, tuple[str, int]] = {}
    manifest_data: bytes | None = None
    try:
        for member in tar:
            problem = _member_problem(member)
            if problem is not None:
                raise A2rlError(f"refusing the archive: member {member.name!r} is {problem}")
            if member.isdir():
                continue
            f = tar.extractfile(member)
            if f is None:
                raise A2rlError(f"refusing the archive: member {member.name!r} cannot be read")
            with f:
                if member.name == MANIFEST_NAME:
                    if manifest_data is not None:
                        raise A2rlError(f"refusing the archive: {MANIFEST_NAME} appears twice")
                    if member.size > MAX_MANIFEST_BYTES:
                        raise A2rlError(f"refusing the archive: {MANIFEST_NAME} is too large")
                    manifest_data = f.read()
                    continue
                key = member.name[len(OBJECTS_DIR) + 1 :]
                if key in members:
                    raise A2rlError(f"refusing the archive: member {member.name!r} appears twice")
                members[key] = member
                digests[key] = _copy_hashing(f, None, member.size)
    except tarfile.TarError as exc:
        raise A2rlError(f"the archive is damaged: {exc}") from exc
    if manifest_data is None:
        raise A2rlError(f"not an a2rl run export: no {MANIFEST_NAME}")
    try:
        manifest = ExportManifest.from_json(json.loads(manifest_data))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise A2rlError(f"{MANIFEST_NAME} is not valid JSON: {exc}") from exc
    listed = {o.key: o for o in manifest.objects}
    missing = sorted(set(listed) - set(members))
    extra = sorted(set(members) - set(listed))
    if missing:
        raise A2rlError(
            f"refusing the archive: {OBJECTS_DIR}/{missing[0]} is in the manifest but not in the tar"
        )
    if extra:
        raise A2rlError(
            f"refusing the archive: {OBJECTS_DIR}/{extra[0]} is in the tar but not in the manifest"
        )
    for key, entry in listed.items():
        digest, size = digests[key]
        if digest != entry.sha256 or size != entry.size:
            raise A2rlError(
                f"refusing the archive: {OBJECTS_DIR}/{key} does not match its sha256 in the manifest "
                "(tampered or damaged)"
            )
    if say is not None:
        say(f"verified {len(listed)} objects, {format_bytes(manifest.bytes)}")
    return manifest, members


def _stored_sha256(store: ObjectStore, key: str) -> str:
    with tempfile.TemporaryDirectory(prefix="a2rl-import-") as scratch:
        path = Path(scratch) / "object"
        store.get_file(key, path)
        with path.open("rb") as f:
            return _copy_hashing(f, None)[0]


def _existing_conflict(store: ObjectStore, manifest: ExportManifest) -> tuple[str | None, set[str]]:
    """(what differs — None when nothing does —, the keys the store already holds unchanged)."""
    prefix = manifest.prefix
    listed = {o.key: o for o in manifest.objects}
    same: set[str] = set()
    for key, size in store.sizes(prefix):
        rel = key[len(prefix) + 1 :]
        entry = listed.get(rel)
        if entry is None:
            return f"{rel} is not in the archive", same
        if size != entry.size or _stored_sha256(store, key) != entry.sha256:
            return f"{rel} differs", same
        same.add(rel)
    return None, same


def import_run(store: ObjectStore, path: Path, *, say: Say | None = None) -> ImportResult:
    """Verify the export at `path` whole, then write its objects under its prefix (run.json last)."""
    with _open_tar(path) as tar:
        manifest, members = verify_archive(tar, say=say)
        prefix = manifest.prefix
        conflict, present = _existing_conflict(store, manifest)
        if conflict is not None:
            ref = prefix.split("/", 1)[1]
            raise A2rlError(
                f"store {store.uri} already has a run at {prefix} with other contents ({conflict}); "
                f"delete it first (a2rl runs rm {ref}) or import into another store"
            )
        todo = [o for o in manifest.objects if o.key not in present]
        todo.sort(key=lambda o: o.key == RUN_JSON)  # run.json last
        progress = Progress(say, "imported", len(todo), sum(o.size for o in todo))
        for entry in todo:
            f = tar.extractfile(members[entry.key])
            if f is None:  # checked by verify_archive
                raise A2rlError(f"member {OBJECTS_DIR}/{entry.key} cannot be read")
            with f:
                try:
                    store.put_fileobj_verified(
                        f"{prefix}/{entry.key}",
                        f,
                        entry.sha256,
                        size=entry.size,
                        name=f"{OBJECTS_DIR}/{entry.key}",
                    )
                except ContentChangedError as exc:
                    raise A2rlError(f"{path} changed while it was imported: {exc}") from exc
            progress.add(entry.size)
        if todo:
            progress.done()
    return ImportResult(
        prefix=prefix, written=len(todo), bytes=sum(o.size for o in todo), present=len(present)
    )
