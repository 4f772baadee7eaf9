"""The end-to-end tier: real training and evaluation of tiny models on CPU, whole `a2rl run`s,
agents, and the cluster loop with every pod played as a local process. Every test here is `slow`."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    del config
    for item in items:
        if "/e2e/" in item.nodeid:
            item.add_marker(pytest.mark.slow)
