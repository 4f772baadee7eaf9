"""The vLLM backend (GPU only): same greedy outputs as transformers on the tiny model, clean close."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from a2rl.inference import GenerationRequest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]


def test_vllm_generates_greedily_and_closes(tiny_model: Path) -> None:
    import torch
    from a2rl_grader.inference.vllm_backend import VLLMBackend

    prompts = ["Question: What is 1 + 2?\nAnswer: ", "Question: What is 40 - 2?\nAnswer: "]
    request = GenerationRequest(max_new_tokens=8, stop=("Question:",))
    backend = VLLMBackend(tiny_model, dtype="float32", gpu_memory_utilization=0.3, enforce_eager=True)
    assert backend.tensor_parallel_size >= 1
    first = backend.generate(prompts, request)
    assert first == backend.generate(prompts, request)
    assert all("Question:" not in out for out in first)
    backend.close()
    # A second engine can start in the same process once the first is closed.
    again = VLLMBackend(tiny_model, dtype="float32", gpu_memory_utilization=0.3, enforce_eager=True)
    assert again.generate(prompts, request) == first
    again.close()
    assert torch.cuda.memory_allocated() < 512 * 2**20
