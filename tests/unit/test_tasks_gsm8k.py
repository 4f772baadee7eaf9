"""gsm8k: prompts, scoring edge cases, staging from local sources, offline scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.base import StagedData
from a2rl_tasks.gsm8k import data
from a2rl_tasks.gsm8k.prompting import EXEMPLARS, MAX_NEW_TOKENS, chat_messages, plain_prompt
from a2rl_tasks.gsm8k.task import score_item

from a2rl.errors import A2rlError
from tests.support.task_data import make_gsm8k_dir

ITEM = {"id": "t1", "question": "How much?", "answer": "5 * 13,000 = 65,000\n#### 65,000"}


def _item(gold: str) -> dict[str, str]:
    return {"id": "t", "question": "q", "answer": f"work\n#### {gold}"}


@pytest.mark.parametrize(
    ("completion", "gold", "correct"),
    [
        ("The farm is worth 65,000 dollars.\nThe answer is 65,000", "65,000", True),
        ("The farm is worth 65,000 dollars", "65000", True),
        ("It costs 65,000", "000", False),  # the reference would read "000" here; we read 65000
        ("She ends up at -7 degrees.\nThe answer is -7", "-7", True),
        ("Each costs 3.50 dollars.\nThe answer is 3.50", "3.5", True),
        ("The answer is 3.5", "3.50", True),
        ("The answer is 3.51", "3.5", False),
        ("I do not know the answer.", "3", False),
        ("", "3", False),
        ("The answer is 18. I hope that helps!", "18", True),
        ("The answer is 18, then 2 more apples arrive", "18", False),  # last number wins: 2
        ("The answer is 18\n\nQuestion: Ann has 4 pens and 5 more. How many?\nAnswer: 9", "18", True),
        ("Question: what is 2 + 2?", "4", False),
        ("1,234,567 people", "1234567", True),
    ],
)
def test_scoring_edge_cases(completion: str, gold: str, correct: bool) -> None:
    assert score_item(_item(gold), completion)["correct"] is correct


def test_score_item_record() -> None:
    rec = score_item(ITEM, "So 65,000.", "chat")
    assert rec == {
        "id": "t1", "question": "How much?", "gold": "65000", "completion": "So 65,000.",
        "prediction": "65000", "correct": True, "mode": "chat",
    }  # fmt: skip


def test_prompts_are_four_shot_in_the_reference_style() -> None:
    msgs = chat_messages("What is 2 + 2?")
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 4 + ["user"]
    assert msgs[-1]["content"] == "Question: What is 2 + 2?\nLet's think step by step\nAnswer:"
    for q, a in EXEMPLARS:
        assert a.rsplit("\n", 1)[1].startswith("The answer is ")
        assert q in plain_prompt("x")
    text = plain_prompt("What is 2 + 2?")
    assert text.count("Question: ") == 5
    assert text.endswith("Question: What is 2 + 2?\nLet's think step by step\nAnswer:")
    assert MAX_NEW_TOKENS == 512


def test_exemplar_answers_are_consistent() -> None:
    # Every exemplar's final number is what the scorer extracts from it.
    from a2rl_tasks.common.numbers import extract_last_number

    for _q, a in EXEMPLARS:
        assert extract_last_number(a) == a.rsplit(" ", 1)[1]


def _stage(tmp_path: Path, source: str | None) -> StagedData:
    staged = StagedData(train_dir=tmp_path / "out" / "train", heldout_dir=tmp_path / "out" / "heldout")
    staged.train_dir.mkdir(parents=True)
    staged.heldout_dir.mkdir(parents=True)
    get_task("gsm8k").stage(staged, source=source)
    return staged


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_stage_from_directory_and_file_pair(tmp_path: Path) -> None:
    src = make_gsm8k_dir(tmp_path / "src")
    staged = _stage(tmp_path / "a", str(src))
    train, held = _rows(staged.train_dir / "train.jsonl"), _rows(staged.heldout_dir / "heldout.jsonl")
    assert len(train) == 12 and len(held) == 5
    assert train[0]["id"] == "gsm8k-train-00001" and set(train[0]) == {"id", "question", "answer"}
    assert held[0]["id"] == "gsm8k-test-00001"
    pair = _stage(tmp_path / "b", f"{src / 'train.jsonl'},{src / 'test.jsonl'}")
    assert (pair.heldout_dir / "heldout.jsonl").read_bytes() == (
        staged.heldout_dir / "heldout.jsonl"
    ).read_bytes()


def test_train_rows_repeating_a_test_question_are_dropped(tmp_path: Path) -> None:
    src = make_gsm8k_dir(tmp_path / "src", overlap=2)
    staged = _stage(tmp_path, str(src))
    train = _rows(staged.train_dir / "train.jsonl")
    held_q = {r["question"] for r in _rows(staged.heldout_dir / "heldout.jsonl")}
    assert len(train) == 12
    assert not held_q & {r["question"] for r in train}


def test_source_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(A2rlError, match="needs a data source"):
        data.load_source(None)
    with pytest.raises(A2rlError, match="not found"):
        data.load_source(str(tmp_path / "nope"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
    (bad / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
    with pytest.raises(A2rlError, match="####"):
        data.load_source(str(bad))


def test_hub_source_fails_clearly_when_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(A2rlError, match="hf:openai/gsm8k"):
        data.load_source("hf:openai/gsm8k")


def test_offline_scoring() -> None:
    task = get_task("gsm8k", protocol="a2rl")
    refs = [
        {"id": "a", "question": "q1", "answer": "x\n#### 65,000"},
        {"id": "b", "question": "q2", "answer": "x\n#### -3"},
        {"id": "c", "question": "q3", "answer": "x\n#### 2"},
    ]
    preds = {"a": "The answer is 65,000", "b": "so 3"}
    result = task.score_predictions(preds, refs)  # type: ignore[attr-defined]
    assert (result.n, result.correct) == (3, 1)
    assert result.score == pytest.approx(100 / 3)
    assert result.metrics["no_number_rate"] == pytest.approx(100 / 3)
    # The reference (OpenCompass gsm8k_postprocess) reads "65,000" as "000": nothing is correct.
    ref = get_task("gsm8k").score_predictions(preds, refs)  # type: ignore[attr-defined]
    assert (ref.n, ref.correct) == (3, 0)
