"""Every watch event of a list call, recorded in a thread (what a test saw happen, in order)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client, watch
from urllib3.exceptions import ProtocolError


class Recorder:
    """Every watch event of `list_fn(*args)` from `resource_version`, in a thread."""

    def __init__(self, list_fn: Any, args: tuple[str, ...], resource_version: str) -> None:
        self.events: list[dict[str, Any]] = []
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(list_fn, args, resource_version), daemon=True)
        self._thread.start()

    def _run(self, list_fn: Any, args: tuple[str, ...], rv: str) -> None:
        stream = self._watch.stream(list_fn, *args, resource_version=rv, timeout_seconds=180)
        try:
            for event in stream:
                obj = event["object"]
                body = obj if isinstance(obj, dict) else client.ApiClient().sanitize_for_serialization(obj)
                self.events.append({"type": event["type"], "object": body, "at": time.time()})
        except ProtocolError:
            pass  # the namespace went, or stop(): the stream ends either way

    def stop(self) -> None:
        self._watch.stop()
        self._thread.join(10)
