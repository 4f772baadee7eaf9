"""A persistent judge cache: one JSON file per judged request, so a re-evaluation costs nothing.

The key is the sha256 of the canonical JSON of everything that decides the judge's answer: the
judge model, the request parameters and the rendered messages — which hold the instruction (or
question), both outputs (model and reference, or prediction and gold) and the prompt template.
Identical requests therefore share one entry across evaluations, submissions and runs.

Layout: `<dir>/<key[:2]>/<key>.json` = `{"model", "reply", "created_at"}`. Entries are written to a
temp file and renamed into place, so concurrent evaluations never see a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

KEY_VERSION = 1


def cache_key(request: Mapping[str, Any]) -> str:
    canonical = json.dumps({"v": KEY_VERSION, **request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class JudgeCache:
    """Replies by request key; `root=None` keeps nothing (every request goes to the judge)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        if self.root is None:
            return None
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        reply = entry.get("reply") if isinstance(entry, dict) else None
        return reply if isinstance(reply, str) else None

    def put(self, key: str, model: str, reply: str) -> None:
        if self.root is None:
            return
        path = self._path(key)
        entry = {"model": model, "reply": reply, "created_at": time.time()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}-", suffix=".tmp", dir=path.parent)
        except OSError:
            return  # a read-only cache (the eval box shows it so, `a2rl.eval_view`): used, not kept
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, ensure_ascii=False)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
