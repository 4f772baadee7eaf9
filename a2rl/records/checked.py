"""Reading a manifest into its record with a one-line error: a document that does not fit its
model raises `RecordError` naming where it was read and the first offending field, never
pydantic's multi-line report (these errors reach users through `a2rl: error: …`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from a2rl.records.base import R, RecordError
from a2rl.store.base import ObjectStore


def problem(exc: ValidationError) -> str:
    """The first error of `exc` on one line (`files.train.jsonl.size: Input should be …`)."""
    errors = exc.errors()
    if not errors:
        return "invalid"
    first = errors[0]
    loc = ".".join(str(part) for part in first.get("loc", ())) or "(document)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc}: {first.get('msg', 'invalid')}{more}"


def checked(model: type[R], data: Any, where: str) -> R:
    """`data` (parsed JSON read from `where`) as `model`; `RecordError` on one line otherwise."""
    if not isinstance(data, dict):
        raise RecordError(f"{where} is not a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"{where} is not a valid {model.__name__}: {problem(exc)}") from None


def load_checked(store: ObjectStore, key: str, model: type[R]) -> R:
    """The document at `key` as `model`: `NotFoundError` when absent, a one-line `RecordError` when
    it is not JSON or does not fit."""
    raw = store.get_bytes(key)
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordError(f"{store.url_for(key)} is not valid JSON: {exc}") from None
    return checked(model, data, store.url_for(key))
