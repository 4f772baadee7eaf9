"""Deterministic generation of `arith` items (GSM8K format) with a content-disjoint held-out split.

An item's *content* is `(a, op, b)`. The public `seed` splits each operation's contents in two
halves: the train contents, from which every train item is drawn, and the unseen pool. The
held-out contents (which of the pool, their phrasings, their order) are drawn from
`heldout_seed`, which staging derives from a secret (`a2rl_tasks.staging`): no question in the
held-out split, in any phrasing, has its numbers and operation in the training data, and public
code and the public `SEED` regenerate the train split, not the held-out one.

The space is two-digit add and subtract, the one the tiny CPU model learns, so it is enumerable:
the agent can compute the pool (the contents its train split never shows). The smallest set it
can compute that holds the held-out split is that pool, 15 times the split's size and half the
task's whole space: training on all of it is learning the task, not a shortcut to the test.
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
#: The share of each operation's contents that train items are drawn from; the rest is the pool
#: the secret seed draws the held-out contents from.
TRAIN_SHARE = 0.5

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


def split_contents(seed: int) -> tuple[list[Content], list[Content]]:
    """(train contents, unseen pool) for the public `seed`: `TRAIN_SHARE` of each operation's
    contents for training, the rest the pool the held-out contents are drawn from."""
    rng = random.Random(f"arith-split-{seed}")
    train: list[Content] = []
    pool: list[Content] = []
    for op in OPS:
        contents = [c for c in content_space() if c.op == op]
        chosen = set(rng.sample(contents, round(len(contents) * TRAIN_SHARE)))
        train += [c for c in contents if c in chosen]
        pool += [c for c in contents if c not in chosen]
    return train, pool


def heldout_contents(pool: list[Content], heldout_seed: int, n_heldout: int = N_HELDOUT) -> list[Content]:
    """`n_heldout` contents of the unseen `pool` (half per operation), chosen by `heldout_seed`."""
    rng = random.Random(f"arith-heldout-{heldout_seed}")
    chosen: list[Content] = []
    for op, k in zip(OPS, _per_op(n_heldout), strict=True):
        chosen += rng.sample([c for c in pool if c.op == op], k)
    rng.shuffle(chosen)
    return chosen


def generate(
    seed: int = 0, n_train: int = N_TRAIN, n_heldout: int = N_HELDOUT, *, heldout_seed: int | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train rows, held-out rows). Agent-visible train rows keep only id/question/answer.

    Train rows depend on `seed` only; held-out rows on `heldout_seed` too (default: `seed`,
    which is what anyone with the public code and seed can regenerate)."""
    train_contents, pool = split_contents(seed)
    held_seed = seed if heldout_seed is None else heldout_seed
    held_rng = random.Random(f"arith-heldout-items-{held_seed}")
    heldout = [
        make_item(c, held_rng, item_id=f"arith-heldout-{i + 1:05d}")
        for i, c in enumerate(heldout_contents(pool, held_seed, n_heldout))
    ]
    rng = random.Random(f"arith-items-{seed}")
    train = [
        _public(make_item(c, rng, item_id=f"arith-train-{i + 1:06d}"))
        for i, c in enumerate(_train_contents(train_contents, n_train, rng))
    ]
    return train, heldout


def _train_contents(contents: list[Content], n: int, rng: random.Random) -> Iterator[Content]:
    # Each train content once (shuffled) before any repeats, so coverage is even.
    produced = 0
    while produced < n:
        order = list(contents)
        rng.shuffle(order)
        yield from order[: n - produced]
        produced += min(len(order), n - produced)


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["id"], "question": item["question"], "answer": item["answer"]}
