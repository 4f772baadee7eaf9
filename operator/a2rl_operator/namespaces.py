"""Which namespaces are being deleted, as the operator's namespace watch (and refused creates) say.

Once a namespace is terminating, everything in it goes: the operator writes no status and posts no
Event there (each would be refused, and kopf retried every refused Event nine times), and it
reconciles nothing. Artifact retention (the BenchRun finalizer) still runs: records are kept.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any


class TerminatingNamespaces:
    """A thread-safe set of namespace names being deleted."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def __contains__(self, namespace: object) -> bool:
        with self._lock:
            return namespace in self._names

    def mark(self, namespace: str) -> None:
        with self._lock:
            self._names.add(namespace)

    def observe(self, body: Mapping[str, Any], event: str | None) -> None:
        """A watch event of a Namespace: terminating from its deletion until it is gone."""
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        terminating = (
            bool(meta.get("deletionTimestamp")) or (body.get("status") or {}).get("phase") == "Terminating"
        )
        with self._lock:
            if event != "DELETED" and terminating:
                self._names.add(name)
            else:
                self._names.discard(name)
