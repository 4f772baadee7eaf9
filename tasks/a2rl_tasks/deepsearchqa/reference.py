"""The reference's DeepSearchQA rules (`protocol: reference`).

Re-derived from microsoft/RD-Agent `autorl_bench` @ 471eb30,
`rdagent/scenarios/rl/autorl_bench/benchmarks/deepsearchqa/eval.py`
(`DeepSearchQAEvaluator.run_eval`, `_react_loop`, `_serpapi_search`, `_judge_answer`,
`_string_match`). The prompt text, stop strings and judge prompt are copied verbatim (they
decide the score); the loop is our own, batched over questions, with the same per-question rules:

- prompt: `REACT_SYSTEM_PROMPT + "\\n\\n" + "Question: {q}\\nAnswer type: {t}\\n\\nThought:"`
  (no chat template); each step: greedy, ≤ 256 new tokens, stop at `"\\nAction:"`,
  `"\\nThought:"` or `"\\nObservation:"` — so an action written on its own line is cut off and
  the model is forced to answer (closed-book in practice; `a2rl` mode drops that stop);
- the whole stripped generation is appended (`" " + gen`); the action is the first
  `Action:\\s*(search|answer)\\[(.+?)\\]` in it;
- no action: `"\\nAction: answer["` is appended and ≤ 128 tokens (stop `"]"`) are generated;
  that stripped text is the answer (even empty), except the placeholder "your final answer",
  after which the loop goes on with the prompt as it is;
- `answer[a]`: the answer, except the placeholder, answered with
  `"\\nThat is not a valid answer. Please think again.\\nThought:"`;
- `search[q]`: `"\\nObservation: {tool output}\\nThought:"` (the tool output unabridged);
- after 6 steps: the last non-placeholder `answer[...]` of the model's own text, else
  `"I don't know"`;
- search (SerpAPI, `num=3`): the `snippet` of the first 3 `organic_results` (empty ones kept)
  joined by `" | "`, or `"No results found."`;
- judge: every answer is judged (no shortcuts) with `JUDGE_PROMPT` (the question is not shown)
  and the system prompt "You are a strict answer evaluator."; correct when the reply's first
  line, stripped of `.!,;:` and whitespace, is `correct`; when the judge fails (or replies
  nothing), the reference's string match decides;
- score = correct / questions * 100, questions in the held-out split's order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from a2rl.inference import GenerationRequest
from a2rl_tasks.deepsearchqa import react

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

REACT_SYSTEM_PROMPT = """You are a research assistant that answers questions by searching the web.

You must follow this format strictly:
Thought: [your reasoning]
Action: search[your search query]   <- to search the web
  OR
Action: answer[Paris]   <- to give final answer

