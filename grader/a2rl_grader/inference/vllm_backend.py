"""Greedy generation with vLLM (GPU only).

`vllm` (and torch) are imported inside the functions that need them, not at module level:
importing vllm takes seconds and loads its CUDA kernels, and it is an optional extra
(`a2rl[gpu]`) that the CPU images do not install. Everything that does not need an engine
(engine and sampling arguments, chat rendering, stop handling) is a plain function here, so the
unit tier checks it against the installed vllm's own classes on CPU.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl_grader.inference.loading import ModelLoadError, check_model_dir
from a2rl_grader.inference.text import cut_at_stops, largest_power_of_two_at_most, prompt_texts

NO_GPU = "the vllm backend needs a CUDA GPU and none is visible"


class EngineSettings(BaseModel):
    """The `vllm.LLM` settings a caller may choose; the rest is fixed (never remote code)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: None: the largest power of two ≤ the visible GPUs (it must divide the attention heads;
    #: the reference picked it from *all* GPUs while only some were visible).
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    dtype: str = "auto"
    seed: int = 0
    enforce_eager: bool = False


class _Completion(Protocol):
    text: str


class _RequestOutput(Protocol):
    """The part of `vllm.RequestOutput` read here."""

    @property
    def outputs(self) -> Sequence[_Completion]: ...


def visible_gpu_count() -> int:
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def require_gpu(gpus: int) -> None:
    """Fail with one clear line where vLLM would fail deep in its device detection."""
    if gpus < 1:
        raise ModelLoadError(NO_GPU)


def engine_kwargs(model_dir: Path, settings: EngineSettings, gpus: int) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` (the same names as `vllm.EngineArgs`)."""
    kwargs: dict[str, Any] = {
        "model": str(model_dir),
        "tokenizer": str(model_dir),
        "trust_remote_code": False,
        "tensor_parallel_size": settings.tensor_parallel_size or largest_power_of_two_at_most(gpus),
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "dtype": settings.dtype,
        "seed": settings.seed,
        "enforce_eager": settings.enforce_eager,
    }
    if settings.max_model_len is not None:
        kwargs["max_model_len"] = settings.max_model_len
    return kwargs


def sampling_kwargs(request: GenerationRequest) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for a greedy request.

    Empty stop strings are dropped: the transformers backend ignores them, vLLM rejects them.
    vLLM leaves the stop string itself out of the text (`include_stop_str_in_output=False`).
    """
    return {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": request.max_new_tokens,
        "stop": [s for s in request.stop if s] or None,
        "skip_special_tokens": True,
    }


def completions(outputs: Sequence[_RequestOutput], stop: Sequence[str]) -> list[str]:
    """The first completion of each output, in prompt order (vLLM keeps it).

    vLLM already ends the text where the first stop string completes; cutting again keeps the
    transformers backend's semantics should vLLM's stop handling ever differ.
    """
    return [cut_at_stops(o.outputs[0].text, stop) for o in outputs]


class VLLMBackend(InferenceBackend):
    """An in-process `vllm.LLM` engine: temperature 0, never `trust_remote_code`."""

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
        settings = EngineSettings(
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
            seed=seed,
            enforce_eager=enforce_eager,
        )
        gpus = visible_gpu_count()
        require_gpu(gpus)
        import vllm

        kwargs = engine_kwargs(model_dir, settings, gpus)
        self.tensor_parallel_size: int = kwargs["tensor_parallel_size"]
        self._vllm = vllm
        self._llm: Any = vllm.LLM(**kwargs)

    @property
    def tokenizer(self) -> Any:
        """The engine's tokenizer (what `prompt_texts` and the tasks' chat rendering use)."""
        if self._llm is None:
            raise RuntimeError("VLLMBackend used after close()")
        return self._llm.get_tokenizer()

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        texts = prompt_texts(self.tokenizer, prompts, request.chat)
        params = self._vllm.SamplingParams(**sampling_kwargs(request))
        return completions(self._llm.generate(texts, params, use_tqdm=False), request.stop)

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
