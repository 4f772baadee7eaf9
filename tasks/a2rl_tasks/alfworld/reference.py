"""The reference's ALFWorld rules (`protocol: reference`).

Re-derived from microsoft/RD-Agent `autorl_bench` @ 471eb30,
`rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py` (`ALFWorldEvaluator.run_eval`,
`alfworld_run`, `process_ob`), which follows the official ReAct notebook (ysymyth/ReAct
`alfworld.ipynb`):

- few-shot examples: the official ReAct examples (`react_prompts.json`, MIT, see
  `REACT_PROMPTS_LICENSE.txt`), `react_<k>_1` then `react_<k>_0` for the game's task type;
  their `put X in/on Y` is a command the alfworld 0.4.2 engine answers "Nothing happens."
  (it understands `move X to Y`), which is why the reference's baselines are low;
- opening: the reset text without its first paragraph, paragraphs joined by one newline;
- every observation goes through `process_ob` (drops a leading "You arrive at loc N. ");
- the prompt framing, decoding (greedy, 100 new tokens, stop "\\n"), `think:` → "OK.", and the
  50-step limit are those of `prompting.py`/`rollout.py` (shared by both protocols);
- score = games won / games played * 100 over the games whose task type is known.

`a2rl` mode differs only in the examples (ours, with `move`, played in the engine) and in what
the agent is given (docs/tasks.md, "alfworld").
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from a2rl_tasks.alfworld import catalog

OFFICIAL_PROMPTS_FILE = "react_prompts.json"
#: The game type prefixes of the reference (`TASK_PREFIXES`), matched against the game's
#: directory name in this order.
TASK_PREFIXES: dict[str, str] = {
    "pick_and_place": "put",
    "pick_clean_then_place": "clean",
    "pick_heat_then_place": "heat",
    "pick_cool_then_place": "cool",
    "look_at_obj": "examine",
    "pick_two_obj": "puttwo",
}
ARRIVE_PREFIX = "You arrive at loc "
PARAGRAPH = "\n\n"


@cache
def official_react_prompts() -> dict[str, str]:
    """The official ReAct examples (`react_<k>_<i>` -> transcript), verbatim."""
    text = resources.files("a2rl_tasks.alfworld").joinpath(OFFICIAL_PROMPTS_FILE).read_text()
    prompts: dict[str, str] = json.loads(text)
    return prompts


def official_examples() -> dict[str, list[str]]:
    """Prefix ("put", …) -> [react_<k>_1, react_<k>_0]: the two examples in the reference's order."""
    prompts = official_react_prompts()
    return {k: [prompts[f"react_{k}_1"], prompts[f"react_{k}_0"]] for k in catalog.PREFIXES.values()}


def reference_prefix(game_name: str) -> str | None:
    """The reference's example key for a game directory name (`<type>-…/trial_…`), None when
    the reference would skip the game (unknown type)."""
    for prefix, key in TASK_PREFIXES.items():
        if game_name.startswith(prefix):
            return key
    return None


def opening(reset_text: str) -> str:
    """The reference's first observation: the reset text minus its first paragraph (the
    TextWorld banner), the other paragraphs joined by one newline (nothing stripped)."""
    return "\n".join(reset_text.split(PARAGRAPH)[1:])


def process_ob(observation: str) -> str:
    """The official ReAct observation cleaning: drop a leading "You arrive at loc N. "."""
    if observation.startswith(ARRIVE_PREFIX):
        return observation[observation.find(". ") + 2 :]
    return observation
