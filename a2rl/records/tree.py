"""A tree manifest as stored inside revision and submission manifests (`TreeManifest.to_json`):
`{"digest": …, "files": [{"path", "sha256", "size", "mode"}, …]}`."""

from __future__ import annotations

from a2rl.records.base import Record
from a2rl.store.cas import TreeEntry, TreeManifest

DEFAULT_MODE = 0o644  # what `restore_tree` assumes of an entry without a mode


class TreeFile(Record):
    path: str
    sha256: str
    size: int
    mode: int = DEFAULT_MODE


class TreeRecord(Record):
    """`a2rl.store.cas.TreeManifest` in its stored form (`digest` is checked by `manifest()`)."""

    digest: str | None = None
    files: list[TreeFile] = []

    @classmethod
    def of(cls, manifest: TreeManifest) -> TreeRecord:
        return cls(
            digest=manifest.digest,
            files=[
                TreeFile(path=e.path, sha256=e.sha256, size=e.size, mode=e.mode) for e in manifest.entries
            ],
        )

    def manifest(self) -> TreeManifest:
        """The `TreeManifest`; `ValueError` when the stored digest does not match the files."""
        tree = TreeManifest(tuple(TreeEntry(f.path, f.sha256, f.size, f.mode) for f in self.files))
        if self.digest is not None and self.digest != tree.digest:
            raise ValueError("tree manifest digest does not match its entries")
        return tree

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)
