"""The `deepsearchqa` task: multi-step web-search question answering, LLM-judged accuracy."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from a2rl.constants import ENV_JUDGE_BASE_URL, ENV_SEARCH_URL
from a2rl.errors import A2rlError
from a2rl.protocols import DEFAULT_PROTOCOL, PROTOCOL_REFERENCE, EvalProtocol
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.common.jsonl import read_heldout, write_jsonl
from a2rl_tasks.deepsearchqa import data, reference
from a2rl_tasks.deepsearchqa.judging import (
    JUDGE_MAX_TOKENS,
    decided_without_judge,
    extract_prediction,
    judge_messages,
    summary_metrics,
    verdict_from_reply,
)
from a2rl_tasks.deepsearchqa.react import rollout
from a2rl_tasks.deepsearchqa.search import HttpSearch, search_from_env, search_tag_from_env
from a2rl_tasks.judge import (
    Judge,
    JudgeError,
    JudgeReply,
    judge_config_from_env,
    judge_model_from_env,
    version_tag,
)

if TYPE_CHECKING:
    from a2rl.inference import InferenceBackend

TRAIN_FILE = "train.jsonl"
SPLIT_META_FILE = "split_meta.json"
HELDOUT_FILE = "heldout.jsonl"
BASE_VERSION = "deepsearchqa-1"


def check_reference(ref: dict[str, Any]) -> None:
    if not isinstance(ref.get("problem"), str) or not isinstance(ref.get("answer"), str):
        raise A2rlError(f'reference {ref.get("id")!r} needs "problem" and "answer" (DeepSearchQA format)')
    if ref.get("answer_type", "Single Answer") not in data.ANSWER_TYPES:
        raise A2rlError(f"reference {ref.get('id')!r}: answer_type must be one of {data.ANSWER_TYPES}")


def judge_answers(
    judge: Judge, items: list[dict[str, Any]], rollouts: list[dict[str, Any]], evaluator_version: str
) -> EvalResult:
    """Judge every predicted answer against its gold answer."""
    answer_types = [it.get("answer_type") or "Single Answer" for it in items]
    fixed = [
        decided_without_judge(r["predicted"], it["answer"]) for it, r in zip(items, rollouts, strict=True)
    ]
    pending = [i for i, v in enumerate(fixed) if v is None]
    replies = judge.ask_many(
        [
            judge_messages(items[i]["problem"], answer_types[i], items[i]["answer"], rollouts[i]["predicted"])
            for i in pending
        ],
        max_tokens=JUDGE_MAX_TOKENS,
    )
    by_index = dict(zip(pending, replies, strict=True))
    records: list[dict[str, Any]] = []
    unparsed = 0
    for i, (item, ro) in enumerate(zip(items, rollouts, strict=True)):
        reply = by_index.get(i)
        if reply is None:
            correct = bool(fixed[i])
        else:
            verdict = verdict_from_reply(reply.text)
            if verdict is None:
                unparsed += 1
            correct = verdict is True
        records.append(
            {
                "id": item["id"],
                "problem": item["problem"],
                "problem_category": item.get("problem_category", ""),
                "answer_type": answer_types[i],
                "gold": item["answer"],
                **ro,
                "correct": correct,
                "judged": reply is not None,
                "judge_reply": None if reply is None else reply.text,
                "judge_cached": None if reply is None else reply.cached,
            }
        )
    n = len(records)
    metrics = summary_metrics(records) | judge.stats() | {"judge_unparsed": float(unparsed)}
    return EvalResult(
        score=metrics["accuracy"],
        n=n,
        correct=sum(1 for r in records if r["correct"]),
        evaluator_version=evaluator_version,
        metrics=metrics,
        details=records,
    )


def _replies_or_none(judge: Judge, requests: list[list[dict[str, str]]]) -> list[JudgeReply | None]:
    """The judge's replies; when it fails, each request again alone, None for the failed ones
    (the reference falls back to string matching per answer)."""
    try:
        return list(judge.ask_many(requests, max_tokens=JUDGE_MAX_TOKENS))
    except JudgeError:
        out: list[JudgeReply | None] = []
        for r in requests:
            try:
                out.append(judge.ask(r, max_tokens=JUDGE_MAX_TOKENS))
            except JudgeError:
                out.append(None)
        return out


def judge_answers_reference(
    judge: Judge, items: list[dict[str, Any]], rollouts: list[dict[str, Any]], evaluator_version: str
) -> EvalResult:
    """The reference's judging (`reference.py`): every answer judged with its prompt; an empty
    reply or a judge failure is decided by its string match."""
    answer_types = [it.get("answer_type") or "Single Answer" for it in items]
    requests = [
        reference.judge_messages(t, it["answer"], ro["predicted"])
        for t, it, ro in zip(answer_types, items, rollouts, strict=True)
    ]
    replies = _replies_or_none(judge, requests)
    records: list[dict[str, Any]] = []
    fallbacks = 0
    for item, ro, t, reply in zip(items, rollouts, answer_types, replies, strict=True):
        verdict = None if reply is None else reference.verdict(reply.text)
        if verdict is None:
            fallbacks += 1
            verdict = reference.string_match(ro["predicted"], item["answer"], t)
        records.append(
            {
                "id": item["id"],
                "problem": item["problem"],
                "problem_category": item.get("problem_category", ""),
                "answer_type": t,
                "gold": item["answer"],
                **ro,
                "correct": verdict,
                "judged": reply is not None,
                "judge_reply": None if reply is None else reply.text,
                "judge_cached": None if reply is None else reply.cached,
            }
        )
    metrics = summary_metrics(records) | judge.stats() | {"judge_fallbacks": float(fallbacks)}
    return EvalResult(
        score=metrics["accuracy"],
        n=len(records),
        correct=sum(1 for r in records if r["correct"]),
        evaluator_version=evaluator_version,
        metrics=metrics,
        details=records,
    )


class DeepSearchQATask(Task):
    name = "deepsearchqa"
    level = "L3"
    metric = "judged accuracy (%)"
    evaluator_version = BASE_VERSION
    data_version = "1"
    #: No built-in data: staging needs `--source`.
    default_source: str | None = None
    endpoint_env: ClassVar[tuple[str, ...]] = (ENV_JUDGE_BASE_URL, ENV_SEARCH_URL)

    def __init__(
        self, environ: Mapping[str, str] | None = None, *, protocol: EvalProtocol = DEFAULT_PROTOCOL
    ) -> None:
        super().__init__(environ, protocol=protocol)
        # The judge and the search tool decide the score: both are part of the version (and of
        # the baseline cache key).
        parts = [self.versioned(BASE_VERSION)]
        judge_model = judge_model_from_env(environ)
        if judge_model:
            parts.append(f"judge-{version_tag(judge_model)}")
        search_tag = search_tag_from_env(environ)
        if search_tag:
            parts.append(f"search-{version_tag(search_tag)}")
        self.evaluator_version = "+".join(parts)

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        rows = data.load_source(source)
        visible, heldout, meta = data.split(rows)
        write_jsonl(Path(staged.train_dir) / TRAIN_FILE, visible)
        (Path(staged.train_dir) / SPLIT_META_FILE).write_text(
            json.dumps(meta, indent=2, sort_keys=True) + "\n"
        )
        write_jsonl(Path(staged.heldout_dir) / HELDOUT_FILE, heldout)

    def default_generation_batch(self) -> int:
        return 16

    def evaluate(
        self, backend: InferenceBackend, heldout_dir: Path, *, limit: int | None = None
    ) -> EvalResult:
        # Missing judge or search configuration fails before any generation.
        judge = Judge(judge_config_from_env(self.name))
        search = search_from_env()
        items = read_heldout(Path(heldout_dir) / HELDOUT_FILE, limit)
        questions = [(it["problem"], it.get("answer_type") or "Single Answer") for it in items]
        if self.protocol == PROTOCOL_REFERENCE:
            if isinstance(search, HttpSearch):
                search.observation = reference.serpapi_observation
            rollouts = reference.rollout(backend, questions, search.search)
            result = judge_answers_reference(judge, items, rollouts, self.evaluator_version)
        else:
            rollouts = rollout(backend, questions, search.search)
            result = judge_answers(judge, items, rollouts, self.evaluator_version)
        n = max(1, len(rollouts))
        result.metrics |= {
            "avg_steps": sum(r["steps"] for r in rollouts) / n,
            "avg_searches": sum(len(r["searches"]) for r in rollouts) / n,
            "forced_answer_rate": 100.0 * sum(1 for r in rollouts if r["forced_answer"]) / n,
            "search_errors": float(search.errors),
        }
        return result

    def score_predictions(self, predictions: dict[str, str], references: list[dict[str, Any]]) -> EvalResult:
        for ref in references:
            check_reference(ref)
        judge = Judge(judge_config_from_env(self.name))
        rollouts = [
            {"predicted": extract_prediction(predictions.get(str(ref["id"]), ""))} for ref in references
        ]
        if self.protocol == PROTOCOL_REFERENCE:
            return judge_answers_reference(judge, references, rollouts, self.evaluator_version)
        return judge_answers(judge, references, rollouts, self.evaluator_version)
