"""GSM8K under both protocols: the same completions through the reference's rules (the oracle
below, restated from OpenCompass 0.5.1) and through a2rl's `reference` and `a2rl` modes.

The reference (RD-Agent autorl_bench @471eb30) runs OpenCompass 0.5.1 `gsm8k_gen` ->
`gsm8k_gen_1d7fe4`: 4-shot HUMAN/BOT rounds, `GenInferencer(max_out_len=512)`, model
`VLLMwithChatTemplate` with `pred_postprocessor=extract-non-reasoning-content`; evaluation:
1. `opencompass/utils/text_postprocessors.py::extract_non_reasoning_content` (model level, first);
2. `opencompass/datasets/gsm8k.py::gsm8k_postprocess`: `text.split('Question:')[0]`, then
   `re.findall(r'\\-?\\d+\\.\\d+|\\-?\\d+', text)`, the last one, `'NULL'` if none;
3. `gsm8k_dataset_postprocess`: `text.split('#### ')[1].replace(',', '')`;
4. `Gsm8kEvaluator.is_equal`: `pred == refer or abs(float(pred) - int(refer)) < 1e-6`, False on
   any exception; accuracy = 100 * correct / count.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.gsm8k.prompting import EXEMPLARS, HUMAN, MAX_NEW_TOKENS, STOP, chat_messages
from a2rl_tasks.gsm8k.reference_shots import REFERENCE_EXEMPLARS


def oracle_correct(completion: str, answer: str) -> bool:
    text = completion
    if "<think>" not in text and "</think>" in text:  # 1.
        text = text.rsplit("</think>", maxsplit=1)[-1].strip()
    else:
        text = re.compile(r"<think>(.*?)</think>", re.DOTALL).sub("", text).strip()
    text = text.split("Question:", maxsplit=1)[0]  # 2.
    numbers = re.findall(r"\-?\d+\.\d+|\-?\d+", text)
    pred = numbers[-1] if numbers else "NULL"
    refer = answer.split("#### ")[1].replace(",", "")  # 3.
    try:  # 4.
        return pred == refer or abs(float(pred) - int(refer)) < 1e-6
    except Exception:
        return False


#: (completion, gold answer, correct under a2rl's own rules)
CASES: list[tuple[str, str, bool]] = [
    ("5 * 13,000 = 65,000\nThe answer is 65,000", "x\n#### 65,000", True),  # reference: "000"
    ("The farm is worth 65,000 dollars", "x\n#### 65000", True),  # reference: "000"
    ("It costs 1,234.5 in total", "x\n#### 1234.5", True),  # reference: "234.5" (and int() fails)
    ("She ends up at -7 degrees.\nThe answer is -7", "x\n#### -7", True),
    ("Each costs 3.50 dollars.\nThe answer is 3.50", "x\n#### 3.5", True),  # reference: int("3.5") fails
    ("The answer is 18.0", "x\n#### 18", True),
    ("The answer is 18\n\nQuestion: Ann has 4 pens. How many?\nAnswer: 9", "x\n#### 18", True),
    ("The answer is 4<think>or is it 5?</think>", "x\n#### 4", False),  # ours reads the last number
    ("I worked it out.</think> 12 apples", "x\n#### 12", True),
    ("I do not know.", "x\n#### 3", False),
    ("", "x\n#### 3", False),
    ("The answer is 18, then 2 more arrive", "x\n#### 18", False),
]


def _score(protocol: str) -> tuple[list[bool], Any]:
    refs = [{"id": f"q{i}", "question": "q", "answer": a} for i, (_, a, _) in enumerate(CASES)]
    preds = {f"q{i}": c for i, (c, _, _) in enumerate(CASES)}
    result = get_task("gsm8k", protocol=protocol).score_predictions(preds, refs)  # type: ignore[arg-type,attr-defined]
    assert result.evaluator_version == f"gsm8k-2+{protocol}"
    return [bool(d["correct"]) for d in result.details], result


def test_reference_mode_reproduces_opencompass_item_by_item() -> None:
    oracle = [oracle_correct(c, a) for c, a, _ in CASES]
    verdicts, result = _score("reference")
    assert verdicts == oracle
    assert result.score == pytest.approx(100 * sum(oracle) / len(oracle))
    # The two protocols disagree exactly where the docs say (thousands separators, decimals
    # against an integer-only comparison, reasoning sections).
    assert oracle == [False, False, False, True, False, True, True, True, True, False, False, False]


def test_a2rl_mode_keeps_our_rules() -> None:
    verdicts, _ = _score("a2rl")
    assert verdicts == [ours for _, _, ours in CASES]


def test_reference_prompt_is_opencompass_gsm8k_gen_1d7fe4() -> None:
    msgs = chat_messages("How many?", "reference")
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 4 + ["user"]
    # The config's HUMAN template and its four rounds, verbatim.
    assert HUMAN == "Question: {question}\nLet's think step by step\nAnswer:"
    assert msgs[0]["content"].startswith("Question: Angelo and Melanie want to plan how many hours")
    assert msgs[1]["content"].endswith(
        "They will need to plan to study 4 days to allow for all the time they need.\nThe answer is 4\n"
    )
    assert msgs[2]["content"].startswith(
        "Question: Mark's basketball team scores 25 2 pointers, 8 3 pointers and 10 free throws.  Their"
    )
    assert [a.rsplit("The answer is ", 1)[1] for _, a in REFERENCE_EXEMPLARS] == [
        "4\n",
        "201\n",
        "140\n",
        "146\n",
    ]
    assert msgs[-1]["content"] == "Question: How many?\nLet's think step by step\nAnswer:"
    # a2rl: our own exemplars, none of them a GSM8K item.
    ours = chat_messages("How many?", "a2rl")
    assert [m["content"] for m in ours[1:8:2]] == [a for _, a in EXEMPLARS]
    assert not {q for q, _ in EXEMPLARS} & {q for q, _ in REFERENCE_EXEMPLARS}
    # Decoding, both protocols: the config's max_out_len, greedy; the stop string only cuts
    # what gsm8k_postprocess would cut anyway.
    assert (MAX_NEW_TOKENS, STOP) == (512, "Question:")
