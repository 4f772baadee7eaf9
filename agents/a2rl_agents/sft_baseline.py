"""The scripted SFT reference agent: `python -m a2rl_agents.sft_baseline`.

It uses only the agent contract: the environment variables and the grading API. It copies its
code into `$WORKSPACE/code` (recorded by the recorder), loads the base model and
`$DATA_PATH/train.jsonl`, and fine-tunes in rounds with trl's `SFTTrainer` on exactly the prompt
format the task's description gives. After every round it saves `$OUTPUT_DIR/vN`, submits it and
logs the score; it stops when the time left (`GET /time`) is too short for another round and
its evaluation, or at SIGTERM (exit 0 either way).

Knobs: optional `AGENT_*` environment variables, listed in docs/agents.md.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace

from a2rl_agents.contract import AgentEnv, env_float, env_int
from a2rl_agents.round_runner import RoundRunner
from a2rl_agents.rounds import Log, agent_main
from a2rl_agents.sft_train import SFTSession, SFTSettings


def sft_settings(seed: int) -> SFTSettings:
    base = SFTSettings()
    return replace(
        base,
        learning_rate=env_float("AGENT_SFT_LR", base.learning_rate),
        batch_size=env_int("AGENT_SFT_BATCH", base.batch_size),
        seed=seed,
    )


def run(env: AgentEnv, stop: threading.Event, log: Log) -> int:
    runner = RoundRunner.start(env, stop, log)
    loop = runner.loop
    settings = sft_settings(env.seed)
    _, pairs, style = runner.training_pairs("completions")
    runner.save_code({"completion_style": style, "sft": settings.to_json(), "loop": loop.to_json()})

    session = SFTSession(env.model_path, pairs, settings, work_dir=runner.work_dir, stop=stop, log=log)
    log(f"loaded the base model and tokenised the examples; {runner.clock.remaining():.0f}s left")

    while runner.more_rounds():
        wanted = loop.first_round_s if runner.version == 0 else loop.round_s
        seconds = runner.round_seconds(wanted, "another round")
        if seconds == 0:
            break
        lr = session.round_lr(session.rounds_done)
        log(f"round {runner.version + 1}: {seconds:.0f}s of training, peak lr {lr:.2e}")
        started = time.monotonic()
        stats = session.train_round(seconds, loop.round_max_steps or None)
        log(
            f"round {runner.version + 1}: {stats.steps} steps in {stats.seconds:.0f}s, "
            f"mean loss {stats.loss:.4f}"
        )
        if stop.is_set() or not runner.submit(session, started, stats.seconds):
            break
    log(f"finished after {runner.version} round(s), {session.steps_done} steps")
    return 0


def main() -> int:
    return agent_main("sft-agent", run)


if __name__ == "__main__":
    sys.exit(main())
