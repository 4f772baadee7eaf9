"""The run's store Secrets: where records go and (unless the run names its own Secret) credentials.

Each holds keys of its own, scoped by the store (`a2rl.store.scoped`, `RunCredentials`) when it
allows it, else the operator's (`a2rl_operator.store_access` says why):

- `<run>-store`: the set-up and recorder containers (`store_env_from`): the run's prefix.
- `<run>-grading-store`: the eval pods' `fetch-heldout` init container (`grading_store_env_from`):
  the run's held-out artifact, read-only. Created with the run's first eval or report Job
  (`grading.kube.ensure_grading_policy`).
- `<run>-eval-<index>-store`: the eval container of submission `index` (`eval_store_env_from`):
  that submission's snapshot in, its result out.
- `<run>-report-store`: the report container (`report_store_env_from`): the run's records in,
  `report/` out.

The workspace pod references only the first; the agent container none.
"""

from __future__ import annotations

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import (
    COMPONENT_EVAL,
    COMPONENT_RECORDER,
    COMPONENT_REPORT,
    ENV_S3_ACCESS_KEY,
    ENV_S3_SECRET_KEY,
    ENV_STORE_URI,
    LABEL_SUBMISSION_INDEX,
)
from a2rl.store.scoped import RunCredentials
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import SUFFIX_STORE, Body, Manifest, child_name, object_meta

SUFFIX_GRADING_STORE = "grading-store"
SUFFIX_REPORT_STORE = "report-store"


def store_secret_name(body: Body) -> str:
    return child_name(body["metadata"]["name"], SUFFIX_STORE)


def grading_store_secret_name(body: Body) -> str:
    return child_name(body["metadata"]["name"], SUFFIX_GRADING_STORE)


def eval_store_secret_name(run_name: str, index: int) -> str:
    return child_name(run_name, f"eval-{index:05d}-store")


def report_store_secret_name(run_name: str) -> str:
    return child_name(run_name, SUFFIX_REPORT_STORE)


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


def grading_store_secret(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, credentials: RunCredentials | None = None
) -> Manifest:
    """`<run>-grading-store`: the held-out reader's keys, else the operator's (or only the URI with
    the run's own Secret)."""
    return _secret(body, grading_store_secret_name(body), COMPONENT_EVAL, _data(spec, config, credentials))


def eval_store_secret(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, index: int, credentials: RunCredentials | None
) -> Manifest:
    """`<run>-eval-<index>-store`: submission `index`'s eval user's keys, else the operator's."""
    secret = _secret(body, eval_store_secret_name(body["metadata"]["name"], index), COMPONENT_EVAL,
                     _data(spec, config, credentials))  # fmt: skip
    secret["metadata"]["labels"][LABEL_SUBMISSION_INDEX] = str(index)
    return secret


def report_store_secret(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, credentials: RunCredentials | None
) -> Manifest:
    """`<run>-report-store`: the report user's keys, else the operator's."""
    name = report_store_secret_name(body["metadata"]["name"])
    return _secret(body, name, COMPONENT_REPORT, _data(spec, config, credentials))


def _env_from(name: str, spec: BenchRunSpec) -> list[Manifest]:
    env_from: list[Manifest] = [{"secretRef": {"name": name}}]
    if spec.store.secret_ref is not None:
        env_from.append({"secretRef": {"name": spec.store.secret_ref}})
    return env_from


def store_env_from(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """The run's store Secret (URI + credentials), then the run's own Secret when it names one."""
    return _env_from(store_secret_name(body), spec)


def grading_store_env_from(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """The held-out reader's Secret (`fetch-heldout`), then the run's own Secret."""
    return _env_from(grading_store_secret_name(body), spec)


def eval_store_env_from(body: Body, spec: BenchRunSpec, index: int) -> list[Manifest]:
    """Submission `index`'s eval Secret, then the run's own Secret."""
    return _env_from(eval_store_secret_name(body["metadata"]["name"], index), spec)


def report_store_env_from(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """The report Secret, then the run's own Secret."""
    return _env_from(report_store_secret_name(body["metadata"]["name"]), spec)
