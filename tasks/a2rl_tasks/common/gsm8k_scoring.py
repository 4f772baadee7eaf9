"""Scoring GSM8K-format answers, shared by `arith` and `gsm8k`: one record per item (the last
number of the completion before any `Question:` against the number after `####`, see
`a2rl_tasks.common.numbers`) and the summary (accuracy, optional accuracy per group, and the
share of completions with no number at all).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from a2rl_tasks.base import EvalResult
from a2rl_tasks.common.numbers import QUESTION_CUT, extract_last_number, numbers_equal, parse_gold


def score_record(item: dict[str, Any], completion: str, **extra: Any) -> dict[str, Any]:
    """One per-item record: the prediction, whether it matches the gold number, then `extra`."""
    gold = parse_gold(item["answer"])
    pred = extract_last_number(completion, cut=QUESTION_CUT)
    return {
        "id": item["id"],
        "question": item["question"],
        "gold": gold,
        "completion": completion,
        "prediction": pred,
        "correct": numbers_equal(pred, gold),
        **extra,
    }


def summarise(
    records: list[dict[str, Any]], evaluator_version: str, group_keys: Sequence[str] = ()
) -> EvalResult:
    """Accuracy (%), then `accuracy_{key}_{value}` for each record field in `group_keys` that
    is set, then `no_number_rate` (%)."""
    n = len(records)
    correct = sum(1 for r in records if r["correct"])
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        for key in group_keys:
            if r.get(key) is not None:
                groups[f"accuracy_{key}_{r[key]}"].append(bool(r["correct"]))
    metrics = {"accuracy": 100.0 * correct / n if n else 0.0}
    metrics |= {k: 100.0 * sum(v) / len(v) for k, v in sorted(groups.items())}
    metrics["no_number_rate"] = 100.0 * sum(1 for r in records if r["prediction"] is None) / n if n else 0.0
    return EvalResult(
        score=metrics["accuracy"],
        n=n,
        correct=correct,
        evaluator_version=evaluator_version,
        metrics=metrics,
        details=records,
    )
