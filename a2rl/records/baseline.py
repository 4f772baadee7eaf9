"""`baselines/<task>/<model digest>/<evaluator version>.json`: the store-wide baseline cache.

An entry is a successful baseline result (result.json without `cached`) plus its per-item
`details`; it is written by the grader's baseline evaluation (local mode) and by the operator
(cluster mode), and read by both.
"""

from __future__ import annotations

from typing import Any

from a2rl.constants import BASELINE_INDEX
from a2rl.records.result import ResultRecord


class BaselineEntry(ResultRecord):
    #: The per-item evaluation records (details.jsonl lines).
    details: list[dict[str, Any]] = []

    @classmethod
    def of(cls, result: ResultRecord, details: list[dict[str, Any]]) -> BaselineEntry:
        """The cache entry of a successful baseline `result` (its `cached` flag left out)."""
        fields = result.to_json()
        fields.pop("cached", None)
        return cls.model_validate({**fields, "details": details})

    def result(self, model_digest: str) -> ResultRecord:
        """This run's submission-0 result from the entry (`cached: true`, no details)."""
        fields = self.to_json()
        fields.pop("details", None)
        return ResultRecord.model_validate(
            {**fields, "index": BASELINE_INDEX, "model_digest": model_digest, "cached": True}
        )
