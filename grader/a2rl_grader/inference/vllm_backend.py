"""Greedy generation with vLLM (GPU only; `vllm` is imported lazily, it is an optional extra)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl_grader.inference.loading import ModelLoadError, check_model_dir
from a2rl_grader.inference.text import cut_at_stops, largest_power_of_two_at_most


def visible_gpu_count() -> int:
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


class VLLMBackend(InferenceBackend):
    """An in-process `vllm.LLM` engine: temperature 0, never `trust_remote_code`.

    The tensor-parallel size is the largest power of two ≤ the visible GPUs (it must divide the
    attention heads; the reference picked it from *all* GPUs while only some were visible).
    """

    name = "vllm"

    def __init__(
        self,
        model_dir: Path | str,
        *,
        tensor_parallel_size: int | None = None,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        dtype: str = "auto",
        seed: int = 0,
        enforce_eager: bool = False,
    ) -> None:
        model_dir = Path(model_dir)
        check_model_dir(model_dir)
        gpus = visible_gpu_count()
        if gpus < 1:
            raise ModelLoadError("the vllm backend needs a CUDA GPU and none is visible")
        import vllm

        self.tensor_parallel_size = tensor_parallel_size or largest_power_of_two_at_most(gpus)
        kwargs: dict[str, Any] = {
            "model": str(model_dir),
            "tokenizer": str(model_dir),
            "trust_remote_code": False,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "seed": seed,
            "enforce_eager": enforce_eager,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self._vllm = vllm
        self._llm: Any = vllm.LLM(**kwargs)

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        if self._llm is None:
            raise RuntimeError("VLLMBackend used after close()")
        params = self._vllm.SamplingParams(
            temperature=0.0,
            top_p=1.0,
            max_tokens=request.max_new_tokens,
            stop=list(request.stop) or None,
            skip_special_tokens=True,
        )
        if request.chat:
            tokenizer = self._llm.get_tokenizer()
            if not getattr(tokenizer, "chat_template", None):
                raise ModelLoadError("chat prompts need a chat template, and the tokenizer has none")
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
                )
                for p in prompts
            ]
        else:
            texts = list(prompts)
        outputs = self._llm.generate(texts, params, use_tqdm=False)
        # vLLM returns outputs in prompt order; stops are re-applied for identical semantics
        # with the transformers backend (vLLM already excludes the stop string itself).
        return [cut_at_stops(o.outputs[0].text, request.stop) for o in outputs]

    def close(self) -> None:
        """Shut the engine down and free GPU memory so another model can load in this process."""
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        with contextlib.suppress(Exception):
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(
                getattr(engine, "engine_core", None), "shutdown", None
            )
            if callable(shutdown):
                shutdown()
        del llm
        with contextlib.suppress(Exception):
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        gc.collect()
        with contextlib.suppress(Exception):
            import torch

            torch.cuda.empty_cache()
