"""How big a submitted model may be: its parameter count, estimated before anything is allocated.

A submission is a few files the agent wrote; `config.json` alone decides how much memory
`from_pretrained` allocates. A 44 KB submission whose config is shaped like a 70B model asks for
~280 GB. So before loading, the eval process estimates the parameters from

- `config.json` (hidden size, layers, intermediate size, vocabulary, attention and key/value
  heads, experts, tied embeddings, learned position embeddings), and
- the weight files: safetensors headers (shapes only, the header read with a size cap, no tensor
  loaded); other weight formats (`.bin`, `.pt`, …) at 2 bytes per parameter,

takes the larger, and refuses the submission when it exceeds the run's bound:

    bound = max(PARAM_BOUND_FACTOR x base, base + PARAM_BOUND_MARGIN)
          = max(4 x the base model's parameters, the base model + 1B)

4x leaves room for a grown vocabulary or wider layers; the +1B margin keeps a tiny base model
(tests, 135M models) from refusing ordinary changes. The base model's own count is estimated the
same way from its config (its weights' size at 2 bytes per parameter when the config is not
one we can read). A config we cannot read at all (no hidden size or layer count) is estimated
from the weights; with neither the submission is refused. The reason is one line, e.g.
`submission refused: config asks for ~70.6B parameters, the bound is 1.2B (4x the base model)`.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PARAM_BOUND_FACTOR = 4
PARAM_BOUND_MARGIN = 1_000_000_000
#: config.json larger than this is not a Hugging Face config.
MAX_CONFIG_BYTES = 1 << 20
#: A safetensors header larger than this is refused (real ones are KBs to a few MB).
MAX_SAFETENSORS_HEADER_BYTES = 16 << 20
#: Bytes per parameter assumed for weights whose shapes cannot be read without loading them.
OPAQUE_BYTES_PER_PARAM = 2
OPAQUE_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".npz")

_HIDDEN = ("hidden_size", "n_embd", "d_model", "dim", "model_dim", "embed_dim")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_EXTRA_LAYERS = ("encoder_layers", "decoder_layers", "num_encoder_layers", "num_decoder_layers")
_INTERMEDIATE = ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "ffn_hidden_size", "ffn_embed_dim")
_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads")
_KV_HEADS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_POSITIONS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")
_ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters", "rotary_dim", "rotary_pct", "rotary_emb_base")
_SUBCONFIGS = ("text_config", "language_config", "llm_config", "decoder", "encoder", "vision_config")


class SubmissionRefusedError(Exception):
    """The submission is refused before loading; the message is the one-line reason."""


def format_params(n: int | float) -> str:
    """70553706496 → '70.6B', 1234567 → '1.2M'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(int(n))


