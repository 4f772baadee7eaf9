"""Artifact retention on deletion: the BenchRun's final record is written to the object store.

The recorder writes `run.json` when a run starts; when the BenchRun is deleted, the finalizer
adds `benchrun.json` beside it (metadata, spec and the final status with every condition), so
the store keeps the whole story after the custom resource is gone. Store records are never
deleted with a BenchRun.

`final_record` and `record_key` are pure; `retain` does the one write.
"""

from __future__ import annotations

from typing import Any

from a2rl.constants import ENV_S3_ACCESS_KEY, ENV_S3_ENDPOINT, ENV_S3_SECRET_KEY
from a2rl.records.base import write_record
from a2rl.records.benchrun import FinalRunRecord
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests import parse_spec
from a2rl_operator.manifests.secret import store_uri

RECORD_NAME = "benchrun.json"
S3_CREDENTIALS = frozenset({ENV_S3_ENDPOINT, ENV_S3_ACCESS_KEY, ENV_S3_SECRET_KEY})


def record_key(run: dict[str, Any]) -> str:
    meta = run["metadata"]
    return f"{RunLayout(meta['namespace'], meta['name'], meta['uid']).prefix}/{RECORD_NAME}"


def final_record(run: dict[str, Any]) -> FinalRunRecord:
    """benchrun.json of the BenchRun body `run` (a2rl.records.benchrun)."""
    return FinalRunRecord.of(run)


def retention_target(run: dict[str, Any], config: OperatorConfig) -> str | None:
    """The store URI the operator can write the record to; None when it cannot: no store, an S3
    store without credentials in the operator's environment, or a run that names its own
    credentials Secret (the operator never reads Secrets)."""
    try:
        spec = parse_spec(run)
    except ValueError:
        return None  # never accepted: nothing was recorded
    if spec.store.secret_ref is not None:
        return None
    uri = store_uri(spec, config)
    if uri is not None and uri.startswith("s3://") and set(config.store_credentials) < S3_CREDENTIALS:
        return None  # no credentials: retrying cannot help, so there is no record to wait for
    return uri


def retain(run: dict[str, Any], config: OperatorConfig) -> str | None:
    """Write the final record; returns its URL, None when there is nowhere to write it.
    Raises when the store refuses or cannot be reached (the finalizer retries, bounded)."""

    uri = retention_target(run, config)
    if uri is None:
        return None
    store = open_store(uri)
    key = record_key(run)
    write_record(store, key, final_record(run))
    return store.url_for(key)
