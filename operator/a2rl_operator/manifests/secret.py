"""The run's store Secrets: where records go and (unless the run names its own Secret) credentials.

- `<run>-store`: the set-up and recorder containers (`store_env_from`). Its keys are the run's own,
  scoped to the run's prefix (`a2rl.store.scoped`, `RunCredentials`) when the store allows it,
  else the operator's.
- `<run>-grading-store`: the eval and report pods (`grading_store_env_from`): the operator's keys,
  which can read the held-out artifact. Created with the run's first eval or report Job
  (`grading.kube.ensure_grading_policy`), never mounted into the workspace pod.

The agent container never references either.
"""

from __future__ import annotations

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import (
    COMPONENT_EVAL,
    COMPONENT_RECORDER,
    ENV_S3_ACCESS_KEY,
    ENV_S3_SECRET_KEY,
    ENV_STORE_URI,
)
from a2rl.store.scoped import RunCredentials
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import SUFFIX_STORE, Body, Manifest, child_name, object_meta

SUFFIX_GRADING_STORE = "grading-store"


def store_secret_name(body: Body) -> str:
    return child_name(body["metadata"]["name"], SUFFIX_STORE)


def grading_store_secret_name(body: Body) -> str:
    return child_name(body["metadata"]["name"], SUFFIX_GRADING_STORE)


def store_uri(spec: BenchRunSpec, config: OperatorConfig) -> str | None:
    return spec.store.uri or config.store_uri


def _secret(body: Body, name: str, component: str, data: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(body, name, component),
        "type": "Opaque",
        "immutable": True,
        "stringData": data,
    }


def _data(spec: BenchRunSpec, config: OperatorConfig, credentials: RunCredentials | None) -> dict[str, str]:
    data: dict[str, str] = {}
    uri = store_uri(spec, config)
    if uri is not None:
        data[ENV_STORE_URI] = uri
    if spec.store.secret_ref is None:
        data.update(config.store_credentials)
        if credentials is not None:
            data.update(
                {ENV_S3_ACCESS_KEY: credentials.access_key, ENV_S3_SECRET_KEY: credentials.secret_key}
            )
    return data


def store_secret(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, credentials: RunCredentials | None = None
) -> Manifest:
    """`<run>-store`: the run's own keys when `credentials` is given, else the operator's."""
    return _secret(body, store_secret_name(body), COMPONENT_RECORDER, _data(spec, config, credentials))


def grading_store_secret(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Manifest:
    """`<run>-grading-store`: the operator's keys (or only the URI with the run's own Secret)."""
    return _secret(body, grading_store_secret_name(body), COMPONENT_EVAL, _data(spec, config, None))


def _env_from(name: str, spec: BenchRunSpec) -> list[Manifest]:
    env_from: list[Manifest] = [{"secretRef": {"name": name}}]
    if spec.store.secret_ref is not None:
        env_from.append({"secretRef": {"name": spec.store.secret_ref}})
    return env_from


def store_env_from(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """The run's store Secret (URI + credentials), then the run's own Secret when it names one."""
    return _env_from(store_secret_name(body), spec)


def grading_store_env_from(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """The grading store Secret (URI + the operator's credentials), then the run's own Secret."""
    return _env_from(grading_store_secret_name(body), spec)
