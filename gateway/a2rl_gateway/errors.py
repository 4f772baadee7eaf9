"""Error answers in each provider's own shape, so the agent's client reports them as its provider
would. Pure.

    Anthropic  {"type": "error", "error": {"type": "<type>", "message": "…"}}
    OpenAI     {"error": {"message": "…", "type": "<type>", "param": null, "code": "<code>"}}
    Gemini     {"error": {"code": <status>, "message": "…", "status": "<STATUS>"}}

Statuses the stacks' clients treat as final, not as a reason to retry: 400 (a request the gateway
will not forward), 401 (bad token), 403 (budget exhausted), 404 (unknown endpoint), 408 (a body
that did not arrive in time), 413 (too large), 415 (a content coding it cannot read); 429 when more
calls are in flight than a run may have, 502 when the upstream cannot be reached and 503 while the
gateway stops (clients retry those a few times, as they would the provider's own).
"""

from __future__ import annotations

from typing import Any

from a2rl_gateway import protocols as p

UNAUTHORIZED = 401
BUDGET_EXHAUSTED = 403
NOT_FOUND = 404
BAD_REQUEST = 400
TIMEOUT = 408
TOO_LARGE = 413
UNSUPPORTED = 415
TOO_MANY = 429
INTERNAL = 500
BAD_GATEWAY = 502
STOPPING = 503

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
}
_OPENAI = {  # status → (type, code)
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("insufficient_quota", "driver_budget_exhausted"),
    404: ("invalid_request_error", "unknown_url"),
    408: ("invalid_request_error", "request_timeout"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "unsupported_content_encoding"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    502: ("server_error", "upstream_unreachable"),
    503: ("server_error", "gateway_stopping"),
}
_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}


def error_body(protocol: str, status: int, message: str) -> dict[str, Any]:
    """The JSON body of an error answer with `status` in `protocol`'s shape."""
    if protocol == p.ANTHROPIC:
        return {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message},
        }
    if protocol == p.GEMINI:
        return {
            "error": {"code": status, "message": message, "status": _GEMINI_STATUS.get(status, "UNKNOWN")}
        }
    etype, code = _OPENAI.get(status, ("server_error", None))
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}
