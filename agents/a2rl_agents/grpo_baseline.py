"""The scripted GRPO reference agent: `python -m a2rl_agents.grpo_baseline`.

Same contract as the SFT agent (environment variables + grading API only). The base model of a
CPU run is randomly initialised, so its sampled answers are never right and every GRPO reward
would be 0 — pure RL has no signal to learn from. The agent therefore starts with a short SFT
warm-up (`AGENT_FIRST_ROUND_S`, 45 % of the budget by default; 0 skips it, for a base model that
already answers), submits it as `v1`, then runs GRPO rounds with trl's `GRPOTrainer` and the
exact-match rule reward (`a2rl_agents.rewards`), saving and submitting `vN` after each round
until the time left is too short for another round and its evaluation, or SIGTERM.

Knobs: optional `AGENT_*` environment variables, listed in docs/agents.md.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace

from a2rl_agents.contract import AgentEnv, env_float, env_int
from a2rl_agents.grpo_train import GRPOSession, GRPOSettings, prompt_rows
from a2rl_agents.round_runner import RoundRunner
from a2rl_agents.rounds import Log, agent_main
from a2rl_agents.sft_baseline import sft_settings
from a2rl_agents.sft_train import SFTSession

#: Fractions of the budget: the SFT warm-up, then GRPO rounds.
WARMUP_FRACTION = 0.45
GRPO_ROUND_FRACTION = 0.15


def grpo_settings(seed: int) -> GRPOSettings:
    base = GRPOSettings()
    return replace(
        base,
        learning_rate=env_float("AGENT_GRPO_LR", base.learning_rate),
        prompts_per_step=env_int("AGENT_GRPO_PROMPTS", base.prompts_per_step),
        num_generations=env_int("AGENT_GRPO_GENERATIONS", base.num_generations),
        max_completion_length=env_int("AGENT_GRPO_MAX_COMPLETION", base.max_completion_length),
        seed=seed,
    )


def run(env: AgentEnv, stop: threading.Event, log: Log) -> int:
    runner = RoundRunner.start(
        env, stop, log, first_fraction=WARMUP_FRACTION, round_fraction=GRPO_ROUND_FRACTION
    )
    loop = runner.loop
    grpo_max_steps = env_int("AGENT_GRPO_MAX_STEPS", 0)
    sft = sft_settings(env.seed)
    grpo = grpo_settings(env.seed)
    rows, pairs, style = runner.training_pairs("warm-up completions")
    runner.save_code(
        {
            "completion_style": style,
            "sft": sft.to_json(),
            "grpo": grpo.to_json(),
            "grpo_max_steps": grpo_max_steps,
            "loop": loop.to_json(),
        }
    )

    session = SFTSession(env.model_path, pairs, sft, work_dir=runner.work_dir, stop=stop, log=log)
    log(f"loaded the base model and tokenised the examples; {runner.clock.remaining():.0f}s left")

    if loop.first_round_s > 0:
        seconds = runner.round_seconds(loop.first_round_s, "the SFT warm-up")
        if seconds == 0:
            return 0
        log(f"SFT warm-up: {seconds:.0f}s of training, peak lr {sft.learning_rate:.2e}")
        started = time.monotonic()
        stats = session.train_round(seconds, loop.round_max_steps or None)
        log(f"SFT warm-up: {stats.steps} steps in {stats.seconds:.0f}s, mean loss {stats.loss:.4f}")
        if stop.is_set() or not runner.submit(session, started, stats.seconds):
            return 0

    policy = GRPOSession(
        session.model,
        session.tokenizer,
        prompt_rows(rows),
        grpo,
        work_dir=runner.work_dir,
        stop=stop,
        log=log,
    )
    while runner.more_rounds():
        seconds = runner.round_seconds(loop.round_s, "another GRPO round")
        if seconds == 0:
            break
        log(
            f"GRPO round {policy.rounds_done + 1}: {seconds:.0f}s, {grpo.prompts_per_step} prompts x "
            f"{grpo.num_generations} completions per step, lr {grpo.learning_rate:.2e}"
        )
        started = time.monotonic()
        gstats = policy.train_round(seconds, grpo_max_steps or None)
        reward = "n/a" if gstats.reward is None else f"{gstats.reward:.3f}"
        log(
            f"GRPO round {policy.rounds_done}: {gstats.steps} steps in {gstats.seconds:.0f}s, reward {reward}"
        )
        if stop.is_set() or gstats.steps == 0 or not runner.submit(policy, started, gstats.seconds):
            break
    log(
        f"finished: {runner.version} submission(s), {session.steps_done} SFT + {policy.steps_done} GRPO steps"
    )
    return 0


def main() -> int:
    return agent_main("grpo-agent", run)


if __name__ == "__main__":
    sys.exit(main())
