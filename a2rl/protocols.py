"""Evaluation protocols: which rules a task's evaluation (and what the agent is given) follows.

`reference` reproduces the reference implementation (RD-Agent `autorl_bench` @ 471eb30 with
OpenCompass 0.5.1) so scores compare with the paper; `a2rl` is our corrected protocol, each
correction listed in docs/tasks.md with its reason. The protocol is part of every evaluator
version, hence of the baseline cache key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from a2rl.errors import A2rlError

EvalProtocol = Literal["reference", "a2rl"]
PROTOCOLS: tuple[str, ...] = get_args(EvalProtocol)
PROTOCOL_REFERENCE: EvalProtocol = "reference"
PROTOCOL_A2RL: EvalProtocol = "a2rl"
DEFAULT_PROTOCOL: EvalProtocol = PROTOCOL_REFERENCE

#: The evaluation process's protocol setting (`a2rl eval --protocol` defaults to it); set from
#: `spec.evaluation.protocol` into every evaluation's environment, never the agent's (A2RL_*).
ENV_EVAL_PROTOCOL = "A2RL_EVAL_PROTOCOL"


def parse_protocol(value: str) -> EvalProtocol:
    """`value` as a protocol; an A2rlError naming the known ones otherwise."""
    if value not in PROTOCOLS:
        raise A2rlError(f"unknown evaluation protocol {value!r}; known: {', '.join(PROTOCOLS)}")
    return PROTOCOL_REFERENCE if value == PROTOCOL_REFERENCE else PROTOCOL_A2RL


def protocol_from_env(environ: Mapping[str, str] | None) -> EvalProtocol:
    """The protocol an evaluation environment names (`ENV_EVAL_PROTOCOL`), else the default."""
    value = (environ or {}).get(ENV_EVAL_PROTOCOL, "").strip()
    return parse_protocol(value) if value else DEFAULT_PROTOCOL


def spec_protocol(spec: Mapping[str, Any] | None) -> EvalProtocol:
    """`spec.evaluation.protocol` of a BenchRun spec in wire form (default when unset)."""
    evaluation = (spec or {}).get("evaluation") or {}
    return parse_protocol(str(evaluation.get("protocol") or DEFAULT_PROTOCOL))
