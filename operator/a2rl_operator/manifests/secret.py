"""The run's store Secret: where records go and (unless the run names its own Secret) credentials.

Mounted as environment (`store_env_from`) into the set-up and recorder containers and the eval
and report pods; the agent container never references it.
"""

from __future__ import annotations

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import COMPONENT_RECORDER, ENV_STORE_URI
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import SUFFIX_STORE, Body, Manifest, child_name, object_meta


def store_secret_name(body: Body) -> str:
    return child_name(body["metadata"]["name"], SUFFIX_STORE)


def store_uri(spec: BenchRunSpec, config: OperatorConfig) -> str | None:
    return spec.store.uri or config.store_uri


def store_secret(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Manifest:
    data: dict[str, str] = {}
    uri = store_uri(spec, config)
    if uri is not None:
        data[ENV_STORE_URI] = uri
    if spec.store.secret_ref is None:
        data.update(config.store_credentials)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(body, store_secret_name(body), COMPONENT_RECORDER),
        "type": "Opaque",
        "immutable": True,
        "stringData": data,
    }


def store_env_from(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """The run's store Secret (URI + credentials), then the run's own Secret when it names one."""
    env_from: list[Manifest] = [{"secretRef": {"name": store_secret_name(body)}}]
    if spec.store.secret_ref is not None:
        env_from.append({"secretRef": {"name": spec.store.secret_ref}})
    return env_from
