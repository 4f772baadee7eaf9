"""JSON-lines files: one object per line, UTF-8."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if limit is not None and len(rows) >= limit:
                break
            if line.strip():
                rows.append(json.loads(line))
    return rows


def read_heldout(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The held-out rows of `path` (the first `limit`); an error when it is missing or empty."""
    if not path.is_file():
        raise A2rlError(f"held-out data not found: {path}")
    items = read_jsonl(path, limit)
    if not items:
        raise A2rlError(f"held-out data is empty: {path}")
    return items
