"""Deterministic generation of `arith` items (GSM8K format) with a content-disjoint held-out split.

An item's *content* is `(a, op, b)`. A reserve of contents (twice the held-out size) is drawn
first from the public `seed`; train items are drawn only from the remaining contents, so no
question in the held-out split — in any phrasing — has its numbers and operation in the training
data. The held-out items themselves (which reserved contents, their phrasings, their order) are
drawn from `heldout_seed`, which staging derives from a secret (`a2rl_tasks.staging`): public
code and the public `SEED` regenerate the train split, not the held-out one.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

OPS = ("+", "-")
MAX_OPERAND = 99
N_TRAIN = 20_000
N_HELDOUT = 500
#: Contents reserved for the held-out split, per held-out item (the secret seed picks among them).
RESERVE_FACTOR = 2

_NAMES = ("Ava", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jack", "Kenji", "Lena")
_ITEMS = ("apples", "books", "coins", "marbles", "stickers", "pencils", "cookies", "tickets")

# Phrasings per operation: "plain" and GSM8K-style "word" problems. Fields: a, b, name, item.
TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "+": {
        "plain": ("What is {a} + {b}?",),
        "word": (
            "{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
            "A box holds {a} {item} and another box holds {b} {item}. How many {item} are there in total?",
        ),
    },
    "-": {
        "plain": ("What is {a} - {b}?",),
        "word": (
            "{name} had {a} {item} and gave {b} to a friend. How many {item} does {name} have left?",
            "There were {a} {item} on the table. {name} took {b} of them. How many {item} are still there?",
        ),
    },
}


@dataclass(frozen=True)
class Content:
    a: int
    op: str
    b: int

    @property
    def result(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b


def content_space() -> list[Content]:
    """Every (a, op, b): a + b with a, b in 0..99, and a - b with a >= b (no negative answers)."""
    space = [Content(a, "+", b) for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]
    space += [Content(a, "-", b) for a in range(MAX_OPERAND + 1) for b in range(a + 1)]
    return space


def answer_text(c: Content) -> str:
    return f"{c.a} {c.op} {c.b} = {c.result}\n#### {c.result}"


def make_item(c: Content, rng: random.Random, *, item_id: str) -> dict[str, Any]:
    style = "plain" if rng.random() < 0.5 else "word"
    template = rng.choice(TEMPLATES[c.op][style])
    question = template.format(a=c.a, b=c.b, name=rng.choice(_NAMES), item=rng.choice(_ITEMS))
    return {
        "id": item_id,
        "question": question,
        "answer": answer_text(c),
        "a": c.a,
        "op": c.op,
        "b": c.b,
        "style": style,
    }


def _per_op(n: int) -> list[int]:
    return [n // len(OPS) + (1 if i < n % len(OPS) else 0) for i in range(len(OPS))]


def split_contents(seed: int, n_heldout: int = N_HELDOUT) -> tuple[list[Content], list[Content]]:
    """(reserved contents, remaining contents) for the public `seed`: `RESERVE_FACTOR` times
    `n_heldout` reserved, half per operation."""
    rng = random.Random(f"arith-split-{seed}")
    by_op = {op: [c for c in content_space() if c.op == op] for op in OPS}
    reserve: list[Content] = []
    for op, k in zip(OPS, _per_op(n_heldout), strict=True):
        reserve += rng.sample(by_op[op], min(k * RESERVE_FACTOR, len(by_op[op])))
    taken = set(reserve)
    rest = [c for c in content_space() if c not in taken]
    return reserve, rest


def heldout_contents(reserve: list[Content], heldout_seed: int, n_heldout: int = N_HELDOUT) -> list[Content]:
    """`n_heldout` of the reserved contents (half per operation), chosen by `heldout_seed`."""
    rng = random.Random(f"arith-heldout-{heldout_seed}")
    chosen: list[Content] = []
    for op, k in zip(OPS, _per_op(n_heldout), strict=True):
        chosen += rng.sample([c for c in reserve if c.op == op], k)
    rng.shuffle(chosen)
    return chosen


def generate(
    seed: int = 0, n_train: int = N_TRAIN, n_heldout: int = N_HELDOUT, *, heldout_seed: int | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train rows, held-out rows). Agent-visible train rows keep only id/question/answer.

    Train rows depend on `seed` only; held-out rows on `heldout_seed` too (default: `seed`,
    which is what anyone with the public code and seed can regenerate)."""
    reserve, rest = split_contents(seed, n_heldout)
    held_seed = seed if heldout_seed is None else heldout_seed
    held_rng = random.Random(f"arith-heldout-items-{held_seed}")
    heldout = [
        make_item(c, held_rng, item_id=f"arith-heldout-{i + 1:05d}")
        for i, c in enumerate(heldout_contents(reserve, held_seed, n_heldout))
    ]
    rng = random.Random(f"arith-items-{seed}")
    train = [
        _public(make_item(c, rng, item_id=f"arith-train-{i + 1:06d}"))
        for i, c in enumerate(_train_contents(rest, n_train, rng))
    ]
    return train, heldout


def _train_contents(rest: list[Content], n: int, rng: random.Random) -> Iterator[Content]:
    # Each remaining content once (shuffled) before any repeats, so coverage is even.
    produced = 0
    while produced < n:
        order = list(rest)
        rng.shuffle(order)
        yield from order[: n - produced]
        produced += min(len(order), n - produced)


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["id"], "question": item["question"], "answer": item["answer"]}
