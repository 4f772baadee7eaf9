"""Greedy batched generation with `transformers` (CPU or one GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl.inference import GenerationRequest, InferenceBackend
from a2rl_grader.inference.loading import ModelLoadError, check_model_dir
from a2rl_grader.inference.text import cut_at_stops, prompt_texts


def _pick_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _pick_dtype(dtype: str | None, device: str) -> Any:
    import torch

    if dtype is not None and dtype != "auto":
        return getattr(torch, dtype)
    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


class TransformersBackend(InferenceBackend):
    """Loads `model_dir` (never with remote code) and generates greedily in length-sorted batches."""

    name = "transformers"

    def __init__(
        self,
        model_dir: Path | str,
        device: str = "auto",
        batch_size: int = 32,
        dtype: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_dir = Path(model_dir)
        check_model_dir(model_dir)
        self.device = _pick_device(device)
        self.batch_size = max(1, batch_size)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ModelLoadError("the tokenizer has neither a pad token nor an eos token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(
            model_dir, trust_remote_code=False, dtype=_pick_dtype(dtype, self.device)
        )
        self.model: Any = model.to(self.device).eval()
        self._torch = torch
        #: Decoding steps run so far (per batch: the longest sequence's new tokens).
        self.decode_steps = 0

    def _texts(self, prompts: Sequence[str], chat: bool) -> list[str]:
        return prompt_texts(self.tokenizer, prompts, chat)

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        texts = self._texts(prompts, request.chat)
        # A chat template already contains any special tokens the model expects.
        add_special = not request.chat
        ids = [self.tokenizer(t, add_special_tokens=add_special)["input_ids"] for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        outputs: list[str] = [""] * len(texts)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            for i, text in zip(batch, self._generate_batch([ids[i] for i in batch], request), strict=True):
                outputs[i] = cut_at_stops(text, request.stop)
        return outputs

    def _generate_batch(self, batch_ids: list[list[int]], request: GenerationRequest) -> list[str]:
        torch = self._torch
        enc = self.tokenizer.pad({"input_ids": batch_ids}, padding=True, return_tensors="pt").to(self.device)
        # Stop strings end a sequence early (and the batch once every sequence has ended): the
        # text up to the stop is what greedy decoding gives anyway; `generate()` cuts it there.
        stops = [s for s in request.stop if s]
        stopping: dict[str, Any] = {"stop_strings": stops, "tokenizer": self.tokenizer} if stops else {}
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=enc["input_ids"],
                attention_mask=enc["attention_mask"],
                max_new_tokens=request.max_new_tokens,
                do_sample=False,
                num_beams=1,
                temperature=None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
                **stopping,
            )
        new_tokens = out[:, enc["input_ids"].shape[1] :]
        self.decode_steps += int(new_tokens.shape[1])
        return list(self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True))

    def close(self) -> None:
        self.model = None
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()
