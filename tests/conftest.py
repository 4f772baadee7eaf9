"""Shared pytest configuration: offline by default, GPU tests skip cleanly without a GPU."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from a2rl.constants import ENV_HELDOUT_SECRET_FILE

# Nothing in the tests may reach a model hub or dataset host.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Session-wide read-only fixtures: the default tiny model, the staged arith data.
pytest_plugins = ["tests.support.shared_fixtures"]
if (Path(__file__).parent / "testenv" / "fixtures.py").exists():
    # The real control plane and MinIO, and the grading fixtures built on them.
    pytest_plugins += ["tests.testenv.fixtures", "tests.support.grading_fixtures"]


#: Chooses the held-out secret of a test session (generated held-out sets derive from it:
#: `a2rl_tasks.staging`): unset, the fixed `TEST_HELDOUT_SECRET`, the same on every machine;
#: `random`, a fresh one (`make test-secret-check`: finds tests whose expected figures hold only
#: for one secret); `machine`, this machine's own `<cache>/keys/heldout-seed`; else a hex secret.
TEST_SECRET_ENV = "A2RL_TEST_HELDOUT_SECRET"
TEST_HELDOUT_SECRET = hashlib.sha256(b"a2rl tests: the held-out secret every machine shares").hexdigest()
_SECRET_DIR = pytest.StashKey[str]()


def session_heldout_secret(choice: str | None) -> str | None:
    """The hex secret of a test session for `A2RL_TEST_HELDOUT_SECRET=choice` (None: the machine's)."""
    if not choice:
        return TEST_HELDOUT_SECRET
    if choice == "machine":
        return None
    if choice == "random":
        return secrets.token_hex(32)
    try:
        if len(bytes.fromhex(choice)) >= 16:
            return choice
    except ValueError:
        pass
    raise pytest.UsageError(f"{TEST_SECRET_ENV}: random, machine or at least 32 hex digits (got {choice!r})")


def pytest_configure(config: pytest.Config) -> None:
    """Every test (and every process it starts) stages held-out data from the session's secret,
    never from whatever `~/.cache/a2rl/keys/` this machine happens to hold."""
    secret = session_heldout_secret(os.environ.get(TEST_SECRET_ENV))
    if secret is None:
        return
    config.stash[_SECRET_DIR] = tempfile.mkdtemp(prefix="a2rl-test-secret-")
    path = Path(config.stash[_SECRET_DIR]) / "heldout-secret"
    path.write_text(secret + "\n")
    os.environ[ENV_HELDOUT_SECRET_FILE] = str(path)
    if os.environ.get(TEST_SECRET_ENV) == "random":
        print(f"held-out secret of this session: {TEST_SECRET_ENV}={secret} repeats it")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SECRET_DIR in config.stash:
        os.environ.pop(ENV_HELDOUT_SECRET_FILE, None)
        shutil.rmtree(config.stash[_SECRET_DIR], ignore_errors=True)


def _has_cuda_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _has_cuda_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (vLLM); none on this machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _isolated_a2rl_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Runs made by tests go to a throw-away A2RL_HOME; caches (A2RL_CACHE_DIR) are shared."""
    os.environ["A2RL_HOME"] = str(tmp_path_factory.mktemp("a2rl-home"))
