"""The OpenTelemetry span of one call, with the GenAI semantic-convention attributes. Pure.

name                       "<gen_ai.operation.name> <gen_ai.request.model>" ("chat claude-sonnet-4-5")
gen_ai.system              anthropic | openai | gcp.gemini (gen_ai.provider.name: the same)
gen_ai.operation.name      chat | generate_content | count_tokens | list_models
gen_ai.request.model, gen_ai.request.max_tokens, gen_ai.request.temperature, gen_ai.request.top_p
gen_ai.response.model, gen_ai.response.id, gen_ai.response.finish_reasons
gen_ai.usage.input_tokens, gen_ai.usage.output_tokens,
gen_ai.usage.cache_read.input_tokens, gen_ai.usage.cache_creation.input_tokens
http.response.status_code, server.address, error.type (a refusal, or the HTTP status ≥ 400)
a2rl.driver.provider, a2rl.driver.call.index, a2rl.driver.stream, a2rl.driver.cost_usd,
a2rl.driver.priced, a2rl.driver.refused
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from a2rl import constants as c
from a2rl.records.driver import DriverCallRecord
from a2rl_gateway.protocols import Endpoint

if TYPE_CHECKING:
    from a2rl_gateway.config import GatewayConfig

AttrValue = str | bool | int | float | Sequence[str]

GEN_AI_SYSTEMS = {
    c.DRIVER_PROVIDER_ANTHROPIC: "anthropic",
    c.DRIVER_PROVIDER_OPENAI: "openai",
    c.DRIVER_PROVIDER_OPENAI_COMPATIBLE: "openai",
    c.DRIVER_PROVIDER_GEMINI: "gcp.gemini",
}
_REQUEST_PARAMS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "max_output_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
}


def span_name(endpoint: Endpoint, model: str | None) -> str:
    return f"{endpoint.operation} {model}" if model else endpoint.operation


def span_attributes(
    config: GatewayConfig, endpoint: Endpoint, rec: DriverCallRecord, body: Any
) -> dict[str, str | bool | int | float]:
    system = GEN_AI_SYSTEMS.get(config.provider, config.provider)
    attrs: dict[str, str | bool | int | float] = {
        "gen_ai.system": system,
        "gen_ai.provider.name": system,
        "gen_ai.operation.name": endpoint.operation,
        "a2rl.driver.provider": config.provider,
        "a2rl.driver.call.index": rec.index,
        "a2rl.driver.stream": rec.stream,
    }
    host = urllib.parse.urlsplit(config.base_url).hostname
    if host:
        attrs["server.address"] = host
    if rec.request_model:
        attrs["gen_ai.request.model"] = rec.request_model
    params = body if isinstance(body, dict) else {}
    if isinstance(params.get("generationConfig"), dict):  # Gemini
        gen = params["generationConfig"]
        params = {
            "max_tokens": gen.get("maxOutputTokens"),
            "temperature": gen.get("temperature"),
            "top_p": gen.get("topP"),
        }
    for key, name in _REQUEST_PARAMS.items():
        value = params.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attrs[name] = value
    return attrs


def span_result_attributes(rec: DriverCallRecord) -> dict[str, AttrValue]:
    attrs: dict[str, AttrValue] = {}
    if rec.status is not None:
        attrs["http.response.status_code"] = rec.status
    if rec.response_model:
        attrs["gen_ai.response.model"] = rec.response_model
    if rec.response_id:
        attrs["gen_ai.response.id"] = rec.response_id
    if rec.finish_reasons:
        attrs["gen_ai.response.finish_reasons"] = list(rec.finish_reasons)
    if rec.usage is not None:
        attrs["gen_ai.usage.input_tokens"] = rec.usage.input_tokens
        attrs["gen_ai.usage.output_tokens"] = rec.usage.output_tokens
        attrs["gen_ai.usage.cache_read.input_tokens"] = rec.usage.cached_tokens
        attrs["gen_ai.usage.cache_creation.input_tokens"] = rec.usage.cache_write_tokens
        attrs["a2rl.driver.cost_usd"] = rec.cost_usd
        attrs["a2rl.driver.priced"] = rec.priced
    if rec.refused:
        attrs["a2rl.driver.refused"] = rec.refused
        attrs["error.type"] = rec.refused
    elif rec.status is not None and rec.status >= 400:
        attrs["error.type"] = str(rec.status)
    return attrs
