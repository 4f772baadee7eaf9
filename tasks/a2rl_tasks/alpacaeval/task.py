"""The `alpacaeval` task: instruction following, judged pairwise against reference outputs.

Score = length-controlled win rate (%) of the model's outputs against the reference outputs
(`winrate.py`), judged by the configured OpenAI-compatible LLM judge (`a2rl_tasks.judge`).
When AlpacaEval's public `df_gamed.csv` is staged in the held-out dir, the LC win rate is
AlpacaEval's exact `length_controlled_v1` GLM (`glm.py`) in both protocols, and the result's
evaluator version ends in `+lc-glm`; otherwise it is our simplified fit (`lc_glm` = 0).

Protocols: `reference` asks the judge the reference annotator's ranking question
(`reference_judge`: AlpacaEval's prompt, its output order, its ranking parser) and leaves items
whose reply cannot be read out of the win rate; `a2rl` asks our one-identifier question
(`prompting`) and counts such items as losses. Generation is the same in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from a2rl.constants import ENV_JUDGE_BASE_URL
from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest
from a2rl.protocols import DEFAULT_PROTOCOL, PROTOCOL_REFERENCE, EvalProtocol
from a2rl_tasks.alpacaeval import data, reference_judge
from a2rl_tasks.alpacaeval.glm import GAMED_FILE, GamedTable, glm_winrate, read_gamed_table
from a2rl_tasks.alpacaeval.prompting import (
    JUDGE_MAX_TOKENS,
    MAX_NEW_TOKENS,
    is_swapped,
    judge_messages,
    preference_from_reply,
)
from a2rl_tasks.alpacaeval.winrate import PREF_DRAW, PREF_REFERENCE, win_rates
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.common.jsonl import read_heldout, write_jsonl
from a2rl_tasks.gsm8k.chat import render_chat
from a2rl_tasks.judge import Judge, judge_config_from_env, judge_model_from_env, version_tag

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

TRAIN_FILE = "train.jsonl"
HELDOUT_FILE = "heldout.jsonl"
BASE_VERSION = "alpacaeval-2"
#: Suffix of a result's evaluator version when its LC win rate is AlpacaEval's exact GLM (`glm`).
GLM_VERSION = "+lc-glm"


def build_prompts(backend: Any, instructions: list[str]) -> tuple[list[str], str]:
    """(prompt texts, "chat" | "plain"): the chat template on one user message, else the raw instruction."""
    rendered = [render_chat(backend, [{"role": "user", "content": i}]) for i in instructions]
    if rendered and all(r is not None for r in rendered):
        return [str(r) for r in rendered], "chat"
    return list(instructions), "plain"


def check_reference(ref: dict[str, Any]) -> None:
    if not isinstance(ref.get("instruction"), str) or not isinstance(ref.get("output"), str):
        raise A2rlError(
            f'reference {ref.get("id")!r} needs "instruction" and "output" (the reference model\'s output)'
        )


def judge_outputs(
    judge: Judge,
    items: list[dict[str, Any]],
    outputs: list[str],
    evaluator_version: str,
    protocol: EvalProtocol = "a2rl",
    *,
    gamed: GamedTable | None = None,
) -> EvalResult:
    """Judge every (model output, reference output) pair and compute the win rates. With `gamed`
    (AlpacaEval's public `df_gamed.csv`; item i = AlpacaEval instruction i) the LC win rate is
    AlpacaEval's `length_controlled_v1` GLM, else our simplified fit (`winrate.py`)."""
    reference = protocol == PROTOCOL_REFERENCE
    messages = reference_judge.judge_messages if reference else judge_messages
    parse = reference_judge.preference_from_reply if reference else preference_from_reply
    swapped = reference_judge.is_switched if reference else is_swapped
    pending = [
        i
        for i, (it, out) in enumerate(zip(items, outputs, strict=True))
        if out.strip() != it["output"].strip()
    ]
    replies = judge.ask_many(
        [messages(items[i]["instruction"], outputs[i], items[i]["output"]) for i in pending],
        max_tokens=JUDGE_MAX_TOKENS,
    )
    by_index = dict(zip(pending, replies, strict=True))
    records: list[dict[str, Any]] = []
    unparsed = 0
    for i, (item, out) in enumerate(zip(items, outputs, strict=True)):
        reply = by_index.get(i)
        if reply is None:  # identical to the reference: a draw, as in AlpacaEval, without asking
            pref: float | None = PREF_DRAW
        else:
            pref = parse(reply.text, item["instruction"])
            if pref is None:  # a2rl: a loss; reference: left out of the win rate (see docs)
                unparsed += 1
        records.append(
            {
                "id": item["id"],
                "instruction": item["instruction"],
                "output": out,
                "reference_output": item["output"],
                "reference_generator": item.get("generator", ""),
                "dataset": item.get("dataset", ""),
                "preference": None
                if pref is None and reference
                else PREF_REFERENCE
                if pref is None
                else pref,
                "model_preferred": pref is not None and pref > PREF_DRAW,
                "judge_reply": None if reply is None else reply.text,
                "judge_parsed": pref is not None,
                "judge_cached": None if reply is None else reply.cached,
                "swapped": swapped(item["instruction"]),
                "length": len(out),
                "reference_length": len(item["output"]),
            }
        )
    rated = [r for r in records if r["preference"] is not None]
    rates = win_rates(
        [r["preference"] for r in rated],
        [r["length"] for r in rated],
        [r["reference_length"] for r in rated],
    )
    metrics = rates.metrics() | judge.stats() | {"judge_unparsed": float(unparsed), "lc_glm": 0.0}
    if gamed is not None:
        metrics = metrics | glm_metrics(records, gamed)
        del metrics["lc_intercept"]
        evaluator_version += GLM_VERSION
    return EvalResult(
        score=metrics["length_controlled_winrate"],
        n=rates.n_total,
        correct=rates.n_wins,
        evaluator_version=evaluator_version,
        metrics=metrics,
        details=records,
    )


def glm_metrics(records: list[dict[str, Any]], gamed: GamedTable) -> dict[str, float]:
    """AlpacaEval's LC win rate over all records (unrated ones predicted, not fitted) and its weights."""
    fit = glm_winrate(
        [r["preference"] for r in records],
        [r["length"] for r in records],
        [r["reference_length"] for r in records],
        gamed,
    )
    return {
        "length_controlled_winrate": fit.length_controlled_winrate,
        "lc_glm": 1.0,
        "lc_c": fit.c,
        "lc_length_coef": fit.length_coef,
        "lc_difficulty_coef": fit.difficulty_coef,
        "lc_not_gamed_coef": fit.not_gamed_coef,
    }


def staged_gamed_table(heldout_dir: Path) -> GamedTable | None:
    """The staged `df_gamed.csv` of the held-out dir, None when it was not staged."""
    path = Path(heldout_dir) / GAMED_FILE
    return read_gamed_table(path) if path.is_file() else None


class AlpacaEvalTask(Task):
    name = "alpacaeval"
    level = "L2"
    metric = "length-controlled win rate (%)"
    evaluator_version = BASE_VERSION
    #: 2: the public LC table (`df_gamed.csv`) is staged with the held-out rows when the source has it.
    data_version = "2"
    #: No built-in data: staging needs `--source`.
    default_source: str | None = None
    endpoint_env: ClassVar[tuple[str, ...]] = (ENV_JUDGE_BASE_URL,)

    def __init__(
        self, environ: Mapping[str, str] | None = None, *, protocol: EvalProtocol = DEFAULT_PROTOCOL
    ) -> None:
        super().__init__(environ, protocol=protocol)
        # The judge model decides the score, so it is part of the version (and of the baseline
        # cache key): a different judge never reuses an old baseline.
        judge_model = judge_model_from_env(environ)
        self.evaluator_version = self.versioned(BASE_VERSION)
        if judge_model:
            self.evaluator_version += f"+judge-{version_tag(judge_model)}"

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        train, evals = data.load_source(source)
        visible, heldout = data.split(train, evals)
        write_jsonl(Path(staged.train_dir) / TRAIN_FILE, visible)
        write_jsonl(Path(staged.heldout_dir) / HELDOUT_FILE, heldout)
        data.stage_lc_table(source, len(evals), Path(staged.heldout_dir))

    def _judge(self) -> Judge:
        return Judge(judge_config_from_env(self.name))

    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:

        judge = self._judge()  # a missing judge configuration fails before any generation
        items = read_heldout(Path(heldout_dir) / HELDOUT_FILE, limit)
        gamed = staged_gamed_table(Path(heldout_dir))
        prompts, mode = build_prompts(backend, [it["instruction"] for it in items])
        outputs = [
            o.strip() for o in backend.generate(prompts, GenerationRequest(max_new_tokens=MAX_NEW_TOKENS))
        ]
        result = judge_outputs(judge, items, outputs, self.evaluator_version, self.protocol, gamed=gamed)
        for record in result.details:
            record["mode"] = mode
        return result

    def score_predictions(self, predictions: dict[str, str], references: list[dict[str, Any]]) -> EvalResult:
        for ref in references:
            check_reference(ref)
        judge = self._judge()
        outputs = [predictions.get(str(ref["id"]), "").strip() for ref in references]
        return judge_outputs(judge, references, outputs, self.evaluator_version, self.protocol)
