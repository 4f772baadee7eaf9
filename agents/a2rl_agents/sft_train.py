"""Supervised fine-tuning in rounds with trl's `SFTTrainer` (the training code the SFT agent runs).

One model and one AdamW optimizer live across rounds. A round is a fresh `SFTTrainer` run that
lasts a given number of **seconds** (optionally also capped in steps): its learning rate follows
a warm-up + cosine schedule over the round's *progress* — the larger of elapsed/seconds and
steps/max_steps — down to `min_lr_ratio` of the round's peak, so every round ends on an annealed
model worth submitting, however fast the machine is (warm restarts; each round's peak is the
previous one times `lr_decay_per_round`). The examples are tokenised once, the prompt on its own
exactly as the evaluator tokenises it, with the loss on the completion only.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from a2rl_agents.trainer_rounds import RoundSession


@dataclass(frozen=True)
class SFTSettings:
    learning_rate: float = 2e-3
    #: Each round's peak learning rate is the previous one times this.
    lr_decay_per_round: float = 0.7
    min_lr_ratio: float = 0.05
    warmup_ratio: float = 0.05
    batch_size: int = 32
    max_length: int = 96
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RoundStats:
    steps: int
    loss: float
    #: Training time of the round (trainer set-up and saving not included).
    seconds: float
    learning_rate: float
    interrupted: bool


def cosine_factor(progress: float, warmup_ratio: float, min_ratio: float) -> float:
    """Learning-rate multiplier: linear warm-up to 1, then cosine down to `min_ratio` at progress 1."""
    if warmup_ratio > 0 and progress < warmup_ratio:
        return max(progress / warmup_ratio, 0.01)
    span = max(1.0 - warmup_ratio, 1e-9)
    done = min(1.0, (progress - warmup_ratio) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * done))


def tokenize_examples(
    tokenizer: Any, pairs: Sequence[dict[str, str]], max_length: int
) -> dict[str, list[list[int]]]:
    """`input_ids` = prompt + completion + eos, `completion_mask` marks what the loss is on.

    The prompt is tokenised on its own (as the evaluator does), so training and evaluation see
    the same prompt tokens even where a joint tokenisation would merge across the boundary.
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token; the model could not learn to stop")
    input_ids: list[list[int]] = []
    masks: list[list[int]] = []
    for pair in pairs:
        prompt = tokenizer(pair["prompt"], add_special_tokens=True)["input_ids"]
        completion = [*tokenizer(pair["completion"], add_special_tokens=False)["input_ids"], eos]
        ids = (prompt + completion)[:max_length]
        mask = ([0] * len(prompt) + [1] * len(completion))[:max_length]
        if sum(mask) == 0:
            continue
        input_ids.append(ids)
        masks.append(mask)
    return {"input_ids": input_ids, "completion_mask": masks}


class SFTSession(RoundSession):
    """A model being fine-tuned, trained round by round and saved after each round."""

    def __init__(
        self,
        model_path: Path,
        pairs: Sequence[dict[str, str]],
        settings: SFTSettings,
        *,
        work_dir: Path,
        stop: threading.Event | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(settings.seed)
        tokenizer: Any = AutoTokenizer.from_pretrained(model_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        if torch.cuda.is_available():
            model = model.to("cuda")
        super().__init__(
            model,
            tokenizer,
            learning_rate=settings.learning_rate,
            weight_decay=settings.weight_decay,
            work_dir=work_dir,
            stop=stop,
            log=log,
        )
        self.settings = settings
        self.dataset = Dataset.from_dict(tokenize_examples(self.tokenizer, pairs, settings.max_length))

    def round_lr(self, round_index: int) -> float:
        return self.settings.learning_rate * self.settings.lr_decay_per_round**round_index

    def train_round(self, seconds: float, max_steps: int | None = None) -> RoundStats:
        """Train for `seconds` of training time (or `max_steps` steps, whichever comes first).

        Ends early, after the current step, when the stop event is set.
        """
        from torch.optim.lr_scheduler import LambdaLR
        from trl import SFTConfig, SFTTrainer

        s = self.settings
        peak = self.round_lr(self.rounds_done)
        clock = self.start_round(peak, seconds, max_steps)
        # LambdaLR calls this with the number of optimizer steps taken in this round.
        scheduler = LambdaLR(
            self.optimizer, lambda step: cosine_factor(clock.progress(step), s.warmup_ratio, s.min_lr_ratio)
        )
        config = SFTConfig(
            **self.trainer_args("trainer", max_steps, s.seed),
            per_device_train_batch_size=s.batch_size,
            learning_rate=peak,
            max_grad_norm=s.max_grad_norm,
            max_length=s.max_length,
            completion_only_loss=True,
            logging_steps=10,
        )
        trainer = SFTTrainer(
            model=self.model,
            args=config,
            train_dataset=self.dataset,
            processing_class=self.tokenizer,
            optimizers=(self.optimizer, scheduler),
            callbacks=self.callbacks(clock, "round"),
        )
        out, done = self.run_trainer(trainer)
        return RoundStats(
            steps=done,
            loss=float(out.training_loss),
            seconds=clock.elapsed(),
            learning_rate=peak,
            interrupted=self.stop.is_set(),
        )
