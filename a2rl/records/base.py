"""`Record`: the base of every store document model, and reading/writing records in a store.

A record keeps exactly what its document holds: fields a writer left out stay out when the record
is written again (`to_json` dumps only the fields that were set), and fields no model knows are
kept (`extra="allow"`), so reading and rewriting a document never changes it. The JSON written is
`ObjectStore.put_json`'s (sorted keys, two-space indent), as before the models existed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from a2rl.errors import A2rlError, NotFoundError
from a2rl.store.base import ObjectStore

log = logging.getLogger(__name__)

R = TypeVar("R", bound="Record")


class RecordError(A2rlError):
    """A store document that is not JSON, not an object, or does not fit its model."""


class Record(BaseModel):
    """A JSON document of the store, snake_case field names as stored."""

    model_config = ConfigDict(extra="allow")

    def to_json(self) -> dict[str, Any]:
        """The document as JSON values: the fields that were set (None included), extras kept."""
        return self.model_dump(mode="json", exclude_unset=True)

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
        """Validate a document (raises `pydantic.ValidationError` when it does not fit)."""
        return cls.model_validate(dict(data))


def validation_problem(exc: ValidationError) -> str:
    """The first error of `exc` on one line (`files.train.jsonl.size: Input should be …`)."""
    errors = exc.errors()
    if not errors:
        return "invalid"
    first = errors[0]
    loc = ".".join(str(part) for part in first.get("loc", ())) or "(document)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc}: {first.get('msg', 'invalid')}{more}"


def parse_record(model: type[R], data: Any, where: str) -> R:
    """`data` (parsed JSON read from `where`) as `model`; a one-line `RecordError` otherwise (these
    errors reach users through `a2rl: error: …`, never as pydantic's multi-line report)."""
    if not isinstance(data, dict):
        raise RecordError(f"{where} is not a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"{where} is not a valid {model.__name__}: {validation_problem(exc)}") from None


def load_record(store: ObjectStore, key: str, model: type[R]) -> R:
    """The document at `key` as `model`; `NotFoundError` when absent, `RecordError` when unreadable."""
    raw = store.get_bytes(key)
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordError(f"{store.url_for(key)} is not valid JSON: {exc}") from None
    return parse_record(model, data, store.url_for(key))


def read_record(store: ObjectStore, key: str, model: type[R]) -> R | None:
    """The document at `key` as `model`; None when absent or unreadable (logged)."""
    try:
        return load_record(store, key, model)
    except NotFoundError:
        return None
    except RecordError as exc:
        log.warning("%s", exc)
        return None


def write_record(store: ObjectStore, key: str, record: Record) -> None:
    """Write `record` at `key` (the same bytes `store.put_json(key, record.to_json())` writes)."""
    store.put_json(key, record.to_json())
