"""The bookkeeping of a reference agent's round loop, whatever it trains with.

`RoundRunner.start` connects to the grading API, syncs the clock and derives the loop settings
from the budget; the runner then reads the training pairs, writes the agent's code and settings
into `$WORKSPACE/code`, sizes each round to the time left (`round_seconds`), and saves each
round's model as `$OUTPUT_DIR/vN` and submits it (`submit`), updating the time plan.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from a2rl_agents.contract import AgentEnv, GradingClient, env_str
from a2rl_agents.gsm8k_format import read_rows
from a2rl_agents.rounds import (
    FIRST_ROUND_FRACTION,
    ROUND_FRACTION,
    Clock,
    Log,
    LoopSettings,
    TimePlan,
    copy_code,
    loop_settings,
    plan_round,
    submit_round,
)
from a2rl_agents.scratchpad import completion_pairs

#: The training file in `$DATA_PATH`.
TRAIN_FILE = "train.jsonl"
#: The agent's scratch directory in `$WORKSPACE` (trainer output).
WORK_DIR = ".agent"


class SavesModel(Protocol):
    def save(self, dest: Path) -> Path: ...


class RoundRunner:
    """One agent run: its grading client, clock, loop settings, time plan and submitted versions."""

    def __init__(
        self,
        env: AgentEnv,
        *,
        client: GradingClient,
        clock: Clock,
        loop: LoopSettings,
        stop: threading.Event,
        log: Log,
    ) -> None:
        self.env = env
        self.client = client
        self.clock = clock
        self.loop = loop
        self.stop = stop
        self.log = log
        self.plan = TimePlan(
            eval_s=loop.eval_estimate_s, overhead_s=loop.overhead_estimate_s, margin_s=loop.margin_s
        )
        #: The number of the last model submitted (`vN`); 0 before the first.
        self.version = 0

    @classmethod
    def start(
        cls,
        env: AgentEnv,
        stop: threading.Event,
        log: Log,
        *,
        first_fraction: float = FIRST_ROUND_FRACTION,
        round_fraction: float = ROUND_FRACTION,
    ) -> RoundRunner:
        """Sync the clock from the grading API; round lengths from the knobs or the budget's fractions."""
        client = GradingClient(env.grading_url)
        clock = Clock(client)
        budget = clock.remaining()
        loop = loop_settings(budget, first_fraction=first_fraction, round_fraction=round_fraction)
        log(f"task {env.task}, base model {env.base_model}, {budget:.0f}s left")
        return cls(env, client=client, clock=clock, loop=loop, stop=stop, log=log)

    @property
    def work_dir(self) -> Path:
        return self.env.workspace / WORK_DIR

    def training_pairs(self, what: str) -> tuple[list[dict[str, Any]], list[dict[str, str]], str]:
        """(rows, prompt/completion pairs, completion style) of `$DATA_PATH/train.jsonl`, logged as `what`."""
        rows = read_rows(self.env.data_path / TRAIN_FILE, self.loop.train_limit or None)
        pairs, style = completion_pairs(rows, env_str("AGENT_SFT_COMPLETION", "auto"))
        self.log(f"{len(rows)} training rows, {what} in the {style!r} style: {pairs[0]['completion']!r}")
        return rows, pairs, style

    def save_code(self, settings: dict[str, Any]) -> None:
        """Copy the agent's code and its `settings.json` into `$WORKSPACE/code` (recorded)."""
        copy_code(self.env.code_dir, {"settings.json": json.dumps(settings, indent=2) + "\n"})

    def more_rounds(self) -> bool:
        return not self.stop.is_set() and self.version < self.loop.max_rounds

    def round_seconds(self, wanted_s: float, what: str) -> float:
        """Seconds of training for the next round; 0 (logged) when even `what` and its evaluation
        do not fit the time left."""
        remaining = self.clock.sync()
        seconds = plan_round(self.plan, remaining, wanted_s, self.loop.min_round_s)
        if seconds == 0:
            self.log(f"{remaining:.0f}s left: too short for {what} and its evaluation; done")
        return seconds

    def submit(self, model: SavesModel, started: float, train_s: float) -> bool:
        """Save `model` as the next `vN` and submit it; False: stop submitting.

        `started` (monotonic) is when the round began and `train_s` its training time: the rest,
        up to the save, is recorded as the round's overhead.
        """
        self.version += 1
        model_dir = model.save(self.env.output_dir / f"v{self.version}")
        self.plan.record_overhead(time.monotonic() - started - train_s)
        return submit_round(
            self.client,
            model_dir,
            plan=self.plan,
            stop=self.stop,
            log=self.log,
            timeout_s=self.loop.submit_timeout_s,
        )
