"""Stage a task's data once per (task, data version, seed) into the local data cache."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from a2rl import paths
from a2rl_tasks import get_task
from a2rl_tasks.base import StagedData, Task

TRAIN = "train"
HELDOUT = "heldout"


def cached_dir(task: Task, seed: int, source: str | None = None) -> Path:
    name = f"{task.data_version}-seed{seed}"
    if source is not None:
        name += "-src" + hashlib.sha256(source.encode()).hexdigest()[:12]
    return paths.data_cache() / task.name / name


def stage_cached(task: Task | str, seed: int = 0, *, source: str | None = None) -> StagedData:
    """`<data cache>/<task>/<data_version>-seed<seed>[-src<hash>]/{train,heldout}`, staged on first use.

    Staging writes into a temp dir that is renamed into place, so a partial staging is never
    reused; when two processes race, the first rename wins and the other copy is discarded.
    """
    if isinstance(task, str):
        task = get_task(task)
    final = cached_dir(task, seed, source)
    staged = StagedData(train_dir=final / TRAIN, heldout_dir=final / HELDOUT)
    if final.is_dir():
        return staged
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.staging-", dir=final.parent))
    try:
        tmp_staged = StagedData(train_dir=tmp / TRAIN, heldout_dir=tmp / HELDOUT)
        tmp_staged.train_dir.mkdir()
        tmp_staged.heldout_dir.mkdir()
        task.stage(tmp_staged, source=source, seed=seed)
        tmp.chmod(0o755)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return staged
