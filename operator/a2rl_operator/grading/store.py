"""The operator's reads and writes in a run's object store (grading only).

The operator opens stores with its own credentials (`AWS_*` in its environment, the same it
copies into each run's store Secret). It reads `result.json` (scores are written by eval Jobs,
never by the operator), serves the baseline from the store-wide cache, writes `run.json` for the
report, and archives container logs under `logs/`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from a2rl_grader.baseline import read_baseline_entry
from a2rl_grader.evaluate import write_result
from a2rl_grader.report.write import read_report_at

from a2rl.constants import BASELINE_INDEX
from a2rl.errors import NotFoundError
from a2rl.records.base import read_record, write_record
from a2rl.records.baseline import BaselineEntry
from a2rl.records.report import ReportRecord
from a2rl.records.result import ResultRecord
from a2rl.records.run import RunRecord
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store
from a2rl.trajectory.streams import event_lines

#: The report's main file (a2rl_grader.report.write.REPORT_JSON).
REPORT_JSON = "report.json"


@functools.lru_cache(maxsize=32)
def open_cached(uri: str) -> ObjectStore:
    """One store object per URI for the operator's lifetime (S3 clients are thread-safe)."""

    return open_store(uri)


class RunStore:
    def __init__(self, store: ObjectStore, layout: RunLayout) -> None:
        self.store = store
        self.layout = layout

    @classmethod
    def open(cls, uri: str, layout: RunLayout) -> RunStore:
        return cls(open_cached(uri), layout)

    def url(self, key: str) -> str:
        return self.store.url_for(key)

    # --- results ----------------------------------------------------------------------------

    def read_result(self, index: int) -> ResultRecord | None:
        """Submission `index`'s result.json; None when absent or unreadable (as good as absent: the
        eval Job's result is what counts)."""
        return read_record(self.store, self.layout.submission_result(index), ResultRecord)

    def read_details(self, index: int) -> list[dict[str, Any]]:
        try:
            raw = self.store.get_bytes(self.layout.submission_details(index))
        except NotFoundError:
            return []
        out: list[dict[str, Any]] = []
        for line in raw.decode(errors="replace").splitlines():
            if line.strip():
                item = json.loads(line)
                if isinstance(item, dict):
                    out.append(item)
        return out

    # --- held-out data ----------------------------------------------------------------------

    def has_artifact(self, key: str) -> bool:
        """A staged artifact (`a2rl data stage --store`) is complete once its manifest.json exists."""
        return self.store.exists(f"{key}/manifest.json")

    # --- the baseline cache (a2rl_grader.baseline's keys and entry format) -------------------

    def baseline_from_cache(self, cache_key: str, model_digest: str) -> ResultRecord | None:
        """Record a cached baseline as this run's submission 0; its result (None: not cached)."""

        entry = read_baseline_entry(self.store, cache_key)
        if entry is None:
            return None
        result = entry.result(model_digest)
        write_result(self.store, self.layout, BASELINE_INDEX, result, entry.details)
        return result

    def cache_baseline(self, cache_key: str, result: ResultRecord) -> bool:
        """Store a successful baseline result (with its per-item details) in the cache, unless there."""
        if result.score is None or result.error or self.store.exists(cache_key):
            return False
        write_record(self.store, cache_key, BaselineEntry.of(result, self.read_details(BASELINE_INDEX)))
        return True

    # --- end of run -------------------------------------------------------------------------

    def write_run_json(self, record: RunRecord) -> RunRecord:
        """Write run.json; fields another writer put there stay unless `record` knows better
        (non-null). Returns what was written."""
        existing = read_record(self.store, self.layout.run_json, RunRecord)
        fields = {k: v for k, v in record.to_json().items() if v is not None}
        merged = RunRecord.from_json({**(existing.to_json() if existing is not None else {}), **fields})
        write_record(self.store, self.layout.run_json, merged)
        return merged

    def write_log(self, component: str, text: str) -> str:
        key = self.layout.log(component)
        self.store.put_bytes(key, text.encode())
        return key

    def write_agent_trajectory(self, agent_log: str) -> str:
        """`agent/trajectory.jsonl` of a stack run: its event stream, from the agent's log."""
        key = self.layout.agent_trajectory
        self.store.put_bytes(key, event_lines(agent_log.encode()))
        return key

    @property
    def report_key(self) -> str:
        return f"{self.layout.report_dir}/{REPORT_JSON}"

    def read_report(self) -> ReportRecord | None:
        """report.json of the current schema (None: absent, unreadable, or another schema)."""

        return read_report_at(self.store, self.report_key)

    def report_uri(self) -> str:
        return self.url(self.report_key)
