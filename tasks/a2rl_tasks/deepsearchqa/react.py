"""The DeepSearchQA ReAct rollout: the model alternates `search[...]` and a final `answer[...]`.

Protocol (the reference's, with one fix):

- Prompt: plain text, no chat template — `SYSTEM_PROMPT + "\\n\\n" + "Question: {problem}\\nAnswer
  type: {answer_type}\\n\\nThought:"`.
- At most `MAX_STEPS` = 6 steps. Each step generates greedily (≤ 256 new tokens) and appends
  `" " + generation` to the prompt. The step's action is the first
  `Action:\\s*(search|answer)\\[(.+?)\\]` in that generation (nothing the model wrote after the
  action is kept).
  - `search[q]`: the tool's observation is appended as `"\\nObservation: {obs}\\nThought:"`
    (cut to 1,000 characters).
  - `answer[a]`: the episode ends with `a` — unless `a` is the placeholder of the prompt
    ("your answer"), which is refused with `"\\nThat is not a valid answer. Please think
    again.\\nThought:"`.
  - no action: `"\\nAction: answer["` is appended and the model completes it (≤ 128 tokens,
    stop at `"]"`); that is the final answer (a placeholder is refused as above).
- After 6 steps without an answer: the last real `answer[...]` the model wrote, else
  `"I don't know"`.
- **Fix**: the reference stops each step at `"\\nAction:"` (as well as `"\\nThought:"` and
  `"\\nObservation:"`), which cuts every generation *before* an action written on its own line,
  so such a model is always forced to answer after its first thought and never searches. We
  stop only at `"\\nObservation:"` and `"\\nThought:"` and keep the generation up to the end of
  its first action.

The rollout is batched: every step sends one generation call for all unfinished questions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from a2rl.inference import GenerationRequest

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

MAX_STEPS = 6
STEP_TOKENS = 256
FORCED_TOKENS = 128
STEP_STOPS = ("\nObservation:", "\nThought:")
FORCED_STOPS = ("]",)
MAX_OBSERVATION_CHARS = 1000
PLACEHOLDER = "your answer"
NO_ANSWER = "I don't know"
REFUSAL = "\nThat is not a valid answer. Please think again.\nThought:"
FORCE = "\nAction: answer["

SYSTEM_PROMPT = """You are a research assistant who answers questions by searching the web step by step.

Every step has this format:
Thought: what you know so far and what you need next
Action: search[a web search query]
or, once you know the answer:
Thought: what you found
Action: answer[your answer]

After each search you receive an Observation with the top results.

Rules:
- Begin every step with a Thought.
- Use search[...] to look things up; use answer[...] only when you have enough information.
- For a Set Answer question, give every item, separated by commas.
- Be concise and factual: the answer is a name, number, date or short list, not a sentence.
- You have at most 6 steps."""

_ACTION = re.compile(r"Action:\s*(search|answer)\[(.+?)\]", re.DOTALL)


@dataclass(frozen=True)
class Action:
    kind: str  # "search" | "answer"
    argument: str
    end: int  # index just after the closing bracket


def parse_action(text: str) -> Action | None:
    m = _ACTION.search(text)
    if m is None:
        return None
    return Action(kind=m.group(1), argument=m.group(2).strip(), end=m.end())


def is_placeholder(answer: str) -> bool:
    return answer.strip().lower() in (PLACEHOLDER, "your final answer")


def last_answer(trace: str) -> str | None:
    """The last real `answer[...]` in a model's own text (None when there is none)."""
    found = [m.group(2).strip() for m in _ACTION.finditer(trace) if m.group(1) == "answer"]
    real = [a for a in found if a and not is_placeholder(a)]
    return real[-1] if real else None


def initial_prompt(problem: str, answer_type: str) -> str:
    return f"{SYSTEM_PROMPT}\n\nQuestion: {problem}\nAnswer type: {answer_type}\n\nThought:"


