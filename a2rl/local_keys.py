"""Machine-local secrets under `<cache dir>/keys/` (directory 0700, files 0600), made on first use.

- `baseline-cache`: the MAC key of local mode's baseline cache entries (`a2rl_grader.baseline`);
- `heldout-seed`: the secret generated held-out sets derive their seed from
  (`a2rl_tasks.staging`); `A2RL_HELDOUT_SECRET_FILE` (or `a2rl data stage --heldout-secret-file`)
  names another file, e.g. one secret shared by the machines that stage a cluster's data.

The local sandbox keeps the cache directory out of the agent's sight. An agent run with
`--no-sandbox` runs as the same user and *can* read these files: it can then forge a baseline
cache entry or regenerate a held-out set (it can read the staged held-out data anyway); see
docs/local-mode.md. Results of a run are sealed with a per-run key that is never on disk
(`a2rl.integrity`).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from a2rl import paths
from a2rl.constants import ENV_HELDOUT_SECRET_FILE
from a2rl.errors import A2rlError

BASELINE_CACHE_KEY = "baseline-cache"
HELDOUT_SEED_KEY = "heldout-seed"
SECRET_BYTES = 32
MIN_SECRET_BYTES = 16


def keys_dir() -> Path:
    return paths.cache_dir() / "keys"


def machine_key(name: str) -> bytes:
    """The machine-local secret `name` (created, 0600, when missing)."""
    directory = keys_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / name
    try:
        return read_secret_file(path)
    except FileNotFoundError:
        pass
    tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, secrets.token_hex(SECRET_BYTES).encode() + b"\n")
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a key another process made first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return read_secret_file(path)


def read_secret_file(path: Path) -> bytes:
    """The secret in `path`: its text, hex-decoded when it is hex (FileNotFoundError when absent)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(4096).strip()
    try:
        secret = bytes.fromhex(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = raw
    if len(secret) < MIN_SECRET_BYTES:
        raise A2rlError(f"the secret in {path} is too short (at least {MIN_SECRET_BYTES} bytes)")
    return secret


def heldout_secret(path: Path | None = None) -> bytes:
    """The held-out seed secret: `path`, else `A2RL_HELDOUT_SECRET_FILE`, else this machine's."""
    named = os.environ.get(ENV_HELDOUT_SECRET_FILE)
    chosen = path or (Path(named) if named else None)
    if chosen is None:
        return machine_key(HELDOUT_SEED_KEY)
    try:
        return read_secret_file(chosen.expanduser())
    except OSError as exc:
        raise A2rlError(f"cannot read the held-out secret file {chosen}: {exc.strerror or exc}") from None
