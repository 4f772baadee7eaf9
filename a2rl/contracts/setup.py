"""The set-up container's contract: what the operator passes to `a2rl recorder setup`.

The operator builds the command (`setup_argv`); the CLI parses it back into the same fields and
`a2rl_recorder.workspace_setup` acts on them. One definition keeps the two sides in step.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2rl.protocols import DEFAULT_PROTOCOL, EvalProtocol


@dataclass(frozen=True)
class SetupParams:
    """What the workspace needs from the BenchRun spec beyond the recorder's environment."""

    base_model_source: str
    base_model_name: str
    seed: int
    grace_s: int
    #: `spec.evaluation.protocol`: which description the agent gets, which data are staged.
    protocol: EvalProtocol = DEFAULT_PROTOCOL


def setup_argv(params: SetupParams) -> list[str]:
    """The container command (`a2rl recorder setup …`) for `params`; parsed back by the CLI."""
    return [
        "a2rl", "recorder", "setup",
        "--base-model-source", params.base_model_source,
        "--base-model-name", params.base_model_name,
        "--seed", str(params.seed),
        "--grace-seconds", str(params.grace_s),
        "--protocol", params.protocol,
    ]  # fmt: skip