@dataclass
class Episode:
    prompt: str
    trace: str = ""
    steps: int = 0
    searches: list[str] = field(default_factory=list)
    answer: str | None = None
    forced: bool = False
    pending_search: str | None = None

    @property
    def done(self) -> bool:
        return self.answer is not None

    def add_trace(self, text: str) -> None:
        self.trace += ("\n" + text) if self.trace and text else text

    def record(self) -> dict[str, Any]:
        return {
            "predicted": self.answer if self.answer is not None else NO_ANSWER,
            "steps": self.steps,
            "searches": list(self.searches),
            "forced_answer": self.forced,
            "trace": self.trace,
        }


def _step(ep: Episode, generated: str) -> bool:
    """Apply one step's generation; True when the episode needs a forced answer."""
    gen = generated.strip()
    action = parse_action(gen)
    if action is None:
        ep.prompt += f" {gen}{FORCE}"
        ep.add_trace(gen)
        return True
    gen = gen[: action.end]
    ep.prompt += f" {gen}"
    ep.add_trace(gen)
    if action.kind == "answer":
        if is_placeholder(action.argument) or not action.argument:
            ep.prompt += REFUSAL
        else:
            ep.answer = action.argument
    else:
        ep.pending_search = action.argument
    return False


def _forced(ep: Episode, generated: str) -> None:
    answer = generated.strip()
    ep.add_trace(f"Action: answer[{answer}]")
    if is_placeholder(answer):
        ep.prompt += f"{answer}]{REFUSAL}"
        return
    ep.answer = answer
    ep.forced = True


E = TypeVar("E", bound=Episode)


def run_episodes(
    backend: InferenceBackend,
    episodes: Sequence[E],
    search: Callable[[str], str],
    *,
    step_request: GenerationRequest,
    forced_request: GenerationRequest,
    step: Callable[[E, str], bool],
    forced: Callable[[E, str], None],
    observation: Callable[[str], str],
    max_steps: int,
    search_workers: int,
) -> None:
    """The batched ReAct loop shared by our protocol and the reference's: each step generates
    (`step_request`) for every unfinished episode (`step` applies it; True: force an answer,
    generated with `forced_request` and applied by `forced`), then runs the searches asked for
    (up to `search_workers` at once) and appends their `observation` text."""
    for _ in range(max_steps):
        active = [ep for ep in episodes if not ep.done]
        if not active:
            break
        outputs = backend.generate([ep.prompt for ep in active], step_request)
        to_force: list[E] = []
        for ep, out in zip(active, outputs, strict=True):
            ep.steps += 1
            if step(ep, out):
                to_force.append(ep)
        if to_force:
            answers = backend.generate([ep.prompt for ep in to_force], forced_request)
            for ep, out in zip(to_force, answers, strict=True):
                forced(ep, out)
        searching = [ep for ep in active if ep.pending_search is not None]
        if searching:
            with ThreadPoolExecutor(max_workers=max(1, min(search_workers, len(searching)))) as pool:
                observations = list(pool.map(search, [str(ep.pending_search) for ep in searching]))
            for ep, text in zip(searching, observations, strict=True):
                ep.searches.append(str(ep.pending_search))
                ep.pending_search = None
                ep.prompt += f"\nObservation: {observation(text)}\nThought:"


def _abridged(observation: str) -> str:
    return " ".join(observation.split())[:MAX_OBSERVATION_CHARS]


def rollout(
    backend: InferenceBackend,
    questions: Sequence[tuple[str, str]],
    search: Callable[[str], str],
    *,
    max_steps: int = MAX_STEPS,
    search_workers: int = 4,
) -> list[dict[str, Any]]:
    """Run the ReAct loop for every (problem, answer_type); one record per question, in order."""
    episodes = [Episode(prompt=initial_prompt(p, t)) for p, t in questions]
    run_episodes(
        backend,
        episodes,
        search,
        step_request=GenerationRequest(max_new_tokens=STEP_TOKENS, stop=STEP_STOPS),
        forced_request=GenerationRequest(max_new_tokens=FORCED_TOKENS, stop=FORCED_STOPS),
        step=_step,
        forced=_forced,
        observation=_abridged,
        max_steps=max_steps,
        search_workers=search_workers,
    )
    for ep in episodes:
        if ep.answer is None:
            ep.answer = last_answer(ep.trace) or NO_ANSWER
    return [ep.record() for ep in episodes]
