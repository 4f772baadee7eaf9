"""Scoring GSM8K-format answers, shared by `arith` and `gsm8k`: one record per item (the last
number of the completion before any `Question:` against the number after `####`) and the summary
(accuracy, optional accuracy per group, and the share of completions with no number at all).

Two rule sets: `A2RL_RULES` (`a2rl_tasks.common.numbers`: thousands separators understood) and
`REFERENCE_RULES` (OpenCompass's, `a2rl_tasks.common.opencompass`: `65,000` reads `000`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from a2rl_tasks.base import EvalResult
from a2rl_tasks.common import opencompass as oc
from a2rl_tasks.common.numbers import QUESTION_CUT, extract_last_number, numbers_equal, parse_gold


@dataclass(frozen=True)
class AnswerRules:
    """How a completion's prediction and an item's gold answer are read and compared."""

    #: The prediction of a completion; None when it holds no number.
    prediction: Callable[[str], str | None]
    #: The gold number of a GSM8K-format answer (`…\n#### 85`); ValueError when it has none.
    gold: Callable[[str], str]
    equal: Callable[[str | None, str], bool]


def _oc_prediction(completion: str) -> str | None:
    pred = oc.gsm8k_postprocess(oc.extract_non_reasoning_content(completion))
    return None if pred == oc.NULL else pred


def _oc_gold(answer: str) -> str:
    if "#### " not in answer:
        raise ValueError(f"answer has no '#### ' line: {answer!r}")
    return oc.gsm8k_dataset_postprocess(answer)


def _oc_equal(pred: str | None, gold: str) -> bool:
    return pred is not None and oc.gsm8k_is_equal(pred, gold)


A2RL_RULES = AnswerRules(lambda c: extract_last_number(c, cut=QUESTION_CUT), parse_gold, numbers_equal)
#: The reference's OpenCompass rules: `extract_non_reasoning_content`, `gsm8k_postprocess`,
#: `gsm8k_dataset_postprocess`, `Gsm8kEvaluator.is_equal`.
REFERENCE_RULES = AnswerRules(_oc_prediction, _oc_gold, _oc_equal)


def score_record(
    item: dict[str, Any], completion: str, rules: AnswerRules = A2RL_RULES, **extra: Any
) -> dict[str, Any]:
    """One per-item record: the prediction, whether it matches the gold number, then `extra`."""
    gold = rules.gold(item["answer"])
    pred = rules.prediction(completion)
    return {
        "id": item["id"],
        "question": item["question"],
        "gold": gold,
        "completion": completion,
        "prediction": pred,
        "correct": rules.equal(pred, gold),
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
