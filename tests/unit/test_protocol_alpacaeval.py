"""AlpacaEval under both protocols: the same model outputs, judged by the same deterministic
loopback judge (the longer output wins), through the reference's rules (the oracle below,
restated from alpaca_eval 0.6.6 as the reference configures it) and through a2rl's modes.

Reference: RD-Agent autorl_bench @471eb30 `benchmarks/alpacaeval/eval.py` calls
`alpaca_eval.evaluate(model_outputs, reference_outputs, annotators_config=annotators_gpt52_fn)`:
- `output_1` = the reference output, `output_2` = the model's (`evaluate` annotates head to head);
- `processors.RandomSwitchTwoColumnsProcessor`: switched iff
  `utils.random_seeded_choice("is_switched_outputs" + instruction + "0", [False, True])`
  (= `random.Random(seed).choices(choices, k=1)[0]`);
- `completion_parsers.json_parser(annotation_key="ordered_models")` then
  `ranking_parser(model_1_name="m")`: preference = rank of `m`; a reply without a readable
  ranking gives NaN, and NaN preferences are left out of the win rate;
- preference `3 - x` for switched items (`_fn_replace_if_switch`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.alpacaeval.reference_judge import USER_TEMPLATE, preference_from_reply
from a2rl_tasks.alpacaeval.task import judge_outputs
from a2rl_tasks.judge.judge import JudgeReply

from tests.support.judge_server import JudgeServer
from tests.support.task_data import eval_row


def oracle_switched(instruction: str) -> bool:
    return random.Random("is_switched_outputs" + instruction + "0").choices([False, True], k=1)[0]


def oracle_preference(
    instruction: str, model_output: str, reference_output: str, judge_rank_m: Any
) -> float | None:
    del model_output, reference_output
    try:
        rank = int(judge_rank_m)
        assert rank in (1, 2)
    except (TypeError, ValueError, AssertionError):
        return None  # NaN: dropped
    return float(3 - rank) if oracle_switched(instruction) else float(rank)


def _refs(n: int) -> list[dict[str, Any]]:
    return [{"id": f"alpacaeval-{i + 1:05d}", **eval_row(i)} for i in range(n)]


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    with JudgeServer() as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("A2RL_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
        yield server


def test_reference_mode_asks_alpaca_evals_question_in_its_order(judge: JudgeServer) -> None:
    refs = _refs(12)
    preds = {r["id"]: ("long answer " * (3 + i)).strip() if i % 3 else "no" for i, r in enumerate(refs)}
    result = get_task("alpacaeval").score_predictions(preds, refs)  # type: ignore[attr-defined]
    assert result.evaluator_version == "alpacaeval-2+reference+judge-loopback-judge"
    # Oracle: the judge ranks the longer output first; which label it had follows alpaca_eval's order.
    expected = []
    for r in refs:
        model, ref = preds[r["id"]], r["output"]
        first, second = (model, ref) if oracle_switched(r["instruction"]) else (ref, model)
        rank_m = 2 if len(second) > len(first) else 1
        expected.append(oracle_preference(r["instruction"], model, ref, rank_m))
    assert [d["preference"] for d in result.details] == expected
    assert [d["swapped"] for d in result.details] == [oracle_switched(r["instruction"]) for r in refs]
    assert any(d["swapped"] for d in result.details) and not all(d["swapped"] for d in result.details)
    # The request: AlpacaEval's ranking prompt, m = output_1 (the reference unless switched).
    body = next(b for b in judge.bodies if refs[1]["instruction"] in b["messages"][1]["content"])
    assert body["messages"][0]["content"].startswith("You are a highly efficient assistant, who evaluates")
    switched = oracle_switched(refs[1]["instruction"])
    output_1, output_2 = (
        (preds[refs[1]["id"]], refs[1]["output"]) if switched else (refs[1]["output"], preds[refs[1]["id"]])
    )
    assert body["messages"][1]["content"] == USER_TEMPLATE.format(
        instruction=refs[1]["instruction"], output_1=output_1, output_2=output_2
    )
    assert body["max_tokens"] == 100 and body["temperature"] == 0
    assert result.metrics["win_rate"] == pytest.approx(100 * sum(p - 1 for p in expected) / len(expected))


class _ScriptedJudge:
    """Replies chosen per instruction (what a real judge might say), no network."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies

    def ask_many(
        self, requests: list[list[dict[str, str]]], *, max_tokens: int | None = None
    ) -> list[JudgeReply]:
        del max_tokens
        out = []
        for messages in requests:
            text = next(v for k, v in self.replies.items() if k in messages[-1]["content"])
            out.append(JudgeReply(text, cached=False))
        return out

    def stats(self) -> dict[str, float]:
        return {}


def test_unreadable_replies_are_dropped_by_the_reference_and_lost_by_a2rl() -> None:
    refs = _refs(4)
    outputs = ["model answer A", "model answer B", "model answer C", "model answer D"]
    rank = json.dumps({"ordered_models": [{"model": "M", "rank": 1}, {"model": "m", "rank": 2}]})
    replies = {
        refs[0]["instruction"]: f"```json\n{rank}\n```",  # fenced JSON: still read
        refs[1]["instruction"]: "I cannot decide.",  # no ranking
        refs[2]["instruction"]: rank,
        refs[3]["instruction"]: '{"ordered_models": [{"model": "m", "rank": 3}]}',  # rank not 1/2
    }
    judge = _ScriptedJudge(replies)
    ref_result = judge_outputs(judge, refs, outputs, "v", "reference")  # type: ignore[arg-type]
    oracle = [
        oracle_preference(r["instruction"], o, r["output"], 2)
        for r, o in zip(refs[:3:2], outputs[:3:2], strict=True)
    ]
    assert [d["preference"] for d in ref_result.details] == [oracle[0], None, oracle[1], None]
    assert ref_result.n == 2 and ref_result.metrics["judge_unparsed"] == 2.0
    assert preference_from_reply("no json here", refs[0]["instruction"]) is None
    # a2rl: its own label question; a reply naming no label is a loss and stays in the rate.
    ours = judge_outputs(_ScriptedJudge(dict.fromkeys(replies, "neither")), refs, outputs, "v", "a2rl")  # type: ignore[arg-type]
    assert [d["preference"] for d in ours.details] == [1.0] * 4 and ours.n == 4


def test_a2rl_prompt_no_longer_tells_the_judge_to_discount_length() -> None:
    from a2rl_tasks.alpacaeval.prompting import JUDGE_TEMPLATE

    assert "longer" not in JUDGE_TEMPLATE  # the length-controlled win rate does that
