"""The unit tier: pure logic and in-process components, no control plane, no MinIO, no training.

`python -m pytest` runs this tier alone (pyproject `testpaths`); `make test` runs every tier.
"""

from __future__ import annotations

import pytest

_HEAVY = ("cluster", "minio")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A unit test that needs the control plane or MinIO belongs in tests/cluster/."""
    del config
    misplaced = [i.nodeid for i in items if "/unit/" in i.nodeid and any(m in i.keywords for m in _HEAVY)]
    if misplaced:
        raise pytest.UsageError(f"move these to tests/cluster/: {', '.join(misplaced)}")
