"""The vLLM backend.

On CPU: everything that needs no engine, checked against the installed vllm's own classes
(the lock holds vllm, so it is importable wherever the tests run). On a GPU (marker `gpu`): the
same greedy outputs twice on the tiny model, and a clean close.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from a2rl_grader.inference.loading import ModelLoadError
from a2rl_grader.inference.select import resolve_backend_name, vllm_importable
from a2rl_grader.inference.text import cut_at_stops, prompt_texts
from a2rl_grader.inference.vllm_backend import (
    NO_GPU,
    EngineSettings,
    VLLMBackend,
    completions,
    engine_kwargs,
    require_gpu,
    sampling_kwargs,
)
from pydantic import ValidationError
from transformers import AutoTokenizer

from a2rl.inference import GenerationRequest

no_gpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")


@pytest.fixture(scope="module")
def vllm() -> ModuleType:
    # Imported here, not at module level: importing vllm takes seconds, and collection of the
    # whole unit tier should not pay for it.
    import vllm

    return vllm


@pytest.fixture(scope="module")
def model_config(vllm: ModuleType, tiny_model: Path) -> Any:
    """vLLM's own model config for our engine arguments (built from the model dir, no GPU)."""
    settings = EngineSettings(dtype="float32", max_model_len=256)
    return vllm.EngineArgs(**engine_kwargs(tiny_model, settings, gpus=1)).create_model_config()


def test_sampling_params_are_greedy_in_vllms_own_class(vllm: ModuleType) -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingType

    request = GenerationRequest(max_new_tokens=7, stop=("Question:", "", "\n\n"))
    params = vllm.SamplingParams(**sampling_kwargs(request))
    assert params.sampling_type == SamplingType.GREEDY
    assert params.max_tokens == 7
    assert params.stop == ["Question:", "\n\n"]  # the empty one dropped: vLLM rejects it
    assert params.skip_special_tokens and not params.include_stop_str_in_output
    with pytest.raises(VLLMValidationError, match="empty string"):
        vllm.SamplingParams(stop=[""])
    assert vllm.SamplingParams(**sampling_kwargs(GenerationRequest(max_new_tokens=3))).stop == []


def test_engine_kwargs_are_vllms_engine_args(model_config: Any, tiny_model: Path) -> None:
    assert model_config.model == str(tiny_model) and model_config.tokenizer == str(tiny_model)
    assert model_config.trust_remote_code is False
    assert model_config.dtype == torch.float32
    assert model_config.max_model_len == 256
    assert model_config.seed == 0


@pytest.mark.parametrize(
    ("settings", "gpus", "tp"), [({}, 3, 2), ({}, 8, 8), ({"tensor_parallel_size": 1}, 4, 1)]
)
def test_tensor_parallel_size_from_the_visible_gpus(
    settings: dict[str, Any], gpus: int, tp: int, tiny_model: Path
) -> None:
    assert engine_kwargs(tiny_model, EngineSettings(**settings), gpus)["tensor_parallel_size"] == tp


def test_engine_settings_reject_what_vllm_would_fail_on_later() -> None:
    for bad in ({"gpu_memory_utilization": 0}, {"gpu_memory_utilization": 1.5}, {"tensor_parallel_size": 0}):
        with pytest.raises(ValidationError):
            EngineSettings(**bad)
    with pytest.raises(ValidationError, match="extra"):
        EngineSettings(trust_remote_code=True)  # type: ignore[call-arg]


def test_chat_prompts_with_the_tokenizer_the_engine_uses(model_config: Any, tiny_model: Path) -> None:
    from vllm.tokenizers import cached_tokenizer_from_config

    engine_tokenizer = cached_tokenizer_from_config(model_config)
    prompts = ["What is 1 + 2?", "What is 40 - 2?"]
    texts = prompt_texts(engine_tokenizer, prompts, chat=True)
    assert texts == prompt_texts(AutoTokenizer.from_pretrained(tiny_model), prompts, chat=True)
    assert all(p in t and t != p for p, t in zip(prompts, texts, strict=True))
    assert prompt_texts(engine_tokenizer, prompts, chat=False) == prompts
    with pytest.raises(ModelLoadError, match="chat template"):
        prompt_texts(SimpleNamespace(chat_template=None), prompts, chat=True)


def vllm_stream_text(text: str, stops: Sequence[str], chunk: int) -> str:
    """The text vLLM's detokenizer returns when the model emits `text` in `chunk`-character
    tokens (greedy, stop strings not included), using vLLM's own stop check."""
    from vllm.v1.engine.detokenizer import check_stop_strings

    out = ""
    for start in range(0, len(text), chunk):
        piece = text[start : start + chunk]
        out += piece
        hit = check_stop_strings(out, len(piece), list(stops), include_in_output=False)
        if hit is not None:
            return out[: hit[1]]
    return out


def transformers_text(text: str, stops: Sequence[str], chunk: int) -> str:
    """The transformers backend's text: generation ends once a stop string has appeared
    (`stop_strings`), then `cut_at_stops`."""
    out = ""
    for start in range(0, len(text), chunk):
        out += text[start : start + chunk]
        if any(s in out for s in stops):
            break
    return cut_at_stops(out, stops)


@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize(
    ("text", "stops"),
    [
        ("12\nQuestion: 3", ["Question:"]),
        ("no stop here", ["Question:"]),
        ("xabcd", ["xabcd", "ab"]),  # a later-starting stop completes first, in a later token
        ("a\n\nb Question:", ["Question:", "\n\n"]),
        ("Question: at the start", ["Question:"]),
    ],
)
def test_stop_strings_end_the_text_as_with_transformers(
    vllm: ModuleType, text: str, stops: list[str], chunk: int
) -> None:
    streamed = vllm_stream_text(text, stops, chunk)
    outputs = [SimpleNamespace(outputs=[SimpleNamespace(text=streamed)])]
    assert completions(outputs, stops) == [streamed] == [transformers_text(text, stops, chunk)]


def test_one_token_completing_two_overlapping_stops_is_the_one_difference(vllm: ModuleType) -> None:
    # vLLM cuts where the first stop to complete starts, transformers' text (the whole token)
    # where the first stop starts. No task's stop strings overlap like this.
    assert vllm_stream_text("xabcd", ["xabcd", "ab"], chunk=5) == "x"
    assert transformers_text("xabcd", ["xabcd", "ab"], chunk=5) == ""


def test_completions_read_vllms_output_classes(vllm: ModuleType) -> None:
    def output(text: str) -> Any:
        done = vllm.CompletionOutput(
            index=0, text=text, token_ids=[1], cumulative_logprob=None, logprobs=None
        )
        return vllm.RequestOutput(
            request_id="r",
            prompt="p",
            prompt_token_ids=[1],
            prompt_logprobs=None,
            outputs=[done],
            finished=True,
        )

    assert completions([output("4 Question: 5"), output(" 38")], ["Question:"]) == ["4 ", " 38"]


def test_require_gpu() -> None:
    require_gpu(1)
    with pytest.raises(ModelLoadError, match=NO_GPU):
        require_gpu(0)


@no_gpu_only
def test_without_a_gpu_the_backend_says_so(tiny_model: Path) -> None:
    with pytest.raises(ModelLoadError, match=NO_GPU):
        VLLMBackend(tiny_model, dtype="float32")


@no_gpu_only
def test_auto_picks_transformers_on_cpu_although_vllm_is_installed() -> None:
    assert vllm_importable()
    assert resolve_backend_name("auto") == "transformers"


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_generates_greedily_and_closes(tiny_model: Path) -> None:
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
