"""The driver gateway (docs/gateway.md): an HTTP reverse proxy for one run that the agent's LLM
stack talks to instead of the upstream provider. It checks the run's token, forwards to the
provider with the real key, meters usage and cost, enforces the driver budget, records every
call in the store and emits a GenAI span per call.

    config.py    GatewayConfig (env ⇄ config), new_run_token, read_upstream_key
    protocols.py endpoints per provider, upstream URL, credentials, headers       (pure)
    bodies.py    request bodies: content codings within a limit, strict JSON        (pure)
    validation.py  the fields the meter relies on, the most a call may use          (pure)
    sse.py       server-sent events parser                                          (pure)
    usage.py     usage/model/final message per protocol, JSON and streams           (pure)
    pricing.py   the price table, the admin's price file                            (pure)
    budget.py    budget decisions, reservations                                     (pure)
    errors.py    error answers in each provider's shape                             (pure)
    redact.py    credentials out of records                                         (pure)
    spans.py     GenAI semantic-convention span attributes                          (pure)
    meter.py     Meter: totals, budget state, records in the store
    http1.py     the HTTP/1.1 server on asyncio (llhttp): connections, their bounds and deadlines
    upstream.py  Upstream: the pooled client to the provider (HTTP/1.1 on llhttp)
    server.py    the call handler: token, route, slot, body, checks, budget, relay, metering
    gateway.py   Gateway: the in-process API (the event loop in a thread of its own)
    app.py       `a2rl gateway serve`
    process.py   GatewayProcess: the runner's child process

Layer: it imports only the foundation (`a2rl`); the runner and the CLI import it.
"""

from a2rl_gateway.budget import Limits
from a2rl_gateway.config import GatewayConfig, new_run_token
from a2rl_gateway.gateway import Gateway
from a2rl_gateway.process import GatewayProcess, gateway_env
from a2rl_gateway.protocols import DEFAULT_BASE_URLS, PROVIDER_KEY_ENVS, client_base_url

__all__ = [
    "DEFAULT_BASE_URLS",
    "PROVIDER_KEY_ENVS",
    "Gateway",
    "GatewayConfig",
    "GatewayProcess",
    "Limits",
    "client_base_url",
    "gateway_env",
    "new_run_token",
]
