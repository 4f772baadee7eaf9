"""Choose an inference backend: vLLM where a CUDA GPU and vLLM are present, else transformers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError
from a2rl.inference import InferenceBackend

BACKENDS = ("auto", "transformers", "vllm")


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_backend_name(name: str) -> str:
    """The concrete backend `name` stands for ("auto" → "vllm" or "transformers")."""
    if name not in BACKENDS:
        raise A2rlError(f"unknown inference backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        return "vllm" if cuda_available() and vllm_importable() else "transformers"
    if name == "vllm" and not (cuda_available() and vllm_importable()):
        raise A2rlError("the vllm backend needs a CUDA GPU and the vllm package (pip install 'a2rl[gpu]')")
    return name


def select_backend(
    name: str, model_dir: Path | str, *, batch_size: int = 32, **kwargs: Any
) -> InferenceBackend:
    """Load `model_dir` with the backend `name` ("auto" | "transformers" | "vllm").

    `batch_size` applies to transformers (vLLM schedules its own batches); other keyword
    arguments go to the chosen backend's constructor.
    """
    concrete = resolve_backend_name(name)
    if concrete == "vllm":
        # lazy: only the chosen backend's library (vLLM or torch)
        from a2rl_grader.inference.vllm_backend import VLLMBackend

        return VLLMBackend(model_dir, **kwargs)
    # lazy: only the chosen backend's library (vLLM or torch)
    from a2rl_grader.inference.transformers_backend import TransformersBackend

    return TransformersBackend(model_dir, batch_size=batch_size, **kwargs)
