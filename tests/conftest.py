"""Shared pytest configuration: offline by default, GPU tests skip cleanly without a GPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in the tests may reach a model hub or dataset host.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Session-wide read-only fixtures: the default tiny model, the staged arith data.
pytest_plugins = ["tests.support.shared_fixtures"]
if (Path(__file__).parent / "testenv" / "fixtures.py").exists():
    # The real control plane and MinIO, and the grading fixtures built on them.
    pytest_plugins += ["tests.testenv.fixtures", "tests.support.grading_fixtures"]


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
