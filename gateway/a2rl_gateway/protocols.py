"""What the gateway speaks: the endpoints of each provider's wire protocol, where a request goes
upstream, where a client puts its key, and the headers forwarded. Pure functions.

    anthropic            POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models[/<id>]
    openai,              POST /v1/chat/completions, POST /v1/responses, GET /v1/models[/<id>]
    openai-compatible
    gemini               POST /v1beta/models/<m>:generateContent, :streamGenerateContent,
                         :countTokens; GET /v1beta/models[/<m>] (also under /v1/)
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from a2rl import constants as c

ANTHROPIC = "anthropic-messages"
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
OPENAI_MODELS = "openai-models"
GEMINI = "gemini"

#: The upstream API root when `baseUrl` is not given (openai-compatible has none: required).
DEFAULT_BASE_URLS: dict[str, str] = {
    c.DRIVER_PROVIDER_ANTHROPIC: "https://api.anthropic.com",
    c.DRIVER_PROVIDER_OPENAI: "https://api.openai.com/v1",
    c.DRIVER_PROVIDER_GEMINI: "https://generativelanguage.googleapis.com",
}
#: Where each provider's own clients read their key (removed from the gateway's environment and,
#: by the runner, from the agent's).
PROVIDER_KEY_ENVS: tuple[str, ...] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENERATIVE_AI_API_KEY",
)
ANTHROPIC_VERSION = "2023-06-01"

#: Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), and those the gateway sets.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: Where a client may present a key; stripped before forwarding.
AUTH_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key"})
#: The body goes upstream as the gateway read it (decompressed, JSON): its own length, type, coding.
_BODY_HEADERS = frozenset({"content-length", "content-type", "content-encoding"})
_NOT_FORWARDED = HOP_BY_HOP | AUTH_HEADERS | _BODY_HEADERS | {"host", "accept-encoding", "cookie", "expect"}
_NOT_RETURNED = HOP_BY_HOP | {"content-length", "set-cookie", "server", "date"}

_GEMINI_METHOD = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")
_GEMINI_MODELS = re.compile(r"^/v1(?:beta|alpha)?/models(?:/(?P<model>[^/:]+))?$")
_OPENAI_MODELS = re.compile(r"^/v1/models(?:/(?P<model>[^/]+))?$")


@dataclass(frozen=True)
class Endpoint:
    """A request the gateway forwards: its protocol, GenAI operation name, and whether it meters."""

    protocol: str
    operation: str
    #: The model named in the path (Gemini, GET /v1/models/<id>); else it is in the body.
    path_model: str | None = None
    #: Streams by its path (Gemini's :streamGenerateContent); else `stream: true` in the body.
    path_stream: bool = False
    #: A generation call: its answer carries usage (a missing one is flagged).
    generates: bool = False


def error_protocol(provider: str, path: str) -> str:
    """The protocol whose error shape answers a request to `path` (its endpoint's, else the provider's)."""
    if path.startswith(("/v1beta/", "/v1alpha/")) or ":" in path.rsplit("/", 1)[-1]:
        return GEMINI
    if path.startswith("/v1/messages"):
        return ANTHROPIC
    if path.startswith(("/v1/chat/", "/v1/responses")):
        return OPENAI_CHAT
    return provider_protocol(provider)


def provider_protocol(provider: str) -> str:
    if provider == c.DRIVER_PROVIDER_ANTHROPIC:
        return ANTHROPIC
    if provider == c.DRIVER_PROVIDER_GEMINI:
        return GEMINI
    return OPENAI_CHAT


def route(provider: str, method: str, path: str) -> Endpoint | None:
    """The endpoint `method path` is for this provider, or None (the gateway answers 404)."""
    path = path.rstrip("/") or "/"
    if provider == c.DRIVER_PROVIDER_ANTHROPIC:
        if method == "POST" and path == "/v1/messages":
            return Endpoint(ANTHROPIC, "chat", generates=True)
        if method == "POST" and path == "/v1/messages/count_tokens":
            return Endpoint(ANTHROPIC, "count_tokens")
        if method == "GET" and (m := _OPENAI_MODELS.match(path)):
            return Endpoint(ANTHROPIC, "list_models", path_model=m["model"])
        return None
    if provider in (c.DRIVER_PROVIDER_OPENAI, c.DRIVER_PROVIDER_OPENAI_COMPATIBLE):
        if method == "POST" and path == "/v1/chat/completions":
            return Endpoint(OPENAI_CHAT, "chat", generates=True)
        if method == "POST" and path == "/v1/responses":
            return Endpoint(OPENAI_RESPONSES, "chat", generates=True)
        if method == "GET" and (m := _OPENAI_MODELS.match(path)):
            return Endpoint(OPENAI_MODELS, "list_models", path_model=m["model"])
        return None
    if provider == c.DRIVER_PROVIDER_GEMINI:
        if method == "POST" and (m := _GEMINI_METHOD.match(path)):
            model, verb = m["model"], m["method"]
            if verb == "generateContent":
                return Endpoint(GEMINI, "generate_content", path_model=model, generates=True)
            if verb == "streamGenerateContent":
                return Endpoint(
                    GEMINI, "generate_content", path_model=model, path_stream=True, generates=True
                )
            if verb == "countTokens":
                return Endpoint(GEMINI, "count_tokens", path_model=model)
            return None
        if method == "GET" and (m := _GEMINI_MODELS.match(path)):
            return Endpoint(GEMINI, "list_models", path_model=m["model"])
        return None
    return None


def upstream_url(base_url: str, path: str, query: str = "") -> str:
    """`base_url` + `path` (+ `?query`), without doubling a version segment both carry:
    `https://api.openai.com/v1` + `/v1/chat/completions` → `https://api.openai.com/v1/chat/completions`,
    `https://api.anthropic.com` + `/v1/messages` → `https://api.anthropic.com/v1/messages`."""
    base = base_url.rstrip("/")
    parsed = urllib.parse.urlsplit(base)
    last = parsed.path.rsplit("/", 1)[-1]
    first = path.lstrip("/").split("/", 1)[0]
    if last and last == first and re.fullmatch(r"v\d+(?:beta|alpha)?\d*", last):
        path = "/" + path.lstrip("/").split("/", 1)[1] if "/" in path.lstrip("/") else ""
    url = base + path
    return f"{url}?{query}" if query else url


def presented_tokens(headers: Iterable[tuple[str, str]], query: str) -> list[str]:
    """Every credential the request carries, wherever a provider's client puts it: `x-api-key`
    (Anthropic), `Authorization: Bearer` (OpenAI; Anthropic's auth token), `x-goog-api-key` or
    `?key=` (Gemini), `api-key` (Azure-style OpenAI clients)."""
    found: list[str] = []
    lower = {k.lower(): v for k, v in headers}
    for name in ("x-api-key", "x-goog-api-key", "api-key"):
        if lower.get(name):
            found.append(lower[name].strip())
    auth = lower.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        found.append(value.strip())
    if query:
        found += [v for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True) if k == "key" and v]
    return found


def forwarded_query(query: str) -> str:
    """The query string without `key=` (the agent's token must not reach the upstream)."""
    if not query:
        return ""
    pairs = [(k, v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True) if k != "key"]
    return urllib.parse.urlencode(pairs)


def upstream_auth(provider: str, key: str | None) -> dict[str, str]:
    """The real key, in the provider's header (none for a key-less self-hosted server)."""
    if not key:
        return {}
    if provider == c.DRIVER_PROVIDER_ANTHROPIC:
        return {"x-api-key": key}
    if provider == c.DRIVER_PROVIDER_GEMINI:
        return {"x-goog-api-key": key}
    return {"Authorization": f"Bearer {key}"}


def forward_headers(provider: str, headers: Iterable[tuple[str, str]], key: str | None) -> dict[str, str]:
    """The request headers sent upstream: the client's, less hop-by-hop, credentials and those
    describing the body (the gateway sends the body it read and validated: plain JSON), plus the
    real key; `Accept-Encoding: identity` so the gateway can read the usage in the answer."""
    out: dict[str, str] = {}
    for name, value in headers:
        if name.lower() in _NOT_FORWARDED:
            continue
        out[name] = value
    if provider == c.DRIVER_PROVIDER_ANTHROPIC and not any(k.lower() == "anthropic-version" for k in out):
        out["anthropic-version"] = ANTHROPIC_VERSION
    out["Accept-Encoding"] = "identity"
    out.update(upstream_auth(provider, key))
    return out


def returned_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's response headers passed to the client (less hop-by-hop and length)."""
    return [(k, v) for k, v in headers if k.lower() not in _NOT_RETURNED]


def request_model(endpoint: Endpoint, body: Any) -> str | None:
    if endpoint.path_model:
        return endpoint.path_model
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        return str(body["model"])
    return None


def with_stream_usage(endpoint: Endpoint, body: Any) -> Any:
    """A streamed Chat Completions request asks for the usage chunk (`stream_options.include_usage`),
    without which a stream carries no usage to meter; other requests are returned unchanged."""
    if endpoint.protocol != OPENAI_CHAT or not isinstance(body, dict) or body.get("stream") is not True:
        return body
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body
    options = dict(options) if isinstance(options, dict) else {}
    options["include_usage"] = True
    return {**body, "stream_options": options}


def client_base_url(provider: str, gateway_url: str) -> str:
    """The base URL a stack is given for the gateway at `gateway_url` (`http://127.0.0.1:PORT`):
    OpenAI clients expect the `/v1` in it, Anthropic and Gemini clients add their version."""
    url = gateway_url.rstrip("/")
    if provider in (c.DRIVER_PROVIDER_OPENAI, c.DRIVER_PROVIDER_OPENAI_COMPATIBLE):
        return f"{url}/v1"
    return url
