"""Deterministic generation of `arith` items (GSM8K format) with a content-disjoint held-out split.

An item's *content* is `(a, op, b)`, drawn from a space of about 1.5 million (`space_size()`:
operands 0..`MAX_OPERAND`). The train split's contents come from the public `seed`; the held-out
split's contents (and their phrasings and order) are drawn from the same distribution with
`heldout_seed`, which staging derives from a secret (`a2rl_tasks.staging`), and any content the
train split holds is drawn again. So no held-out question, in any phrasing, has its numbers and
operation in the training data, and the held-out set is no subset of anything smaller than the
whole space that public code and the public `SEED` compute: the agent can regenerate the train
split, not the held-out one, and the space is about 3,000 times the held-out set (a computation
of K contents from public code covers about K / `space_size()` of it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

OPS = ("+", "-")
MAX_OPERAND = 999
N_TRAIN = 20_000
N_HELDOUT = 500

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


def space_size() -> int:
    """How many contents there are: a + b with a, b in 0..MAX_OPERAND, and a - b with a >= b."""
    n = MAX_OPERAND + 1
    return n * n + n * (n + 1) // 2


def draw_content(rng: random.Random, op: str) -> Content:
    """One content of operation `op`: operands uniform in 0..MAX_OPERAND (for `-`, the larger first,
    so no answer is negative). Train and held-out contents come from this same distribution."""
    a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
    if op == "-" and b > a:
        a, b = b, a
    return Content(a, op, b)


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


def draw_contents(rng: random.Random, n: int, exclude: frozenset[Content] = frozenset()) -> list[Content]:
    """`n` distinct contents (half per operation, in random order), none of them in `exclude`."""
    chosen: list[Content] = []
    seen = set(exclude)
    for op, k in zip(OPS, _per_op(n), strict=True):
        got = 0
        while got < k:
            c = draw_content(rng, op)
            if c not in seen:
                seen.add(c)
                chosen.append(c)
                got += 1
    rng.shuffle(chosen)
    return chosen


def train_contents(seed: int, n_train: int = N_TRAIN) -> list[Content]:
    """The train split's contents: public (`seed` only)."""
    return draw_contents(random.Random(f"arith-train-contents-{seed}"), n_train)


def heldout_contents(heldout_seed: int, train: list[Content], n_heldout: int = N_HELDOUT) -> list[Content]:
    """The held-out split's contents: drawn with `heldout_seed`, none of them in `train`."""
    return draw_contents(random.Random(f"arith-heldout-contents-{heldout_seed}"), n_heldout, frozenset(train))


def generate(
    seed: int = 0, n_train: int = N_TRAIN, n_heldout: int = N_HELDOUT, *, heldout_seed: int | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train rows, held-out rows). Agent-visible train rows keep only id/question/answer.

    Train rows depend on `seed` only; held-out rows on `heldout_seed` (default: `seed`, which is
    what anyone with the public code and seed can regenerate; staging passes a secret one)."""
    train_c = train_contents(seed, n_train)
    held_seed = seed if heldout_seed is None else heldout_seed
    held_rng = random.Random(f"arith-heldout-items-{held_seed}")
    heldout = [
        make_item(c, held_rng, item_id=f"arith-heldout-{i + 1:05d}")
        for i, c in enumerate(heldout_contents(held_seed, train_c, n_heldout))
    ]
    rng = random.Random(f"arith-items-{seed}")
    train = [_public(make_item(c, rng, item_id=f"arith-train-{i + 1:06d}")) for i, c in enumerate(train_c)]
    return train, heldout


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["id"], "question": item["question"], "answer": item["answer"]}
