"""deepsearchqa, `protocol: reference`: the same model outputs through the reference's rules and ours.

The reference is microsoft/RD-Agent `autorl_bench` @ 471eb30,
`rdagent/scenarios/rl/autorl_bench/benchmarks/deepsearchqa/eval.py`. `_reference_react_loop`
and `_reference_judge` below re-derive its `DeepSearchQAEvaluator._react_loop` and
`_judge_answer`/`_string_match` one question at a time (vLLM's stop strings applied with
`cut_at_stops`); `DeepSearchQATask(protocol="reference")` must give the same prompts, answers,
judge requests and score. In `a2rl` mode the same model searches where the reference's
`"\\nAction:"` stop string forced it to answer at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.inference.text import cut_at_stops
from a2rl_tasks.artifacts import stage_artifacts
from a2rl_tasks.deepsearchqa import DeepSearchQATask, reference
from a2rl_tasks.deepsearchqa.search import CorpusSearch
from a2rl_tasks.deepsearchqa.task import judge_answers_reference
from a2rl_tasks.judge import Judge, JudgeCache, JudgeError, judge_config_from_env

from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl.protocols import PROTOCOL_A2RL, PROTOCOL_REFERENCE
from tests.support.judge_server import JudgeServer, dsqa_verdict
from tests.support.task_data import COUNTRIES, make_corpus, make_dsqa_file

# --- a model with four habits ----------------------------------------------------------------


def model(prompt: str) -> str:
    """prompt -> continuation (before stop strings). By question number i: i % 4 == 0 searches
    and answers with the action on a new line; 1 on the thought's line; 2 first answers the
    placeholder; 3 answers at once. After a search it answers from the observation; forced, it
    writes a guess."""
    if prompt.endswith("Action: answer["):
        return "I think Pyrus] and more"
    question = re.findall(r"Question: (.*)\n", prompt)[-1]
    i = int(re.search(r"\(question (\d+)\)", question).group(1))  # type: ignore[union-attr]
    country = next(c for c in COUNTRIES if c in question)
    observations = re.findall(r"Observation: (.*)\n", prompt)
    if observations:
        found = re.search(
            rf"capital of {country} is (\w+)|Question {i}: the rivers are ([^.]+)", observations[-1]
        )
        answer = (found.group(1) or found.group(2)) if found else "unknown"
        newline = "\n" if i % 4 == 0 else " "
        return f" It says so.{newline}Action: answer[{answer}]\nObservation: none"
    if "not a valid answer" in prompt:
        return " Sorry. Action: answer[Strelsau]"
    query = f"capital of {country}" if "capital" in question else f"rivers of {country} question {i}"
    return [
        f" I need to search.\nAction: search[{query}]\nObservation: invented",
        f" I will search. Action: search[{query}]\nObservation: invented",
        " Done. Action: answer[your final answer]",
        " I know this. Action: answer[Doomstadt]\nThought: more",
    ][i % 4]


class ModelBackend(InferenceBackend):
    """`model` behind the inference interface (stop strings applied); records (prompt, request)."""

    name = "habits"

    def __init__(self) -> None:
        self.calls: list[tuple[str, GenerationRequest]] = []

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        self.calls.extend((p, request) for p in prompts)
        return [cut_at_stops(model(p), request.stop) for p in prompts]


# --- the reference's rules, re-derived ----------------------------------------------------------


def _reference_react_loop(
    generate: Callable[[str, int, list[str]], str],
    search_fn: Callable[[str], str],
    question: str,
    answer_type: str,
) -> str:
    """eval.py `_react_loop` (vLLM: temperature 0, max_tokens 256, stops "\\nAction:",
    "\\nThought:", "\\nObservation:"; forced answer: 128 tokens, stop "]")."""
    conversation = f"Question: {question}\nAnswer type: {answer_type}\n\nThought:"
    full_prompt = f"{reference.REACT_SYSTEM_PROMPT}\n\n{conversation}"
    model_trace = ""
    for _step in range(6):
        generated = generate(full_prompt, 256, ["\nAction:", "\nThought:", "\nObservation:"]).strip()
        model_trace += ("\n" + generated) if model_trace else generated
        full_prompt += f" {generated}"
        action_match = re.search(r"Action:\s*(search|answer)\[(.+?)\]", generated, re.DOTALL)
        if not action_match:
            full_prompt += "\nAction: answer["
            generated2 = generate(full_prompt, 128, ["]"]).strip()
            model_trace += ("\n" + generated2) if generated2 else ""
            if generated2.strip().lower() == "your final answer":
                continue
            return generated2.strip()
        action_type, action_content = action_match.group(1), action_match.group(2).strip()
        if action_type == "answer":
            if action_content.lower() == "your final answer":
                full_prompt += "\nThat is not a valid answer. Please think again.\nThought:"
                continue
            return action_content
        observation = search_fn(action_content)
        full_prompt += f"\nObservation: {observation}\nThought:"
    last = re.findall(r"Action:\s*answer\[(.+?)\]", model_trace, re.DOTALL)
    real = [a.strip() for a in last if a.strip().lower() != "your final answer"]
    return real[-1] if real else "I don't know"


def _reference_judge(ask: Callable[[str, str], str], predicted: str, gold: str, answer_type: str) -> bool:
    """eval.py `_judge_answer` (+ `_string_match` when the judge call fails)."""
    judge_prompt = reference.JUDGE_PROMPT.format(answer_type=answer_type, gold=gold, predicted=predicted)
    try:
        response = ask(judge_prompt, "You are a strict answer evaluator.").strip().lower()
        return response.splitlines()[0].strip().strip(".!,;: \t\r\n").lower() == "correct"
    except Exception:
        pred, gold = predicted.strip().lower(), gold.strip().lower()
        if answer_type == "Single Answer":
            return gold in pred or pred in gold
        return all(item in pred for item in [x.strip() for x in gold.split(",")])


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("A2RL_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
        monkeypatch.delenv("A2RL_SEARCH_URL", raising=False)
        monkeypatch.setenv("A2RL_SEARCH_CORPUS", str(make_corpus(tmp_path / "corpus.jsonl")))
        yield server


def test_reference_texts_are_verbatim() -> None:
    prompt = reference.initial_prompt("Who?", "Set Answer")
    assert prompt.startswith("You are a research assistant that answers questions by searching the web.\n\n")
    assert prompt.endswith(
        "- Be concise and factual\n\n\nQuestion: Who?\nAnswer type: Set Answer\n\nThought:"
    )
    assert "Action: answer[Paris]   <- to give final answer\n" in prompt
    assert reference.STEP_STOPS == ("\nAction:", "\nThought:", "\nObservation:")
    msgs = reference.judge_messages("Set Answer", "A, B", "B")
    assert msgs[0] == {"role": "system", "content": "You are a strict answer evaluator."}
    assert msgs[1]["content"].startswith(
        "You are an answer evaluator. Compare the predicted answer to the gold answer.\n"
    )
    assert "\n        Gold answer: A, B\n        Predicted answer: B\n" in msgs[1]["content"]
    assert "Question" not in msgs[1]["content"].replace("Question answer type", "")
    assert (
        reference.serpapi_observation(
            {"organic_results": [{"snippet": "a"}, {}, {"snippet": "c"}, {"snippet": "d"}]}
        )
        == "a |  | c"
    )
    assert reference.serpapi_observation({}) == "No results found."


def test_same_outputs_give_the_references_answers_prompts_and_score(env: JudgeServer, tmp_path: Path) -> None:
    staged = stage_artifacts(
        DeepSearchQATask(protocol=PROTOCOL_REFERENCE), source=str(make_dsqa_file(tmp_path / "src", n=24)),
        root=tmp_path / "staged",
    )  # fmt: skip
    items = [json.loads(x) for x in (staged.heldout_dir / "heldout.jsonl").read_text().splitlines()]
    search = CorpusSearch(make_corpus(tmp_path / "corpus.jsonl"))

    ref_prompts: list[str] = []

    def generate(prompt: str, max_tokens: int, stop: list[str]) -> str:
        ref_prompts.append(prompt)
        return cut_at_stops(model(prompt), stop)

    ref_predicted = [
        _reference_react_loop(generate, search.search, it["problem"], it["answer_type"]) for it in items
    ]
    ref_correct = [
        _reference_judge(lambda user, system: dsqa_verdict(user), p, it["answer"], it["answer_type"])
        for p, it in zip(ref_predicted, items, strict=True)
    ]
    ref_score = 100.0 * sum(ref_correct) / len(items)

    backend = ModelBackend()
    result = DeepSearchQATask(protocol=PROTOCOL_REFERENCE).evaluate(backend, staged.heldout_dir)
    assert [d["id"] for d in result.details] == [it["id"] for it in items]  # the split's order
    assert [d["predicted"] for d in result.details] == ref_predicted
    assert [d["correct"] for d in result.details] == ref_correct
    assert result.score == pytest.approx(ref_score) and result.evaluator_version.startswith(
        "deepsearchqa-1+reference+"
    )
    assert sorted(p for p, _ in backend.calls) == sorted(ref_prompts)  # every prompt, byte for byte
    assert {r.stop for _, r in backend.calls} == {reference.STEP_STOPS, ("]",)}
    # Every answer was judged with the reference's prompt (the question is not shown); identical
    # requests are asked once.
    sent = {b["messages"][1]["content"] for b in env.bodies}
    assert sent == {reference.judge_messages(it["answer_type"], it["answer"], p)[1]["content"]
                    for it, p in zip(items, ref_predicted, strict=True)}  # fmt: skip
    # The habit that writes its action on a new line never searches: forced to guess.
    newline_habit = [
        d for d in result.details if int(re.search(r"question (\d+)", d["problem"]).group(1)) % 4 == 0
    ]  # type: ignore[union-attr]
    assert newline_habit and all(
        d["searches"] == [] and d["predicted"] == "I think Pyrus" for d in newline_habit
    )

    ours = DeepSearchQATask(protocol=PROTOCOL_A2RL).evaluate(ModelBackend(), staged.heldout_dir)
    assert all(d["searches"] for d in ours.details if d["id"] in {x["id"] for x in newline_habit})
    # 16 questions: the reference scores 4 (the same-line searchers), a2rl 8 (+ the new-line ones).
    assert (result.n, result.score, ours.score) == (16, 25.0, 50.0)


class FailingClient:
    """A judge client that fails for one predicted answer and says `correct` otherwise."""

    requests = 0

    def complete(self, messages: Sequence[dict[str, Any]], *, max_tokens: int | None = None) -> str:
        if "Predicted answer: Zenda city" in messages[-1]["content"]:
            raise JudgeError("judge down")
        return "Correct." if "Predicted answer: River 2a, River 2b" in messages[-1]["content"] else "\n"


def test_judge_failures_and_empty_replies_fall_back_to_the_string_match(env: JudgeServer) -> None:
    judge = Judge(judge_config_from_env("deepsearchqa"), client=FailingClient(), cache=JudgeCache(None))  # type: ignore[arg-type]
    items = [
        {"id": "a", "problem": "q", "answer": "Zenda", "answer_type": "Single Answer"},
        {"id": "b", "problem": "q", "answer": "River 2a, River 2b", "answer_type": "Set Answer"},
        {"id": "c", "problem": "q", "answer": "River 3a, River 3b", "answer_type": "Set Answer"},
    ]
    rollouts = [{"predicted": "Zenda city"}, {"predicted": "River 2a, River 2b"}, {"predicted": "River 3a"}]
    result = judge_answers_reference(judge, items, rollouts, "v")
    # a: judge failed -> "zenda" in "zenda city"; b: judged correct; c: empty reply -> items missing.
    assert [d["correct"] for d in result.details] == [True, True, False]
    assert [d["judged"] for d in result.details] == [False, True, True]
    assert result.metrics["judge_fallbacks"] == 2.0
