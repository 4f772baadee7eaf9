"""The price table: USD per million tokens, per model. Pure, apart from reading the admin's file.

A model is looked up by its name as the upstream reports it (else as requested), without a
`models/` or `<provider>/` prefix: the exact entry, else the longest entry that is a prefix of
it followed by `-`, `@` or `.` (`gpt-5-mini-2025-08-07` → `gpt-5-mini`, `claude-sonnet-4-5-20250929`
→ `claude-sonnet-4-5`). The admin's file (`A2RL_DRIVER_PRICES`, YAML or JSON) adds entries and
replaces built-in ones of the same name:

    models:
      my-finetune:                 # a model name (or a prefix of names, as above)
        input: 0.50                # per million prompt tokens (not cached)
        output: 1.50               # per million output tokens (reasoning included)
        cached_input: 0.05         # per million cache-read tokens (default: input)
        cache_write: 0.625         # per million cache-write tokens (default: input)

A model with no entry costs 0 and is flagged (`priced: false` on the call, `unpriced_models`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from a2rl.errors import A2rlError
from a2rl.records.driver import DriverUsage

PER = 1_000_000


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def cost(self, usage: DriverUsage) -> float:
        cached = min(usage.cached_tokens, usage.input_tokens)
        write = min(usage.cache_write_tokens, usage.input_tokens - cached)
        plain = usage.input_tokens - cached - write
        read_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        return (
            plain * self.input + cached * read_price + write * write_price + usage.output_tokens * self.output
        ) / PER


def _p(inp: float, out: float, cached: float | None = None, write: float | None = None) -> Price:
    return Price(inp, out, cached, write)


#: List prices of common driver models (USD per million tokens; standard tier, prompts under any
#: long-context threshold). Admins correct or extend them with their own file.
BUILTIN_PRICES: dict[str, Price] = {
    # Anthropic (cache write: the 5-minute rate)
    "claude-opus-4-5": _p(5.0, 25.0, 0.5, 6.25),
    "claude-opus-4-1": _p(15.0, 75.0, 1.5, 18.75),
    "claude-opus-4": _p(15.0, 75.0, 1.5, 18.75),
    "claude-sonnet-4-5": _p(3.0, 15.0, 0.3, 3.75),
    "claude-sonnet-4": _p(3.0, 15.0, 0.3, 3.75),
    "claude-3-7-sonnet": _p(3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4-5": _p(1.0, 5.0, 0.1, 1.25),
    "claude-3-5-haiku": _p(0.8, 4.0, 0.08, 1.0),
    # OpenAI
    "gpt-5.1": _p(1.25, 10.0, 0.125),
    "gpt-5": _p(1.25, 10.0, 0.125),
    "gpt-5-mini": _p(0.25, 2.0, 0.025),
    "gpt-5-nano": _p(0.05, 0.4, 0.005),
    "gpt-4.1": _p(2.0, 8.0, 0.5),
    "gpt-4.1-mini": _p(0.4, 1.6, 0.1),
    "gpt-4.1-nano": _p(0.1, 0.4, 0.025),
    "gpt-4o": _p(2.5, 10.0, 1.25),
    "gpt-4o-mini": _p(0.15, 0.6, 0.075),
    "o3": _p(2.0, 8.0, 0.5),
    "o4-mini": _p(1.1, 4.4, 0.275),
    # Google Gemini (prompts up to 200k tokens)
    "gemini-3-pro": _p(2.0, 12.0, 0.2),
    "gemini-2.5-pro": _p(1.25, 10.0, 0.125),
    "gemini-2.5-flash": _p(0.3, 2.5, 0.03),
    "gemini-2.5-flash-lite": _p(0.1, 0.4, 0.01),
    "gemini-2.0-flash": _p(0.1, 0.4, 0.025),
}


def normalise_model(model: str) -> str:
    name = model.strip().lower()
    if name.startswith("models/"):
        name = name[len("models/") :]
    if "/" in name:  # openrouter-style `anthropic/claude-…`, litellm `gemini/…`
        name = name.rsplit("/", 1)[-1]
    return name


def lookup(table: Mapping[str, Price], model: str | None) -> tuple[str, Price] | None:
    """The entry pricing `model` (see the module doc), or None."""
    if not model:
        return None
    name = normalise_model(model)
    keys = {normalise_model(k): k for k in table}
    if name in keys:
        return keys[name], table[keys[name]]
    best: str | None = None
    for norm in keys:
        if name.startswith(norm) and name[len(norm)] in "-@.:" and (best is None or len(norm) > len(best)):
            best = norm
    return (keys[best], table[keys[best]]) if best is not None else None


def cost(table: Mapping[str, Price], model: str | None, usage: DriverUsage) -> tuple[float, bool]:
    """(cost in USD, whether the model had a price)."""
    found = lookup(table, model)
    if found is None:
        return 0.0, False
    return found[1].cost(usage), True


def parse_prices(data: Any, where: str) -> dict[str, Price]:
    """The entries of a price file's document (see the module doc); `A2rlError` naming what is wrong."""
    if not isinstance(data, Mapping) or not isinstance(data.get("models"), Mapping):
        raise A2rlError(f"{where}: expected a mapping with a 'models' mapping of model → prices")
    out: dict[str, Price] = {}
    for name, entry in data["models"].items():
        if not isinstance(entry, Mapping):
            raise A2rlError(f"{where}: models.{name} must be a mapping (input, output, …)")
        unknown = set(entry) - {"input", "output", "cached_input", "cache_write"}
        if unknown:
            raise A2rlError(
                f"{where}: models.{name} has unknown field(s) {', '.join(sorted(map(str, unknown)))}"
            )
        values: dict[str, float | None] = {}
        for fld in ("input", "output", "cached_input", "cache_write"):
            raw = entry.get(fld)
            if raw is None:
                if fld in ("input", "output"):
                    raise A2rlError(f"{where}: models.{name}.{fld} is required (USD per million tokens)")
                values[fld] = None
                continue
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
                raise A2rlError(f"{where}: models.{name}.{fld} must be a number ≥ 0, got {raw!r}")
            values[fld] = float(raw)
        inp, outp = values["input"], values["output"]
        assert inp is not None and outp is not None
        out[str(name)] = Price(inp, outp, values["cached_input"], values["cache_write"])
    return out


def load_prices(path: Path | None) -> dict[str, Price]:
    """The built-in table extended/overridden by the file at `path` (YAML or JSON)."""
    table = dict(BUILTIN_PRICES)
    if path is None:
        return table
    try:
        text = path.read_text()
    except OSError as exc:
        raise A2rlError(f"cannot read the driver price file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        problem = " ".join(str(exc).split())
        raise A2rlError(f"the driver price file {path} is not valid {kind}: {problem}") from None
    table.update(parse_prices(data, str(path)))
    return table