def _int(config: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        if isinstance(value, float) and value.is_integer() and value > 0:
            return int(value)
    return None


def config_parameters(config: Mapping[str, Any]) -> int | None:
    """Parameters a config asks for (None: not a shape we can read). Conservative: gated MLPs
    (3 matrices), untied output embeddings unless `tie_word_embeddings` is true, learned position
    embeddings unless the config names rotary ones; sub-configs (multimodal) are added."""
    total = 0
    known = False
    for key in _SUBCONFIGS:
        sub = config.get(key)
        if isinstance(sub, Mapping):
            counted = config_parameters(sub)
            if counted is not None:
                total += counted
                known = True
    hidden = _int(config, _HIDDEN)
    layers = (_int(config, _LAYERS) or 0) + sum(_int(config, (k,)) or 0 for k in _EXTRA_LAYERS)
    if hidden is None or layers == 0:
        return total if known else None
    heads = _int(config, _HEADS) or 1
    kv_heads = _int(config, _KV_HEADS) or heads
    head_dim = _int(config, ("head_dim", "kv_channels")) or max(hidden // heads, 1)
    intermediate = _int(config, _INTERMEDIATE) or 4 * hidden
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    experts = _int(config, _EXPERTS) or 0
    if experts:
        expert_size = _int(config, ("moe_intermediate_size", "expert_intermediate_size")) or intermediate
        shared = _int(config, ("n_shared_experts", "num_shared_experts")) or 0
        mlp = 3 * hidden * expert_size * (experts + shared) + hidden * experts
    else:
        mlp = 3 * hidden * intermediate
    per_layer = attention + mlp + 4 * hidden
    vocab = _int(config, ("vocab_size", "n_vocab", "padded_vocab_size")) or 0
    tied = config.get("tie_word_embeddings") is True
    embeddings = vocab * hidden * (1 if tied else 2)
    positions = 0
    if not any(key in config for key in _ROPE_KEYS) and config.get("position_embedding_type") != "rotary":
        positions = (_int(config, _POSITIONS) or 0) * hidden
    return total + layers * per_layer + embeddings + positions


def read_config(model_dir: Path) -> dict[str, Any]:
    """`config.json` of a model directory, size-capped (SubmissionRefusedError when unreadable)."""
    path = model_dir / "config.json"
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise SubmissionRefusedError(
            f"submission refused: config.json cannot be read ({exc.strerror})"
        ) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise SubmissionRefusedError(
            f"submission refused: config.json is larger than {MAX_CONFIG_BYTES >> 20} MiB"
        )
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise SubmissionRefusedError(f"submission refused: config.json is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SubmissionRefusedError("submission refused: config.json is not a JSON object")
    return value


def safetensors_parameters(path: Path) -> int:
    """Parameters a safetensors file declares in its header (no tensor read)."""
    name = path.name
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            head = f.read(8)
            if len(head) < 8:
                raise SubmissionRefusedError(f"submission refused: {name} is not a safetensors file")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_SAFETENSORS_HEADER_BYTES or length > size - 8:
                raise SubmissionRefusedError(
                    f"submission refused: {name} declares a {format_params(length)}-byte safetensors header "
                    f"(the file has {size} bytes; at most {MAX_SAFETENSORS_HEADER_BYTES >> 20} MiB accepted)"
                )
            header = json.loads(f.read(length))
    except OSError as exc:
        raise SubmissionRefusedError(f"submission refused: {name} cannot be read ({exc.strerror})") from exc
    except ValueError as exc:
        raise SubmissionRefusedError(f"submission refused: {name} has an invalid safetensors header") from exc
    if not isinstance(header, dict):
        raise SubmissionRefusedError(f"submission refused: {name} has an invalid safetensors header")
    total = 0
    for key, tensor in header.items():
        if key == "__metadata__":
            continue
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise SubmissionRefusedError(
                f"submission refused: {name} has an invalid shape for tensor {key!r}"
            )
        total += math.prod(shape)
    return total


def weight_parameters(model_dir: Path) -> int | None:
    """Parameters the weight files declare (safetensors headers; other formats by size), None
    when there are no weight files."""
    total: int | None = None
    for path in sorted(model_dir.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        if path.name.endswith(".safetensors"):
            total = (total or 0) + safetensors_parameters(path)
        elif path.name.endswith(OPAQUE_WEIGHT_SUFFIXES):
            total = (total or 0) + path.stat().st_size // OPAQUE_BYTES_PER_PARAM
    return total


@dataclass(frozen=True)
class ParameterEstimate:
    from_config: int | None
    from_weights: int | None

    @property
    def total(self) -> int | None:
        known = [n for n in (self.from_config, self.from_weights) if n is not None]
        return max(known) if known else None

    @property
    def source(self) -> str:
        """What asks for the larger count: 'config' or 'weights'."""
        if self.from_weights is not None and (self.from_config or 0) < self.from_weights:
            return "weights"
        return "config"


def estimate_parameters(model_dir: Path) -> ParameterEstimate:
    return ParameterEstimate(config_parameters(read_config(model_dir)), weight_parameters(model_dir))


@dataclass(frozen=True)
class ParameterBound:
    base_parameters: int
    factor: int = PARAM_BOUND_FACTOR
    margin: int = PARAM_BOUND_MARGIN
    #: Where an explicit bound came from (then `base_parameters` is the bound itself).
    explicit: str | None = None

    @classmethod
    def fixed(cls, limit: int, origin: str) -> ParameterBound:
        return cls(limit, factor=1, margin=0, explicit=origin)

    @property
    def limit(self) -> int:
        return max(self.factor * self.base_parameters, self.base_parameters + self.margin)

    def describe(self) -> str:
        if self.explicit is not None:
            return f"{format_params(self.limit)} ({self.explicit})"
        if self.factor * self.base_parameters >= self.base_parameters + self.margin:
            how = f"{self.factor}x the base model"
        else:
            how = f"the base model's {format_params(self.base_parameters)} + {format_params(self.margin)}"
        return f"{format_params(self.limit)} ({how})"


def check_parameter_bound(model_dir: Path, bound: ParameterBound) -> ParameterEstimate:
    """The submission's estimate; SubmissionRefusedError (one line) above the bound or when nothing
    can be estimated."""
    estimate = estimate_parameters(model_dir)
    total = estimate.total
    if total is None:
        raise SubmissionRefusedError(
            "submission refused: its size cannot be estimated (config.json names no hidden size or "
            "layer count and there are no weight files)"
        )
    if total > bound.limit:
        what = "config asks for" if estimate.source == "config" else "weight files declare"
        raise SubmissionRefusedError(
            f"submission refused: {what} ~{format_params(total)} parameters, the bound is {bound.describe()}"
        )
    return estimate


def base_parameters(config: Mapping[str, Any], weight_bytes: int) -> int:
    """The base model's parameter count: from its config, else its weights' size."""
    counted = config_parameters(config)
    if counted is None or counted == 0:
        return max(weight_bytes // OPAQUE_BYTES_PER_PARAM, 1)
    return counted
