"""The ReAct prompt of the ALFWorld evaluation (completion mode, no chat template).

As in the ALFWorld ReAct harness the reference runs, a game of type T is prompted with

    "Interact with a household to solve a task. Here are two examples.\\n"
    + <example 1 of T> + <example 2 of T>
    + "\\nHere is the task.\\n" + <opening observation> + "\\n>"

and after every step `" {action}\\n{observation}\\n>"` is appended (the whole history stays in the
prompt). An example is an episode transcript: the opening observation, then `> action` /
observation lines, ending with a newline.

The twelve examples (two per task type) are ours: episodes of the searching expert
(`expert.search_expert`) on generated games of the "examples" split, which shares no game with
train or held-out data. They are stored in `react_examples.json` and rebuilt by
`build_react_examples()` (a test checks the stored file equals a fresh build).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl_tasks.alfworld import catalog

HEADER = "Interact with a household to solve a task. Here are two examples.\n"
TASK_INTRO = "\nHere is the task.\n"
ACTION_PROMPT = "\n>"
EXAMPLES_FILE = "react_examples.json"
#: Examples are kept short so the prompt stays small: at most this many steps each.
EXAMPLE_MAX_STEPS = 16
EXAMPLE_SEED = 0
MAX_NEW_TOKENS = 100
STOP = "\n"


def prefix_for(task_type: str) -> str:
    """The examples' key for `task_type` (also accepts ALFWorld game directory names)."""
    for tt, prefix in catalog.PREFIXES.items():
        if task_type.startswith(tt):
            return prefix
    raise ValueError(f"unknown ALFWorld task type {task_type!r}")


@cache
def react_examples() -> dict[str, list[str]]:
    """Prefix ("put", "clean", …) -> the two example transcripts."""
    text = resources.files("a2rl_tasks.alfworld").joinpath(EXAMPLES_FILE).read_text()
    data: dict[str, Any] = json.loads(text)
    examples: dict[str, list[str]] = data["examples"]
    return examples


def first_prompt(task_type: str, opening: str, examples: dict[str, list[str]] | None = None) -> str:
    """The prompt before the first action of a game whose opening observation is `opening`."""
    shots = (examples or react_examples())[prefix_for(task_type)]
    return HEADER + "".join(shots) + TASK_INTRO + opening + ACTION_PROMPT


def continue_prompt(prompt: str, action: str, observation: str) -> str:
    """`prompt` after playing `action` (as generated, stripped) and seeing `observation`."""
    return f"{prompt} {action}\n{observation}{ACTION_PROMPT}"


def build_react_examples(work_dir: Path, seed: int = EXAMPLE_SEED) -> dict[str, Any]:
    """Rebuild the examples: for each task type, the first two games of the "examples" split
    (keys `"<seed>:examples:<type>:<i>"`) whose expert episode has at most `EXAMPLE_MAX_STEPS` steps."""
    # lazy: TextWorld, only when games are built or played
    from a2rl_tasks.alfworld import generator
    from a2rl_tasks.alfworld.engine import TextGame
    from a2rl_tasks.alfworld.expert import ExpertError, TaskParams, search_expert

    game = TextGame()
    examples: dict[str, list[str]] = {}
    sources: dict[str, list[str]] = {}
    for tt in catalog.TASK_TYPES:
        prefix = catalog.PREFIXES[tt]
        examples[prefix], sources[prefix] = [], []
        index = 0
        while len(examples[prefix]) < 2:
            key = generator.game_key(seed, "examples", tt, index)
            index += 1
            spec = generator.generate_game(key, tt, "examples")
            path = generator.write_game(spec, work_dir)
            params = TaskParams.from_traj_data(generator.traj_data(spec))
            try:
                traj = search_expert(path, params, max_steps=EXAMPLE_MAX_STEPS, game=game)
            except ExpertError:
                continue
            examples[prefix].append(traj.transcript())
            sources[prefix].append(spec.name)
    return {"generator": generator.GENERATOR_VERSION, "seed": seed, "examples": examples, "sources": sources}
