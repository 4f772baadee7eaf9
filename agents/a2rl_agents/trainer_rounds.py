"""What every trl-trainer session of the reference agents shares, whatever the training method.

A session holds one model, its tokenizer and one AdamW optimizer across rounds; each round is a
fresh trl trainer that lasts a given number of seconds (optionally capped in steps), measured by
a `RoundClock` that a trainer callback starts and checks. `RoundSession` is the common part of
the SFT and GRPO sessions (`a2rl_agents.sft_train`, `a2rl_agents.grpo_train`): the device, the
optimizer, the trainer arguments both use, running a trainer and counting its steps, and saving.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Effectively unbounded: a round ends on time unless a step cap is given.
UNBOUNDED_STEPS = 10**9


class RoundClock:
    """Progress of a round in [0, 1]: the larger of elapsed/seconds and steps/max_steps.

    Started by `start()` (the trainer's `on_train_begin`), so the trainer's set-up is not counted.
    """

    def __init__(self, seconds: float, max_steps: int | None = None) -> None:
        self.seconds = max(seconds, 1e-9)
        self.max_steps = max_steps
        self.started: float | None = None

    def start(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started

    def progress(self, steps: int) -> float:
        by_time = self.elapsed() / self.seconds
        by_steps = steps / self.max_steps if self.max_steps else 0.0
        return min(1.0, max(by_time, by_steps))


def pick_device() -> tuple[bool, bool]:
    """(use_cpu, bf16): CPU in fp32 without CUDA, bf16 on a GPU that supports it."""
    import torch

    if not torch.cuda.is_available():
        return True, False
    return False, bool(torch.cuda.is_bf16_supported())


class RoundSession:
    """A model trained round by round by fresh trl trainers that share one AdamW optimizer.

    Subclasses build the trainer of a round: `start_round` sets the round's peak learning rate
    and returns its clock, `trainer_args` gives the arguments every round's trainer config
    shares, `callbacks` the round's stop/progress callback, and `run_trainer` trains and counts.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        learning_rate: float,
        weight_decay: float,
        work_dir: Path,
        stop: threading.Event | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        import torch

        self.model: Any = model
        self.tokenizer: Any = tokenizer
        self.work_dir = Path(work_dir)
        self.stop = stop or threading.Event()
        self.log = log
        self.use_cpu, self.bf16 = pick_device()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
        self.rounds_done = 0
        self.steps_done = 0

    def start_round(self, peak_lr: float, seconds: float, max_steps: int | None) -> RoundClock:
        """Set the optimizer's learning rate to the round's peak; the round's (unstarted) clock."""
        for group in self.optimizer.param_groups:
            group["lr"] = peak_lr
            group["initial_lr"] = peak_lr
        return RoundClock(seconds, max_steps)

    def trainer_args(self, subdir: str, max_steps: int | None, seed: int) -> dict[str, Any]:
        """Trainer-config arguments of every round: no saving, no reports, this device, a
        per-round seed, and the round's step cap (none: it ends on time)."""
        return {
            "output_dir": str(self.work_dir / subdir),
            "max_steps": max_steps or UNBOUNDED_STEPS,
            "gradient_accumulation_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "disable_tqdm": True,
            "use_cpu": self.use_cpu,
            "bf16": self.bf16,
            "gradient_checkpointing": False,  # trl turns it on by default; slower for a tiny model
            "dataloader_num_workers": 0,
            "seed": seed + self.rounds_done,
            "data_seed": seed + self.rounds_done,
        }

    def callbacks(self, clock: RoundClock, label: str) -> list[Any]:
        """The round's callback, logging as `{label} N` (N: this round's number)."""
        return [round_callback(clock, self.stop, self.log, f"{label} {self.rounds_done + 1}")]

    def run_trainer(self, trainer: Any) -> tuple[Any, int]:
        """Train quietly; (the trainer's output, the steps taken), counted in this session."""
        quiet_trainer(trainer)
        out = trainer.train()
        done = int(trainer.state.global_step)
        self.rounds_done += 1
        self.steps_done += done
        return out, done

    def save(self, dest: Path) -> Path:
        return save_model(self.model, self.tokenizer, dest)


def quiet_trainer(trainer: Any) -> None:
    """Drop the trainer's printing of every log dict (`round_callback` prints compact lines)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def round_callback(
    clock: RoundClock,
    stop: threading.Event,
    log: Callable[[str], None] | None = None,
    label: str = "round",
    every_s: float = 15.0,
) -> Any:
    """A trainer callback: starts `clock`, ends training when the round is done or `stop` is set,
    and logs a progress line at most every `every_s` seconds."""
    from transformers import TrainerCallback

    class _RoundCallback(TrainerCallback):
        last_print = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            clock.start()
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if stop.is_set() or clock.progress(int(state.global_step)) >= 1.0:
                control.should_training_stop = True
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
            now = time.monotonic()
            if log is None or not logs or now - self.last_print < every_s:
                return control
            self.last_print = now
            shown = {k: logs[k] for k in ("loss", "reward", "learning_rate") if k in logs}
            text = ", ".join(f"{k} {float(v):.4g}" for k, v in shown.items())
            log(f"{label}: step {state.global_step}, {clock.elapsed():.0f}/{clock.seconds:.0f}s, {text}")
            return control

    return _RoundCallback()


def save_model(model: Any, tokenizer: Any, dest: Path) -> Path:
    """Save model + tokenizer to `dest` atomically (a temp sibling renamed into place)."""
    import shutil
    import tempfile

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.saving-", dir=dest.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
