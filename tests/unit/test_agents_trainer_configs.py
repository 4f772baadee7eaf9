"""The reference agents' trainer arguments build the installed trl's configs (CPU, no training).

A round builds its trl config only once training starts, so without these checks an argument
the locked trl/transformers do not know fails only in the demo and the e2e tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from a2rl_agents.grpo_train import GRPOSettings, grpo_config_kwargs
from a2rl_agents.trainer_rounds import RoundSession
from trl import GRPOConfig, SFTConfig


@pytest.fixture
def session(tmp_path: Path) -> RoundSession:
    return RoundSession(torch.nn.Linear(2, 2), None, learning_rate=1e-3, weight_decay=0.0, work_dir=tmp_path)


def test_the_common_trainer_args_build_an_sft_config(session: RoundSession, tmp_path: Path) -> None:
    config = SFTConfig(**session.trainer_args("trainer", 5, seed=3))
    assert config.output_dir == str(tmp_path / "trainer")
    assert (config.max_steps, config.seed, config.save_strategy) == (5, 3, "no")
    assert config.gradient_checkpointing is False  # trl's default is True: slower for a tiny model


def test_grpo_config_without_and_with_vllm_generation(session: RoundSession) -> None:
    settings = GRPOSettings(prompts_per_step=2, num_generations=4)
    kwargs = grpo_config_kwargs(settings, session.trainer_args("grpo", 5, seed=0))
    config = GRPOConfig(**kwargs)
    assert not config.use_vllm and config.gradient_checkpointing is False
    assert (config.per_device_train_batch_size, config.num_generations, config.beta) == (8, 4, 0.0)
    # trl's vLLM generation options with the locked trl: the config builds on CPU; the engine
    # itself (GRPOTrainer with use_vllm) needs a GPU and is not exercised here.
    vllm_options = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3}
    colocated = GRPOConfig(**(kwargs | vllm_options))
    assert colocated.use_vllm and colocated.vllm_mode == "colocate"
    assert colocated.vllm_gpu_memory_utilization == 0.3
