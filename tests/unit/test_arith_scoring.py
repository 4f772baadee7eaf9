"""GSM8K-style answer extraction and `arith` per-item scoring."""

from __future__ import annotations

import pytest
from a2rl_tasks.arith.task import build_prompt, score_item, summarise
from a2rl_tasks.common.numbers import extract_last_number, numbers_equal, numbers_in, parse_gold


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("47 + 38 = 85\n#### 85", "85"),
        ("The farm is worth 65,000 dollars", "65000"),
        ("1,234,567 and then 12,345.5", "12345.5"),
        ("it is -12", "-12"),
        ("about 3.75 kg", "3.75"),
        ("the answer is 85.", "85"),
        ("no number here", None),
        ("", None),
        ("#### 85 because that is the sum", "85"),
        ("#### 85\nso 85 is right, then 7 more words", "7"),
        ("85\nQuestion: What is 1 + 2?\nAnswer: 3", "85"),
        ("Question: 4", None),
        ("3,4", "4"),
        ("12,3456", "3456"),
    ],
)
def test_extract_last_number(text: str, expected: str | None) -> None:
    assert extract_last_number(text) == expected


def test_numbers_in_keeps_order() -> None:
    assert numbers_in("a 1, b 2,000 c -3.5") == ["1", "2000", "-3.5"]


def test_parse_gold() -> None:
    assert parse_gold("47 + 38 = 85\n#### 85") == "85"
    assert parse_gold("... #### 1,000") == "1000"
    with pytest.raises(ValueError, match="####"):
        parse_gold("85")


@pytest.mark.parametrize(
    ("pred", "gold", "ok"),
    [
        ("85", "85", True),
        ("85.0", "85", True),
        ("85.5", "85", False),
        (None, "85", False),
        ("-3", "-3", True),
    ],
)
def test_numbers_equal(pred: str | None, gold: str, ok: bool) -> None:
    assert numbers_equal(pred, gold) is ok


def test_prompt_is_exactly_the_contract() -> None:
    assert build_prompt("What is 47 + 38?") == "Question: What is 47 + 38?\nAnswer: "


def test_score_item_and_summary() -> None:
    item = {
        "id": "x1",
        "question": "What is 47 + 38?",
        "answer": "47 + 38 = 85\n#### 85",
        "op": "+",
        "style": "plain",
    }
    good = score_item(item, "47 + 38 = 85\n#### 85")
    bad = score_item({**item, "id": "x2", "op": "-"}, "47 + 38 = 84")
    none = score_item({**item, "id": "x3", "style": "word"}, "I do not know")
    assert good["correct"] and not bad["correct"] and not none["correct"]
    assert none["prediction"] is None
    result = summarise([good, bad, none], "arith-test")
    assert (result.n, result.correct) == (3, 1)
    assert result.score == pytest.approx(100 / 3)
    assert result.metrics["accuracy_op_+"] == pytest.approx(50.0)
    assert result.metrics["accuracy_op_-"] == 0.0
    assert result.metrics["no_number_rate"] == pytest.approx(100 / 3)
    assert [d["id"] for d in result.details] == ["x1", "x2", "x3"]
