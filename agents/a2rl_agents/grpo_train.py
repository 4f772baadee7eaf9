"""GRPO in rounds with trl's `GRPOTrainer` and the exact-match rule reward (the GRPO agent's code).

The policy is an in-memory model (usually the SFT warm-up's), trained round by round with one
AdamW optimizer across rounds at a constant learning rate; a round lasts a given number of
seconds (optionally capped in steps). Every step samples `num_generations` completions per
prompt, rewards each with `exact_match_reward` and takes a group-normalised policy-gradient
step. No reference model is kept (`beta = 0`), which halves the work on a CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from a2rl_agents.gsm8k_format import build_prompt, gold_number
from a2rl_agents.rewards import exact_match_reward
from a2rl_agents.trainer_rounds import RoundSession


@dataclass(frozen=True)
class GRPOSettings:
    learning_rate: float = 1e-4
    #: Prompts per optimizer step; each gets `num_generations` sampled completions.
    prompts_per_step: int = 8
    num_generations: int = 4
    #: The evaluator's limit; the column form takes at most 21 tokens + end-of-sequence.
    max_completion_length: int = 24
    temperature: float = 1.0
    max_grad_norm: float = 1.0
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GRPORoundStats:
    steps: int
    seconds: float
    #: Mean reward of the sampled completions over the round (None when not logged).
    reward: float | None
    interrupted: bool


def prompt_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """GRPO examples: the evaluator's prompt and the gold number (passed to the reward)."""
    return [{"prompt": build_prompt(r["question"]), "gold": gold_number(str(r["answer"]))} for r in rows]


def grpo_config_kwargs(settings: GRPOSettings, common: dict[str, Any]) -> dict[str, Any]:
    """trl `GRPOConfig` arguments of a round: `common` (`RoundSession.trainer_args`) plus GRPO's.

    The completions are sampled by the trained model itself (`use_vllm=False`): the reference
    agents train on CPU.
    """
    return {
        **common,
        "per_device_train_batch_size": settings.prompts_per_step * settings.num_generations,
        "num_generations": settings.num_generations,
        "max_completion_length": settings.max_completion_length,
        "temperature": settings.temperature,
        "beta": 0.0,
        "learning_rate": settings.learning_rate,
        "lr_scheduler_type": "constant",
        "max_grad_norm": settings.max_grad_norm,
        "logging_steps": 1,
        "use_vllm": False,
    }


class GRPOSession(RoundSession):
    """A policy trained round by round with GRPO; saved after each round."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        rows: Sequence[dict[str, str]],
        settings: GRPOSettings,
        *,
        work_dir: Path,
        stop: threading.Event | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        from datasets import Dataset

        super().__init__(
            model,
            tokenizer,
            learning_rate=settings.learning_rate,
            weight_decay=0.0,
            work_dir=work_dir,
            stop=stop,
            log=log,
        )
        self.settings = settings
        self.dataset = Dataset.from_list(list(rows))

    def train_round(self, seconds: float, max_steps: int | None = None) -> GRPORoundStats:
        """Train for `seconds` (or `max_steps` steps, whichever comes first); stop early on the stop event."""
        from trl import GRPOConfig, GRPOTrainer

        s = self.settings
        clock = self.start_round(s.learning_rate, seconds, max_steps)
        config = GRPOConfig(**grpo_config_kwargs(s, self.trainer_args("grpo", max_steps, s.seed)))
        trainer = GRPOTrainer(
            model=self.model,
            reward_funcs=cast(Any, exact_match_reward),
            args=config,
            train_dataset=self.dataset,
            processing_class=self.tokenizer,
            optimizers=(self.optimizer, None),
            callbacks=self.callbacks(clock, "GRPO round"),
        )
        _, done = self.run_trainer(trainer)
        rewards = [float(e["reward"]) for e in trainer.state.log_history if "reward" in e]
        return GRPORoundStats(
            steps=done,
            seconds=clock.elapsed(),
            reward=sum(rewards) / len(rewards) if rewards else None,
            interrupted=self.stop.is_set(),
        )
