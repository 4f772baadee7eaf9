"""The transformers backend on the tiny model: greedy, deterministic, batch-invariant, stop strings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from a2rl_grader.inference.loading import ModelLoadError
from a2rl_grader.inference.select import resolve_backend_name, select_backend
from a2rl_grader.inference.text import cut_at_stops, largest_power_of_two_at_most
from a2rl_grader.inference.transformers_backend import TransformersBackend

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest

PROMPTS = [
    "Question: What is 1 + 2?\nAnswer: ",
    "Question: Ava has 47 coins and gets 38 more. How many coins does Ava have now?\nAnswer: ",
    "Hello",
    "Question: What is 99 - 9?\nAnswer: ",
    "The number",
]


@pytest.fixture(scope="module")
def backend(tiny_model: Path) -> TransformersBackend:
    return TransformersBackend(tiny_model, device="cpu", batch_size=4)


def test_cut_at_stops() -> None:
    assert cut_at_stops("85\nQuestion: next", ["Question:"]) == "85\n"
    assert cut_at_stops("a STOP b END", ["END", "STOP"]) == "a "
    assert cut_at_stops("nothing", ["X", ""]) == "nothing"


@pytest.mark.parametrize(("n", "p"), [(0, 1), (1, 1), (2, 2), (3, 2), (7, 4), (8, 8), (12, 8)])
def test_tensor_parallel_size(n: int, p: int) -> None:
    assert largest_power_of_two_at_most(n) == p


def test_generation_is_deterministic_and_batch_invariant(
    tiny_model: Path, backend: TransformersBackend
) -> None:
    request = GenerationRequest(max_new_tokens=12)
    batched = backend.generate(PROMPTS, request)
    assert batched == backend.generate(PROMPTS, request)
    one_by_one = TransformersBackend(tiny_model, device="cpu", batch_size=1).generate(PROMPTS, request)
    assert batched == one_by_one
    assert len(batched) == len(PROMPTS) and any(batched)


def test_outputs_keep_prompt_order(backend: TransformersBackend) -> None:
    request = GenerationRequest(max_new_tokens=8)
    forward = backend.generate(PROMPTS, request)
    backward = backend.generate(PROMPTS[::-1], request)
    assert forward == backward[::-1]


def test_stop_strings_are_applied(backend: TransformersBackend) -> None:
    request = GenerationRequest(max_new_tokens=16)
    full = backend.generate(PROMPTS[:1], request)[0]
    assert len(full) >= 4
    stop = full[2:4]  # a piece of the real output, so it must be cut there
    cut = backend.generate(PROMPTS[:1], GenerationRequest(max_new_tokens=16, stop=(stop,)))[0]
    assert cut == full[: full.index(stop)]


def test_stop_strings_end_generation_early_with_the_same_text(tiny_model: Path) -> None:
    backend = TransformersBackend(tiny_model, device="cpu", batch_size=2)
    full = backend.generate(PROMPTS[:2], GenerationRequest(max_new_tokens=40))
    assert backend.decode_steps == 40  # the tiny model never ends a sequence on its own here
    # Stop strings that occur in both outputs end the batch early, text unchanged. (The random
    # model also writes partial UTF-8, which no stop string can match: stop at a plain character.)
    firsts = [re.search(r"[A-Za-z0-9]", text) for text in full]
    assert all(firsts), full
    stops = tuple(sorted({m[0] for m in firsts if m}))
    expected = [cut_at_stops(text, stops) for text in full]
    assert all(len(e) < len(t) for e, t in zip(expected, full, strict=True))
    backend.decode_steps = 0
    stopped = backend.generate(PROMPTS[:2], GenerationRequest(max_new_tokens=40, stop=stops))
    assert stopped == expected
    assert backend.decode_steps < 40


def test_chat_mode_uses_the_template(backend: TransformersBackend) -> None:
    request = GenerationRequest(max_new_tokens=8, chat=True)
    chat = backend.generate(["What is 1 + 2?"], request)
    assert chat == backend.generate(["<|user|>\nWhat is 1 + 2?\n<|assistant|>\n"], GenerationRequest(8))


def test_model_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        TransformersBackend(tmp_path / "missing", device="cpu")
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "adapter_config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="LoRA adapter detected"):
        TransformersBackend(lora, device="cpu")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(Exception):  # noqa: B017 - whatever transformers raises; evaluate.py reports it
        TransformersBackend(bad, device="cpu")


def test_select_backend(tiny_model: Path) -> None:
    import torch

    expected = "transformers"
    if torch.cuda.is_available():
        import importlib.util

        expected = "vllm" if importlib.util.find_spec("vllm") else "transformers"
    assert resolve_backend_name("auto") == expected
    assert select_backend("transformers", tiny_model, batch_size=2, device="cpu").name == "transformers"
    with pytest.raises(A2rlError, match="unknown inference backend"):
        resolve_backend_name("tensorrt")
    if not torch.cuda.is_available():
        with pytest.raises(A2rlError, match="needs a CUDA GPU"):
            resolve_backend_name("vllm")
