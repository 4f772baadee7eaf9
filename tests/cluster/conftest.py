"""The cluster tier: the real kube-apiserver/etcd/controller-manager/scheduler with kwok nodes and a
real MinIO, built by `hack/testenv build` (fixtures in tests/testenv/fixtures.py and
tests/support/grading_fixtures.py, loaded by the root conftest)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here says what it needs (`cluster`, `minio` or both), so `-m` selects it."""
    del config
    unmarked = [
        i.nodeid for i in items if "/cluster/" in i.nodeid and not {"cluster", "minio"} & set(i.keywords)
    ]
    if unmarked:
        raise pytest.UsageError(f"mark these cluster and/or minio: {', '.join(unmarked)}")
