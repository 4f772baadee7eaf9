"""GSM8K prompts: 4-shot chain of thought, OpenCompass `gsm8k_gen_1d7fe4`'s layout.

Each shot is a HUMAN turn `"Question: …\\nLet's think step by step\\nAnswer:"` and a BOT turn
with the worked solution ending in `"The answer is N"`. The exemplars depend on the protocol:
`reference` uses that config's four (GSM8K train items, verbatim: `reference_shots`), `a2rl`
our own four (not GSM8K items), so no GSM8K item at all is in the prompt.

- **chat** form (the model's tokenizer has a chat template): the shots are alternating
  user/assistant messages, the question is the final user message, rendered with the template.
- **plain** form (no chat template): the same turns as text,
  `"Question: …\\nLet's think step by step\\nAnswer: <solution>\\n\\n"` four times, then
  `"Question: …\\nLet's think step by step\\nAnswer:"`.
"""

from __future__ import annotations

from a2rl.protocols import PROTOCOL_REFERENCE, EvalProtocol
from a2rl_tasks.gsm8k.reference_shots import REFERENCE_EXEMPLARS

EXEMPLARS: tuple[tuple[str, str], ...] = (
    (
        "A baker makes 24 muffins in the morning and 18 muffins in the afternoon. She sells 30 of "
        "them. How many muffins does she have left?",
        "The baker makes 24 + 18 = 42 muffins in total. After selling 30 of them, she has "
        "42 - 30 = 12 muffins left.\nThe answer is 12",
    ),
    (
        "Tom reads 15 pages of his book every day for 2 weeks. The book has 300 pages. How many "
        "pages are still unread?",
        "Two weeks have 2 * 7 = 14 days. In 14 days Tom reads 14 * 15 = 210 pages. So "
        "300 - 210 = 90 pages are still unread.\nThe answer is 90",
    ),
    (
        "A shop sells pencils for $0.25 each and notebooks for $3 each. Maria buys 8 pencils and "
        "2 notebooks. How much does she spend in total?",
        "The pencils cost 8 * 0.25 = 2 dollars. The notebooks cost 2 * 3 = 6 dollars. In total "
        "Maria spends 2 + 6 = 8 dollars.\nThe answer is 8",
    ),
    (
        "A school has 1,200 students. 40% of them take the bus to school and half of the others "
        "walk. How many students walk to school?",
        "40% of 1,200 students is 0.4 * 1200 = 480 students who take the bus. That leaves "
        "1200 - 480 = 720 students, and half of them walk: 720 / 2 = 360.\nThe answer is 360",
    ),
)

HUMAN = "Question: {question}\nLet's think step by step\nAnswer:"
MAX_NEW_TOKENS = 512
STOP = "Question:"


def human_turn(question: str) -> str:
    return HUMAN.format(question=question)


def exemplars(protocol: EvalProtocol) -> tuple[tuple[str, str], ...]:
    return REFERENCE_EXEMPLARS if protocol == PROTOCOL_REFERENCE else EXEMPLARS


def chat_messages(question: str, protocol: EvalProtocol = "a2rl") -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for q, a in exemplars(protocol):
        messages.append({"role": "user", "content": human_turn(q)})
        messages.append({"role": "assistant", "content": a})
    messages.append({"role": "user", "content": human_turn(question)})
    return messages


def plain_prompt(question: str, protocol: EvalProtocol = "a2rl") -> str:
    shots = "".join(f"{human_turn(q)} {a.rstrip(chr(10))}\n\n" for q, a in exemplars(protocol))
    return shots + human_turn(question)
