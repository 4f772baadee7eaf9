"""Which of the host's programs a sandboxed process sees: the system directories and the Python
toolchain, shared by the agent's sandbox (`a2rl_runner.sandbox`) and the eval box
(`a2rl.eval_view`). Both show them read-only, as an allow-list, never the host's whole tree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

#: System directories shown read-only (a link on the host, e.g. merged /usr, stays a link).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def system_layout() -> tuple[tuple[str, ...], dict[str, str]]:
    """(directories to bind, {link: target}) for the system directories present on this host."""
    dirs, links = [], {}
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            links[path] = os.readlink(path)
        elif os.path.isdir(path):
            dirs.append(path)
    return tuple(dirs), links


def python_toolchain() -> tuple[Path, ...]:
    """The Python environment that runs a2rl: the virtualenv, its base interpreter's prefix, and
    the source directories of editable installs (ours: `a2rl`, `a2rl_agents`, …)."""
    found = {Path(sys.prefix), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent}
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if isinstance(mapping, dict):
            found.update(Path(p).resolve() for p in mapping.values())
    return tuple(sorted(found))


def outermost(paths: Iterable[Path]) -> list[Path]:
    """`paths` without those inside another one of them (one bind mount covers both), sorted."""
    unique = sorted({Path(p) for p in paths}, key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for path in unique:
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return sorted(kept)
