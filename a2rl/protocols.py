"""Evaluation protocols: which rules a task's evaluation (and what the agent is given) follows.

`reference` reproduces the reference implementation (RD-Agent `autorl_bench` @ 471eb30 with
OpenCompass 0.5.1) so scores compare with the paper; `a2rl` is our corrected protocol, each
correction listed in docs/tasks.md with its reason. The protocol is part of every evaluator
version, hence of the baseline cache key.
"""

from __future__ import annotations

from typing import Literal, get_args

EvalProtocol = Literal["reference", "a2rl"]
PROTOCOLS: tuple[str, ...] = get_args(EvalProtocol)
PROTOCOL_REFERENCE: EvalProtocol = "reference"
PROTOCOL_A2RL: EvalProtocol = "a2rl"
DEFAULT_PROTOCOL: EvalProtocol = PROTOCOL_REFERENCE
