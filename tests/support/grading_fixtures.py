"""pytest plugin: the fixtures of the tests that grade in the cluster, loaded from the root
conftest (`pytest_plugins`).

`admin` is the control plane's admin client; `minio_env`, `store`, `volumes` and `operator`
(the operator with grading on, MinIO as its store) are what `test_operator_submissions.py` and
`test_cluster_e2e.py` share. All are module-scoped; a test module that needs a different
operator or other volumes defines its own fixture of the same name (`test_operator_e2e.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from a2rl_tasks import get_task
from kubernetes import client

from a2rl.store.base import ObjectStore
from a2rl.store.open import open_store
from tests.support.grading_support import DRAIN_TIMEOUT_S, GRADER_IMAGE, STORE_URI
from tests.support.operator_install import OperatorProcess
from tests.support.operator_support import persistent_volumes, started_operator


@pytest.fixture(scope="module")
def admin(control_plane: Any) -> client.ApiClient:
    return control_plane.api_client()


@pytest.fixture(scope="module")
def minio_env(minio: Any) -> Iterator[dict[str, str]]:
    """MinIO's endpoint and credentials in this process's environment (the operator inherits them)."""
    env = {
        "AWS_ENDPOINT_URL": minio.endpoint,
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env


@pytest.fixture(scope="module")
def store(minio_env: dict[str, str]) -> ObjectStore:
    """The operator's store, with the arith held-out data staged (as `a2rl data stage --store` does)."""
    from a2rl_tasks.artifacts import stage_to_store

    s = open_store(STORE_URI)
    stage_to_store(get_task("arith"), s, source=None, seed=0)
    return s


@pytest.fixture(scope="module")
def volumes(admin: client.ApiClient) -> Iterator[None]:
    """PersistentVolumes the workspace PVCs bind to (the test cluster has no provisioner)."""
    with persistent_volumes(admin, "grading-ws", 12):
        yield


@pytest.fixture(scope="module")
def operator(
    volumes: None,
    store: ObjectStore,
    control_plane: Any,
    admin: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The operator with grading on (`A2RL_GRADER_IMAGE`), MinIO as its store."""
    with grading_operator(admin, tmp_path_factory) as proc:
        yield proc


@contextmanager
def grading_operator(
    admin: client.ApiClient, tmp_path_factory: pytest.TempPathFactory, env: dict[str, str] | None = None
) -> Iterator[OperatorProcess]:
    """What the `operator` fixture starts, with `env` on top (a module's own `operator` fixture:
    `test_kueue.py` sets the queueing limit)."""
    grading_env = {
        "A2RL_GRADER_IMAGE": GRADER_IMAGE,
        "A2RL_GRADING_RESYNC": "2",
        "A2RL_GRADING_DRAIN_TIMEOUT": str(DRAIN_TIMEOUT_S),
        "A2RL_EVAL_TIMEOUT": "600",
        **(env or {}),
    }
    args = [
        "--store-uri",
        STORE_URI,
        "--setup-allowance",
        "5",
        "--recorder-drain-timeout",
        "1",
        "--workspace-size",
        "1Gi",
        "--store-egress",
        "127.0.0.1/32:9000",
        "--apiserver-egress",
        "127.0.0.1/32:6443",
    ]
    tmp = tmp_path_factory.mktemp("grading-operator")
    with started_operator(admin, tmp, args, env=grading_env, log_tail_lines=60) as proc:
        yield proc
