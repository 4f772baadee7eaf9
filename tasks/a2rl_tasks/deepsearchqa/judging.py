"""LLM-judged correctness of a DeepSearchQA answer, with the reference's rules.

- **Single Answer**: correct when the prediction contains the same key information as the gold
  answer.
- **Set Answer**: correct when the prediction contains **all** items of the gold answer (order
  does not matter, minor wording variations are fine).

The judge (system: "You are a strict answer evaluator.") replies `correct` or `incorrect`; the
first line, lower-cased and stripped of punctuation, must be exactly `correct` for a point
(anything else is wrong; replies that are neither word are counted as `judge_unparsed`). Our
prompt also shows the question (the reference's did not), which the judge needs to read a
short answer in context; the wording is our own.

Without asking the judge: a prediction equal to the gold answer (whitespace-normalised,
case-folded) is correct, and an empty prediction or "I don't know" is wrong. Judge failures are
errors after the client's retries — never the reference's silent fallback to string matching.
"""

from __future__ import annotations

from typing import Any

from a2rl_tasks.deepsearchqa.react import NO_ANSWER, last_answer

JUDGE_MAX_TOKENS = 100
JUDGE_SYSTEM = "You are a strict answer evaluator."

JUDGE_TEMPLATE = (
    "Decide whether a predicted answer to a research question is correct, by comparing it with "
    "the gold answer.\n"
    "\n"
    "Question: {question}\n"
    "Answer type: {answer_type}\n"
    "Gold answer: {gold}\n"
    "Predicted answer: {predicted}\n"
    "\n"
    "Rules:\n"
    "- Single Answer: the prediction is correct if it contains the same key information as the "
    "gold answer.\n"
    "- Set Answer: the prediction is correct only if it contains ALL items of the gold answer "
    "(order does not matter; minor wording variations are acceptable).\n"
    "\n"
    "Reply with exactly one word: correct or incorrect."
)


def normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def judge_messages(question: str, answer_type: str, gold: str, predicted: str) -> list[dict[str, str]]:
    user = JUDGE_TEMPLATE.format(question=question, answer_type=answer_type, gold=gold, predicted=predicted)
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def verdict_from_reply(reply: str) -> bool | None:
    """True for `correct`, False for `incorrect`, None for anything else."""
    lines = reply.strip().splitlines()
    first = lines[0].strip().strip(".!,;:*`'\" \t\r\n").lower() if lines else ""
    if first == "correct":
        return True
    if first == "incorrect":
        return False
    return None


def is_no_answer(predicted: str) -> bool:
    pred = normalise(predicted)
    return not pred or pred == normalise(NO_ANSWER)


def decided_without_judge(predicted: str, gold: str) -> bool | None:
    """True/False when the answer is obviously right/wrong, None when the judge must decide."""
    if is_no_answer(predicted):
        return False
    if normalise(predicted) == normalise(gold):
        return True
    return None


def extract_prediction(raw: str) -> str:
    """Offline scoring: the last `answer[...]` of a ReAct trace, else the text itself."""

    found = last_answer(raw)
    return found if found is not None else raw.strip()


def summary_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    def acc(rows: list[dict[str, Any]]) -> float:
        return 100.0 * sum(1 for r in rows if r["correct"]) / len(rows) if rows else 0.0

    single = [r for r in records if r["answer_type"] == "Single Answer"]
    sets = [r for r in records if r["answer_type"] == "Set Answer"]
    n = len(records)
    return {
        "accuracy": acc(records),
        "single_accuracy": acc(single),
        "set_accuracy": acc(sets),
        "n_single": float(len(single)),
        "n_set": float(len(sets)),
        "no_answer_rate": 100.0 * sum(1 for r in records if is_no_answer(r["predicted"])) / n if n else 0.0,
    }
