"""Stage a task's data once per (task, data version, seed) into the local data cache.

A task that generates its held-out split (`Task.secret_heldout`) gets a held-out seed derived
from a secret (`heldout_seed`; the secret is this machine's `<cache>/keys/heldout-seed`, or the
file `A2RL_HELDOUT_SECRET_FILE` / `a2rl data stage --heldout-secret-file` names): the public
`SEED` and the public code regenerate its train split, never its held-out split. Its cache
directory carries a tag derived from the same secret (`-h<tag>`), so staging with another
secret never reuses a staging made with the first. The derived seed is written nowhere.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from a2rl import integrity, paths
from a2rl.local_keys import heldout_secret
from a2rl_tasks import get_task
from a2rl_tasks.base import StagedData, Task

TRAIN = "train"
HELDOUT = "heldout"
HELDOUT_SEED_BYTES = 8


def heldout_seed(task: Task, seed: int, secret: bytes | None = None) -> int | None:
    """The held-out generation seed of a `secret_heldout` task (None for the others): derived from
    `secret` (default: `a2rl.local_keys.heldout_secret()`), the task, its data version and `seed`."""
    if not task.secret_heldout:
        return None
    derived = integrity.derive(
        secret or heldout_secret(), "heldout-seed", task.name, task.data_version, str(seed)
    )
    return int.from_bytes(derived[:HELDOUT_SEED_BYTES], "big")


def _secret_tag(task: Task, seed: int, secret: bytes | None) -> str:
    derived = integrity.derive(
        secret or heldout_secret(), "staging-dir", task.name, task.data_version, str(seed)
    )
    return derived.hex()[:12]


def cached_dir(task: Task, seed: int, source: str | None = None, *, secret: bytes | None = None) -> Path:
    name = f"{task.data_version}-seed{seed}"
    if source is not None:
        name += "-src" + hashlib.sha256(source.encode()).hexdigest()[:12]
    if task.secret_heldout:
        name += "-h" + _secret_tag(task, seed, secret)
    return paths.data_cache() / task.name / name


def stage_into(
    task: Task, staged: StagedData, *, source: str | None, seed: int, secret: bytes | None = None
) -> None:
    """`task.stage` with the held-out seed of `secret` (see `heldout_seed`)."""
    task.stage(staged, source=source, seed=seed, heldout_seed=heldout_seed(task, seed, secret))


def stage_cached(
    task: Task | str, seed: int = 0, *, source: str | None = None, secret: bytes | None = None
) -> StagedData:
    """`<data cache>/<task>/<data_version>-seed<seed>[-src<hash>][-h<tag>]/{train,heldout}`, staged
    on first use.

    Staging writes into a temp dir that is renamed into place, so a partial staging is never
    reused; when two processes race, the first rename wins and the other copy is discarded.
    """
    if isinstance(task, str):
        task = get_task(task)
    final = cached_dir(task, seed, source, secret=secret)
    staged = StagedData(train_dir=final / TRAIN, heldout_dir=final / HELDOUT)
    if final.is_dir():
        return staged
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.staging-", dir=final.parent))
    try:
        tmp_staged = StagedData(train_dir=tmp / TRAIN, heldout_dir=tmp / HELDOUT)
        tmp_staged.train_dir.mkdir()
        tmp_staged.heldout_dir.mkdir()
        stage_into(task, tmp_staged, source=source, seed=seed, secret=secret)
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
