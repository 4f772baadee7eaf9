"""The `reference` protocol's AlpacaEval judging: the reference's `alpaca_eval_gpt5_2_fn` annotator.

The reference (RD-Agent autorl_bench @471eb30, `benchmarks/alpacaeval/annotators_gpt52_fn/
configs.yaml`) runs `alpaca_eval` 0.6.6 with `prompt_template: alpaca_eval_fn.txt` (AlpacaEval's
`alpaca_eval_gpt4_turbo_fn` ranking prompt: system + user message, the two outputs labelled `m`
and `M`), `temperature 0`, `max_tokens 100`, a forced function call `make_partial_leaderboard`
(`ordered_models: [{model, rank}]`), parsers `json_parser` (key `ordered_models`) then
`ranking_parser(model_1_name="m")`, `batch_size 1`. Restated here:

- `output_1` is the reference output (`alpaca_eval.evaluate` annotates reference outputs against
  the model's), `output_2` the model's;
- order: `RandomSwitchTwoColumnsProcessor` switches the two when
  `random.Random("is_switched_outputs" + instruction + "0").choices([False, True], k=1)[0]`
  (`alpaca_eval.utils.random_seeded_choice`, seed column `instruction`, annotator seed 0);
- preference = the rank of `m` (1: `output_1` preferred, 2: `output_2`), `3 - rank` when switched;
  a reply whose ranking cannot be read gives no preference, and the item is left out of the win
  rate (alpaca_eval drops NaN preferences).

Difference we cannot avoid: our judge client sends a plain chat completion (no `tools` /
`tool_choice`), so the judge answers with the JSON as text; it is parsed the same way.

The prompt text below is AlpacaEval's `alpaca_eval_fn.txt` (tatsu-lab/alpaca_eval, Apache License
2.0), split into its two chat messages the way alpaca_eval's `prompt_to_chatml` does.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

SYSTEM = (
    "You are a highly efficient assistant, who evaluates and rank large language models (LLMs) based "
    "on the quality of their responses to given prompts. This process will create a leaderboard "
    "reflecting the most accurate and human-preferred answers."
)

USER_TEMPLATE = """I require a leaderboard for various large language models. I'll provide you with prompts given to these models and their corresponding responses. Your task is to assess these responses, ranking the models in order of preference from a human perspective. Once ranked, please output the results in a structured JSON format for the make_partial_leaderboard function.

## Prompt

{{
    "instruction": \"\"\"{instruction}\"\"\",
}}

## Model Outputs

Here are the unordered outputs from the models. Each output is associated with a specific model, identified by a unique model identifier.

{{
    {{
        "model": "m",
        "output": \"\"\"{output_1}\"\"\"
    }},
    {{
        "model": "M",
        "output": \"\"\"{output_2}\"\"\"
    }}
}}

## Task

Evaluate and rank the models based on the quality and relevance of their outputs. The ranking should be such that the model with the highest quality output is ranked first."""  # noqa: E501

#: The annotator's `max_tokens`.
JUDGE_MAX_TOKENS = 100
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def is_switched(instruction: str) -> bool:
    """alpaca_eval's `RandomSwitchTwoColumnsProcessor` decision for this instruction (seed 0)."""
    return bool(random.Random(f"is_switched_outputs{instruction}0").choices([False, True], k=1)[0])


def judge_messages(instruction: str, model_output: str, reference_output: str) -> list[dict[str, str]]:
    """The two chat messages of the reference's judge request (`output_1` = the reference output,
    switched with the model's when `is_switched`)."""
    output_1, output_2 = reference_output, model_output
    if is_switched(instruction):
        output_1, output_2 = output_2, output_1
    user = USER_TEMPLATE.format(instruction=instruction, output_1=output_1, output_2=output_2)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def rank_of_m(reply: str) -> int | None:
    """`json_parser` + `ranking_parser(model_1_name="m")`: the rank (1 or 2) the reply's
    `ordered_models` gives `m`; None when the reply holds no such ranking."""
    found = _OBJECT.search(reply)
    if found is None:
        return None
    try:
        data: Any = json.loads(found.group(0))
        ranks = [c["rank"] for c in data["ordered_models"] if c["model"] == "m"]
    except (ValueError, KeyError, TypeError):
        return None
    if not ranks or ranks[0] not in (1, 2):
        return None
    return int(ranks[0])


def preference_from_reply(reply: str, instruction: str) -> float | None:
    """AlpacaEval preference (1 = the reference output better, 2 = the model's); None when the
    reply cannot be read (the item is then dropped, as alpaca_eval drops NaN preferences)."""
    rank = rank_of_m(reply)
    if rank is None:
        return None
    return float(3 - rank if is_switched(instruction) else rank)
