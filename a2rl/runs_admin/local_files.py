"""A local run's files on this machine, outside the store: its workspace
(`$A2RL_HOME/workspaces/<name>-<uid>/`, with a full copy of the base model), the sandbox's scratch
folder beside it (`<name>-<uid>.scratch/`) and the logs it writes while it runs
(`$A2RL_HOME/logs/<name>-<uid>/`). Sizes, last activity, and removal without following links."""

from __future__ import annotations

import os
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path

from a2rl import paths
from a2rl.errors import A2rlError


def local_dirs(ref: str) -> list[Path]:
    """The run's folders on this machine (those that exist): workspace, scratch, logs."""
    workspace = paths.workspaces_dir() / ref
    candidates = [workspace, workspace.with_name(f"{ref}.scratch"), paths.run_logs_dir(ref)]
    return [p for p in candidates if p.is_dir() and not p.is_symlink()]


def tree_bytes(root: Path) -> int:
    """Bytes of the files under `root` (apparent sizes; links counted as links, never followed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*filenames, *(d for d in dirnames if (Path(dirpath) / d).is_symlink())]:
            try:
                total += (Path(dirpath) / name).lstat().st_size
            except OSError:
                continue
    return total


def newest_write(root: Path) -> datetime | None:
    """When a file directly in `root` (a logs folder) was last written; None when there is none."""
    newest: float | None = None
    try:
        entries = list(os.scandir(root))
    except OSError:
        return None
    for entry in entries:
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        newest = mtime if newest is None else max(newest, mtime)
    return None if newest is None else datetime.fromtimestamp(newest, UTC)


def local_activity(ref: str) -> datetime | None:
    """The newest write to the run's logs on this machine (None: no logs here)."""
    logs = paths.run_logs_dir(ref)
    return newest_write(logs) if logs.is_dir() else None


def remove_tree(root: Path) -> None:
    """Delete `root` and everything in it: read-only folders (the workspace's `models/`, `data/`)
    are made writable first; links are removed, never followed."""
    if root.is_symlink():
        root.unlink()
        return
    if not root.exists():
        return
    _make_writable(root)
    # Top-down, each folder is made enterable before the walk lists it.
    for dirpath, dirnames, _filenames in os.walk(root, followlinks=False):
        for name in dirnames:
            _make_writable(Path(dirpath) / name)
    try:
        shutil.rmtree(root)
    except OSError as exc:
        raise A2rlError(f"cannot delete {root}: {exc.strerror or exc}") from exc


def _make_writable(folder: Path) -> None:
    try:
        st = folder.lstat()
        if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o700) != 0o700:
            os.chmod(folder, stat.S_IMODE(st.st_mode) | 0o700)
    except OSError:
        return
