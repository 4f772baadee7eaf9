"""humaneval: the 82/82 split, prompt forms, code extraction, pass@1 in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.base import StagedData
from a2rl_tasks.humaneval import data
from a2rl_tasks.humaneval.prompting import (
    INSTRUCTION,
    MODE_CHAT,
    MODE_PLAIN,
    build_program,
    chat_message,
    completion_code,
    extract_code,
)
from a2rl_tasks.humaneval.scoring import score_completions
from a2rl_tasks.sandbox import Limits

FAST = Limits(timeout_s=5.0)


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return data.load_problems(data.builtin_path())


def test_builtin_split_is_0_81_visible_82_163_heldout(problems: list[dict], tmp_path: Path) -> None:
    assert len(problems) == 164
    staged = StagedData(train_dir=tmp_path / "train", heldout_dir=tmp_path / "heldout")
    staged.train_dir.mkdir()
    staged.heldout_dir.mkdir()
    get_task("humaneval").stage(staged)
    train = [json.loads(x) for x in (staged.train_dir / "train.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (staged.heldout_dir / "heldout.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in train] == [f"HumanEval/{i}" for i in range(82)]
    assert [r["task_id"] for r in held] == [f"HumanEval/{i}" for i in range(82, 164)]
    assert train[0]["question"] == train[0]["prompt"] and train[0]["answer"] == train[0]["canonical_solution"]
    assert "canonical_solution" not in held[0]
    assert set(held[0]) == {"id", "task_id", "prompt", "entry_point", "test"}


def test_extract_code() -> None:
    assert extract_code("Sure:\n```python\ndef f():\n    return 1\n```\nDone.") == "def f():\n    return 1\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut by the limit
    assert extract_code("    return 1\n") == "    return 1\n"
    assert completion_code("    return 1\n\ndef other():\n    pass", MODE_PLAIN) == "    return 1\n"
    assert (
        completion_code("    return 1\n\nif __name__ == '__main__':\n    f()", MODE_PLAIN) == "    return 1\n"
    )


def test_chat_prompt_is_the_reference_instruction() -> None:
    assert chat_message("def f():\n") == INSTRUCTION + "def f():\n"
    assert INSTRUCTION.startswith("Read the following function signature and docstring")


def test_heldout_canonical_solutions_pass_and_stubs_fail(problems: list[dict]) -> None:
    held = [data.heldout_row(p) for p in problems[82:]][::8]  # every 8th held-out problem
    canon = {p["task_id"]: p["canonical_solution"] for p in problems}
    good = score_completions(
        held, [canon[p["task_id"]] for p in held], MODE_PLAIN, "v", protocol="a2rl", limits=FAST
    )
    assert good.correct == good.n == len(held)
    assert good.score == 100.0
    stubs = score_completions(held, ["    pass\n"] * len(held), MODE_PLAIN, "v", protocol="a2rl", limits=FAST)
    assert stubs.correct == 0


def test_full_function_in_a_chat_reply_passes(problems: list[dict]) -> None:
    p = problems[100]
    reply = f"Here you go:\n```python\n{p['prompt']}{p['canonical_solution']}```\nThis works because..."
    res = score_completions([data.heldout_row(p)], [reply], MODE_CHAT, "v", protocol="a2rl", limits=FAST)
    assert res.correct == 1
    assert res.details[0]["status"] == "passed" and res.details[0]["mode"] == "chat"


@pytest.mark.parametrize(
    "hack",
    ["    import sys\n    sys.exit(0)\nimport sys\nsys.exit(0)\n", "    pass\nimport os\nos._exit(0)\n"],
    ids=["sys.exit", "os._exit"],
)
def test_early_exit_completion_fails(problems: list[dict], hack: str) -> None:
    p = data.heldout_row(problems[90])
    res = score_completions([p], [hack], MODE_PLAIN, "v", protocol="a2rl", limits=FAST)
    assert res.correct == 0
    assert res.details[0]["status"] == "exited_early"


def test_program_layout() -> None:
    prob = {"prompt": "def f():\n", "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}
    assert (
        build_program(prob, "    return 1\n")
        == "def f():\n    return 1\n\n\ndef check(c):\n    assert c() == 1\n\n\ncheck(f)\n"
    )


def test_offline_scoring(problems: list[dict]) -> None:
    refs = [data.heldout_row(p) for p in problems[82:85]]
    preds = {refs[0]["id"]: problems[82]["canonical_solution"], refs[1]["id"]: "    return None\n"}
    res = get_task("humaneval", protocol="a2rl").score_predictions(preds, refs)  # type: ignore[attr-defined]
    assert (res.n, res.correct) == (3, 1)
    # The reference left-strips the reply (OpenCompass humaneval_postprocess_v2): a body-only
    # prediction loses its first line's indentation and fails.
    ref = get_task("humaneval").score_predictions(preds, refs)  # type: ignore[attr-defined]
    assert (ref.n, ref.correct) == (3, 0)


def test_custom_source_file(tmp_path: Path, problems: list[dict]) -> None:
    src = tmp_path / "mini.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in problems[:6]))
    visible, held = data.split(data.load_problems(data.source_path(str(src))))
    assert [r["task_id"] for r in visible] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert [r["task_id"] for r in held] == ["HumanEval/3", "HumanEval/4", "HumanEval/5"]