Rules:
- Always start with a Thought
- Use search[] to find information
- Use answer[] ONLY when you have enough information
- For Set Answer questions, list all items separated by commas
- Be concise and factual
"""

JUDGE_PROMPT = """You are an answer evaluator. Compare the predicted answer to the gold answer.
        Question answer type: {answer_type}
        Gold answer: {gold}
        Predicted answer: {predicted}
        For "Single Answer": The predicted answer is correct if it contains the same key information as the gold answer.
        For "Set Answer": The predicted answer is correct if it contains ALL items from the gold answer (order doesn't matter, minor wording variations are OK).
        Reply with ONLY "correct" or "incorrect". No explanation."""  # noqa: E501

JUDGE_SYSTEM = "You are a strict answer evaluator."
MAX_STEPS = 6
STEP_TOKENS = 256
FORCED_TOKENS = 128
STEP_STOPS = ("\nAction:", "\nThought:", "\nObservation:")
FORCED_STOPS = ("]",)
PLACEHOLDER = "your final answer"
NO_ANSWER = "I don't know"
REFUSAL = "\nThat is not a valid answer. Please think again.\nThought:"
FORCE = "\nAction: answer["
NO_RESULTS = "No results found."
SERPAPI_NUM = 3
#: The search backend the reference used for its numbers (recorded with every result).
REFERENCE_SEARCH = "serpapi num=3 (top-3 organic snippets)"

_ACTION = re.compile(r"Action:\s*(search|answer)\[(.+?)\]", re.DOTALL)
_ANSWERS = re.compile(r"Action:\s*answer\[(.+?)\]", re.DOTALL)


def initial_prompt(problem: str, answer_type: str) -> str:
    return f"{REACT_SYSTEM_PROMPT}\n\nQuestion: {problem}\nAnswer type: {answer_type}\n\nThought:"


def is_placeholder(text: str) -> bool:
    return text.strip().lower() == PLACEHOLDER


def last_answer(trace: str) -> str:
    real = [a.strip() for a in _ANSWERS.findall(trace) if not is_placeholder(a)]
    return real[-1] if real else NO_ANSWER


class Episode(react.Episode):
    """An episode of the reference's loop: the same state as ours; an empty generation still adds
    a line to the trace (the reference joins every step's text)."""

    def add_trace(self, text: str) -> None:
        self.trace += ("\n" + text) if self.trace else text


def apply_step(ep: Episode, output: str) -> bool:
    """One step's generation; True when the episode must be forced to answer."""
    gen = output.strip()
    ep.add_trace(gen)
    ep.prompt += f" {gen}"
    m = _ACTION.search(gen)
    if m is None:
        ep.prompt += FORCE
        return True
    kind, content = m.group(1), m.group(2).strip()
    if kind == "answer":
        if content.lower() == PLACEHOLDER:
            ep.prompt += REFUSAL
        else:
            ep.answer = content
    else:
        ep.pending_search = content
    return False


def apply_forced(ep: Episode, output: str) -> None:
    gen = output.strip()
    if gen:
        ep.trace += "\n" + gen
    if gen.lower() != PLACEHOLDER:
        ep.answer = gen
        ep.forced = True


def rollout(
    backend: InferenceBackend,
    questions: Sequence[tuple[str, str]],
    search: Callable[[str], str],
    *,
    max_steps: int = MAX_STEPS,
) -> list[dict[str, Any]]:
    """The reference's ReAct loop for every (problem, answer_type), batched across questions:
    its step and forced-answer rules, unabridged observations, one search at a time."""
    episodes = [Episode(prompt=initial_prompt(p, t)) for p, t in questions]
    react.run_episodes(
        backend,
        episodes,
        search,
        step_request=GenerationRequest(max_new_tokens=STEP_TOKENS, stop=STEP_STOPS),
        forced_request=GenerationRequest(max_new_tokens=FORCED_TOKENS, stop=FORCED_STOPS),
        step=apply_step,
        forced=apply_forced,
        observation=str,
        max_steps=max_steps,
        search_workers=1,
    )
    for ep in episodes:
        if ep.answer is None:
            ep.answer = last_answer(ep.trace)
    return [ep.record() for ep in episodes]


def serpapi_observation(data: Any) -> str:
    """`_serpapi_search`'s text for a SerpAPI JSON answer."""
    results = data.get("organic_results", []) if isinstance(data, dict) else []
    snippets = [r.get("snippet", "") for r in results[:SERPAPI_NUM] if isinstance(r, dict)]
    return " | ".join(snippets) or NO_RESULTS


def judge_messages(answer_type: str, gold: str, predicted: str) -> list[dict[str, str]]:
    user = JUDGE_PROMPT.format(answer_type=answer_type, gold=gold, predicted=predicted)
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def verdict(reply: str) -> bool | None:
    """The reference's reading of a judge reply; None where the reference fell back to string
    matching (its `splitlines()[0]` fails on an empty reply)."""
    lines = reply.strip().lower().splitlines()
    if not lines:
        return None
    return lines[0].strip().strip(".!,;: \t\r\n").lower() == "correct"


def string_match(predicted: str, gold: str, answer_type: str) -> bool:
    """`_string_match`: the reference's fallback when the judge fails."""
    pred, gold = predicted.strip().lower(), gold.strip().lower()
    if answer_type == "Single Answer":
        return gold in pred or pred in gold
    return all(item.strip() in pred for item in gold.split(","))
