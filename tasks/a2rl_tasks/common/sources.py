"""Reading a task's data source: JSON-lines text, rows validated one object at a time, the
no-source error, and files fetched from an object store (`s3://bucket/prefix`) into a
temporary directory.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl.store.open import open_store

S3_SCHEME = "s3://"


def require_source(source: str | None, no_source: str) -> str:
    """`source` stripped of white space; `A2rlError(no_source)` when it is missing or blank."""
    if source is None or not source.strip():
        raise A2rlError(no_source)
    return source.strip()


def require_file(path: Path, what: str) -> Path:
    """`path` when it is a file, else `A2rlError("{what} file not found: {path}")`."""
    if not path.is_file():
        raise A2rlError(f"{what} file not found: {path}")
    return path


def parse_json_lines(text: str, origin: Path | str) -> list[Any]:
    """One JSON value per non-blank line; a line that is not JSON is an error naming `origin:N`."""
    rows: list[Any] = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise A2rlError(f"{origin}:{n}: not JSON: {exc}") from exc
    return rows


def validate_rows(
    rows: Iterable[Any], origin: str, convert: Callable[[int, dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """`convert(n, row)` of every row (n counts from 1); each must be an object, and one at least."""
    out: list[dict[str, Any]] = []
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise A2rlError(f"{origin}: row {n} is not an object")
        out.append(convert(n, row))
    if not out:
        raise A2rlError(f"{origin}: no rows")
    return out


@contextmanager
def fetched_from_store(uri: str, names: Iterable[str], *, prefix: str) -> Iterator[Path]:
    """A temporary directory (removed on exit) holding the files `names` of the store at `uri`."""

    store = open_store(uri)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for name in names:
            store.get_file(name, Path(tmp) / name)
        yield Path(tmp)
