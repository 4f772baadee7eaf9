"""Where an unprivileged bubblewrap can reach the sandbox's bind sources.

A root runner starts bubblewrap as the sandbox's own unprivileged identity, which cannot enter
directories only root may (`/root/.a2rl/workspaces/<run>`, a pyenv under `/root`, the stack
installs under `/root/.cache`). bubblewrap resolves every source path itself (a descriptor
`--bind-fd` is resolved back to its path, and refused), so `SourceStage` gives each source a
mount point in a directory the identity can enter, and `preexec` — in the child, still root,
before it drops privileges — makes a private mount namespace for it and binds each source onto
its point there. The host's mount table never changes; the stage is empty directories and files.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


class SourceStage:
    """Mount points for `sources`, bound in a private mount namespace by `preexec`."""

    def __init__(self, sources: Sequence[str]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="a2rl-stage-"))
        self.root.chmod(0o711)  # enterable, not listable
        self.paths: list[str] = []
        for i, source in enumerate(sources):
            point = self.root / str(i)
            if os.path.isdir(source):
                point.mkdir(mode=0o755)
            else:
                point.touch(mode=0o644)
            self.paths.append(str(point))
        # Resolved here: the child between fork and exec only calls (no import, no lookup).
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._unshare = self._libc.unshare
        self._mount = self._libc.mount
        self._pairs = [(s.encode(), p.encode()) for s, p in zip(sources, self.paths, strict=True)]

    def preexec(self) -> None:
        """In the child, as root: a private mount namespace with every source on its point."""
        if self._unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
        if self._mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "cannot make the mount namespace private")
        for source, point in self._pairs:
            if self._mount(source, point, None, MS_BIND | MS_REC, None) != 0:
                raise OSError(ctypes.get_errno(), f"cannot stage {source.decode()}")

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
