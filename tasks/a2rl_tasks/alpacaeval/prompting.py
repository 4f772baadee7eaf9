"""AlpacaEval prompts: what the evaluated model sees, and what the judge sees.

**Generation** (as the reference): the instruction as a single user message rendered with the
model's chat template (generation prompt added); the raw instruction when the model has no chat
template. Greedy, at most 512 new tokens, no stop string; the output is stripped of surrounding
whitespace.

**Judging** (pairwise, one request per instruction): the judge sees the instruction and the two
outputs labelled `m` and `M` and answers with one identifier, like AlpacaEval 2.0's ranking
annotators. The reference output is `m` and the model's is `M` unless the item is swapped; the
swap is decided by the instruction's hash (half the items, deterministic, so position bias
averages out and a re-evaluation asks the identical question). The wording is our own. It does
not tell the judge to discount length: the length-controlled win rate does that (telling the
judge as well corrected twice). The `reference` protocol's judge is `reference_judge`.
"""

from __future__ import annotations

import hashlib
import re

MAX_NEW_TOKENS = 512
#: Replies longer than this are not needed: the judge answers with one identifier.
JUDGE_MAX_TOKENS = 100

JUDGE_SYSTEM = (
    "You are a meticulous evaluator of AI assistants. You compare two responses to the same "
    "instruction and decide which one a careful human expert would prefer."
)

JUDGE_TEMPLATE = (
    'Two AI assistants, identified as "m" and "M", answered the instruction below. Decide which '
    "response better accomplishes what the instruction asks: it should be helpful, accurate, "
    "relevant and complete, and follow every explicit requirement of the instruction. Judge "
    "content, not position: the order of the two responses is random.\n"
    "\n"
    "# Instruction\n<<<\n{instruction}\n>>>\n"
    "\n"
    "# Response m\n<<<\n{output_m}\n>>>\n"
    "\n"
    "# Response M\n<<<\n{output_M}\n>>>\n"
    "\n"
    "Reply with a single character and nothing else: m if response m is better, M if response M "
    "is better."
)

LABEL_FIRST = "m"
LABEL_SECOND = "M"


def is_swapped(instruction: str) -> bool:
    """Whether the model's output is shown first (`m`) for this instruction."""
    return hashlib.sha256(instruction.encode()).digest()[0] & 1 == 1


def judge_messages(instruction: str, model_output: str, reference_output: str) -> list[dict[str, str]]:
    swapped = is_swapped(instruction)
    first, second = (model_output, reference_output) if swapped else (reference_output, model_output)
    user = JUDGE_TEMPLATE.format(instruction=instruction, output_m=first, output_M=second)
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


_LABEL = re.compile(r"(?<![A-Za-z])([mM])(?![A-Za-z])")


def parse_label(reply: str) -> str | None:
    """`m`, `M`, or None when the reply names neither (or both)."""
    text = reply.strip().strip("`'\"*().:[] \n\t")
    if text in (LABEL_FIRST, LABEL_SECOND):
        return text
    found = set(_LABEL.findall(reply))
    return found.pop() if len(found) == 1 else None


def preference_from_reply(reply: str, instruction: str) -> float | None:
    """AlpacaEval preference (1 = reference better, 2 = model better); None when unparseable."""
    label = parse_label(reply)
    if label is None:
        return None
    model_label = LABEL_FIRST if is_swapped(instruction) else LABEL_SECOND
    return 2.0 if label == model_label else 1.0
