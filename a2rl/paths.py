"""Default locations on one machine. `A2RL_HOME` holds run state; `A2RL_CACHE_DIR` holds caches."""

from __future__ import annotations

import os
from pathlib import Path

from a2rl.constants import ENV_CACHE_DIR


def home() -> Path:
    """Run state of local mode: the default store and the workspaces (`~/.a2rl`)."""
    return Path(os.environ.get("A2RL_HOME", Path.home() / ".a2rl")).expanduser()


def default_store_uri() -> str:
    return (home() / "store").as_uri()


def last_store_file() -> Path:
    """The store the last `a2rl run` used (one line: its URI), so `a2rl report`/`logs` can hint at it."""
    return home() / "last-store"


def run_logs_dir(ref: str) -> Path:
    """Where a local run (`<name>-<uid>`) writes its logs while it runs (the store gets them at the end)."""
    return home() / "logs" / ref


def workspaces_dir() -> Path:
    return home() / "workspaces"


def cache_dir() -> Path:
    """Rebuildable caches keyed by version (`~/.cache/a2rl`): models, staged data, venv wheels, testenv."""
    return Path(os.environ.get(ENV_CACHE_DIR, Path.home() / ".cache" / "a2rl")).expanduser()


def models_cache() -> Path:
    return cache_dir() / "models"


def data_cache() -> Path:
    return cache_dir() / "data"
