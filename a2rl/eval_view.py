"""What the eval box (`a2rl.eval_sandbox`) shows of the host's file system: an allow-list.

Under a root launcher the eval process is host root by its uid (capabilities dropped), so it
could read every root-owned file it sees: `/root`, `/var/lib`, `/run/secrets`, other runs' 0700
directories under `/tmp`. It therefore sees only what an evaluation reads, read-only: the system
directories and the Python toolchain (`a2rl.host_system`), the judge's cache, the caches and
files the environment names (`VIEW_ENV_PATHS`), and what the launcher names (the held-out
data, the base model, the interpreter) with the files their links lead to. The box's
root is an empty tmpfs, read-only: `/root`, `/home`, `/tmp`, `/var`, `/run`, … hold nothing but
the directories on the way to those paths. `/etc` is `a2rl.host_etc`'s allow-list, the store and
the writable directories are the box's own binds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from a2rl import paths
from a2rl.constants import ENV_JUDGE_CACHE_DIR, ENV_SEARCH_CORPUS
from a2rl.host_system import outermost, python_toolchain, system_layout

#: Environment variables naming caches or files an evaluation reads, with their default where
#: unset (None: nothing): Hugging Face's caches, the judge's cache, the search corpus of
#: deepsearchqa, ALFWorld's data directory (the `alfworld` package insists that it exists), CUDA
#: where it is not under /usr. `LD_LIBRARY_PATH`'s directories are shown too.
VIEW_ENV_PATHS: dict[str, str | None] = {
    "HF_HOME": None, "HF_HUB_CACHE": None, "HUGGINGFACE_HUB_CACHE": None, "TRANSFORMERS_CACHE": None,
    "HF_DATASETS_CACHE": None, ENV_JUDGE_CACHE_DIR: None, ENV_SEARCH_CORPUS: None,
    "ALFWORLD_DATA": "~/.cache/alfworld", "CUDA_HOME": None,
}  # fmt: skip
#: Directories that exist inside even with nothing under them (empty).
EMPTY_DIRS = ("/tmp",)


def eval_readable(named: Iterable[Path] = (), env: Mapping[str, str] | None = None) -> list[Path]:
    """The host paths the eval box shows read-only (outside the system directories): the
    toolchain, the judge's cache, the environment's (`VIEW_ENV_PATHS`) and `named` (the
    launcher's: the held-out data, the base model) with the files their links lead to. Not the
    rest of `<cache>`: the machine keys, other held-out splits."""
    env = os.environ if env is None else env
    found = [*python_toolchain(), paths.cache_dir() / "judge"]
    for name, default in VIEW_ENV_PATHS.items():
        value = env.get(name, "").strip() or default
        if value:
            found.append(Path(value))
    found += [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    # A path this wide (`/`, the home) would show everything: the box skips it (and the files its
    # links lead to: nor is it walked), the eval then fails on what it does not find.
    too_wide = {q for p in (Path.home(), paths.cache_dir() / "keys") for q in (p, *p.parents)}
    for path in (Path(p).expanduser().absolute() for p in named):
        if path not in too_wide:
            found += [path, *_linked_files(path)]
    return outermost(p for p in (Path(f).expanduser().absolute() for f in found) if p not in too_wide)


def _linked_files(directory: Path) -> list[Path]:
    """The files that links in `directory` lead to outside it: a Hugging Face snapshot's files
    are links into the cache's `blobs/`, which the box shows at their own paths."""
    if not directory.is_dir():
        return []
    inside = directory.resolve()
    found = []
    for root, dirs, files in os.walk(directory):
        for entry in (Path(root) / name for name in (*dirs, *files)):
            if entry.is_symlink() and (target := entry.resolve()).is_file() and inside not in target.parents:
                found.append(target)
    return found


def view_argv(readable: Sequence[Path]) -> list[str]:
    """bubblewrap arguments of the view (before `/etc`, `/proc`, `/dev` and the box's writable
    binds): the system directories and links, `/sys`, the empty directories, and `readable`
    read-only where present. The caller ends its command line with ``--remount-ro /``, so that the
    root tmpfs (and the directories bubblewrap makes in it) is read-only."""
    dirs, links = system_layout()
    system = [Path(d) for d in (*dirs, *links)]
    argv: list[str] = []
    for link, target in sorted(links.items()):
        argv += ["--symlink", target, link]
    for directory in dirs:
        argv += ["--ro-bind", directory, directory]
    argv += ["--ro-bind-try", "/sys", "/sys"]  # CPU and GPU topology (torch, CUDA)
    for directory in EMPTY_DIRS:
        argv += ["--dir", directory]
    for path in readable:
        if not any(d == path or d in path.parents for d in system):
            argv += ["--ro-bind-try", str(path), str(path)]
    return argv
