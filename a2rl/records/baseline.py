"""`baselines/<task>/<model digest>/<evaluator version>[-data-<held-out digest>].json`: the
store-wide baseline cache.

An entry is a successful baseline result (result.json without `cached`): the score and its
summary metrics, never per-item `details` (they hold the gold answers; entries written before
this rule may still carry them, and nothing reads them). It is written by the grader's baseline
evaluation (local mode, keyed by the held-out data's digest too, with a MAC under a
machine-local key: `mac`) and by the operator (cluster mode, no MAC: the store is out of the
agent's reach), and read by both.
"""

from __future__ import annotations

from typing import Any

from a2rl import integrity
from a2rl.constants import BASELINE_INDEX
from a2rl.records.result import ResultRecord

#: Fields of a result that are about one run, not about the cached evaluation.
_RUN_ONLY = ("cached", "cache_problem", "details", "mac")


class BaselineEntry(ResultRecord):
    #: Old entries only: per-item records. New entries never have them (gold answers).
    details: list[dict[str, Any]] = []
    #: Local mode: the entry's MAC (`a2rl.integrity`) bound to its cache key.
    mac: str | None = None

    @classmethod
    def of(cls, result: ResultRecord, details: list[dict[str, Any]] | None = None) -> BaselineEntry:
        """The cache entry of a successful baseline `result`: no per-item `details` (`details`
        is accepted and dropped), no `cached` flag."""
        del details
        fields = {k: v for k, v in result.to_json().items() if k not in _RUN_ONLY}
        return cls.model_validate(fields)

    def signed(self, key: bytes, cache_key: str) -> BaselineEntry:
        """This entry with its MAC under `key`, bound to `cache_key`."""
        mac = integrity.sign(key, ("baseline-cache", cache_key), self._body())
        return self.model_copy(update={"mac": mac})

    def verified(self, key: bytes, cache_key: str) -> bool:
        return integrity.verify(key, self.mac, ("baseline-cache", cache_key), self._body())

    def _body(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_json().items() if k != "mac"}

    def result(self, model_digest: str) -> ResultRecord:
        """This run's submission-0 result from the entry (`cached: true`, no details)."""
        fields = {k: v for k, v in self.to_json().items() if k not in _RUN_ONLY}
        return ResultRecord.model_validate(
            {**fields, "index": BASELINE_INDEX, "model_digest": model_digest, "cached": True}
        )
