"""The reference's WebShop rules (`protocol: reference`).

Re-derived from microsoft/RD-Agent `autorl_bench` @ 471eb30,
`rdagent/scenarios/rl/autorl_bench/benchmarks/webshop/eval.py` (`create_llm_fn`,
`_format_available_actions`, `build_react_prompt`, `webshop_run`); the prompt texts are copied
verbatim (they decide the score):

- chat: the system message `SYSTEM` and one user message, `prompt(...)`: the instruction, the
  available actions (`search[<your query>]` when there is a search bar, then `click[<text>]`
  for every clickable, each line indented by two spaces), the rules, then the last 5
  `(action, observation)` pairs as `Observation k: …` / `Action k: …` and
  `Observation n: <current>` / `Action n:`. The reference stores each action with the
  observation that *followed* it, so "Observation k" is the page after action k (the first page
  is never shown again, the current one appears twice) — kept as is;
- greedy, at most 100 new tokens, stop at "\\n"; the action is the stripped reply without a
  leading `Action:` (case-sensitive), `choose[` read as `click[`;
- success = the purchase's reward ≥ 0.5; 50 steps; an episode that raises counts as a failure.

Where the model has no chat template the reference's `LLM.chat` fails (every episode an error,
score 0); we send `SYSTEM + "\\n\\n" + prompt` as plain text instead (docs/tasks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

HISTORY_WINDOW = 5

SYSTEM = (
    "You are a helpful shopping assistant browsing an e-commerce website. "
    "Given a user instruction, current observation, and available actions, "
    "pick the best action to find and purchase a matching product. "
    "Output ONLY one action (e.g., 'search[red shoes]', 'click[buy now]') "
    "with NO extra text, NO explanation."
)

PROMPT_HEAD = """You are shopping on an e-commerce website. Find and purchase a product matching the user's instruction.

Instruction: {instruction}

Available actions:
{available_actions}

Rules:
- Output ONLY one action from the available actions list above.
- For search, use: search[your query]
- For clicking, use: click[exact text from the list]
- Do NOT output anything other than the action.

Now it's your turn:
"""  # noqa: E501


def format_available_actions(available: dict[str, Any]) -> str:
    lines = ["search[<your query>]"] if available.get("has_search_bar") else []
    lines += [f"click[{txt}]" for txt in available.get("clickables", [])]
    return "\n".join(f"  {a}" for a in lines)


def prompt(
    instruction: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    available_actions: str,
    history_window: int = HISTORY_WINDOW,
) -> str:
    """`build_react_prompt`; `history` holds (action, observation after it) pairs."""
    text = PROMPT_HEAD.format(instruction=instruction, available_actions=available_actions)
    recent = list(history[-history_window:]) if len(history) > history_window else list(history)
    offset = len(history) - len(recent)
    for i, (action, obs) in enumerate(recent):
        text += f"\nObservation {offset + i + 1}: {obs}\n"
        text += f"Action {offset + i + 1}: {action}\n"
    text += f"\nObservation {len(history) + 1}: {observation}\n"
    text += f"Action {len(history) + 1}:"
    return text


def history_of(actions: Sequence[str], pages: Sequence[str], current: str) -> list[tuple[str, str]]:
    """The reference's history from an episode: `pages[k]` is the page action k was taken on,
    `current` the page now; each action is paired with the page that followed it."""
    after = [*pages[1:], current]
    return list(zip(actions, after[: len(actions)], strict=True))


def parse_action(reply: str) -> str:
    """`webshop_run`'s action: stripped, a leading `Action:` dropped, `choose[` → `click[`."""
    action = reply.strip()
    if action.startswith("Action:"):
        action = action[7:].strip()
    if action.startswith("choose["):
        action = "click[" + action[7:]
    return action


def plain_prompt(user: str) -> str:
    """What a model without a chat template is sent (the reference cannot run such a model)."""
    return f"{SYSTEM}\n\n{user}"
