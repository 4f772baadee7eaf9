"""`GatewayConfig`: everything one run's driver gateway needs, from and to its environment.

    A2RL_GATEWAY_PROVIDER        anthropic | openai | gemini | openai-compatible (required)
    A2RL_GATEWAY_BASE_URL        upstream API root (default: the provider's; openai-compatible: required)
    A2RL_GATEWAY_MODEL           spec.driver.model (recorded)
    A2RL_GATEWAY_TOKEN           the per-run token the agent presents (required)
    A2RL_GATEWAY_KEY_SOURCE      stdin | file:<path>; unset: no upstream key
    A2RL_GATEWAY_PORT            also serve on <host>:<port> (0: any free port)
    A2RL_GATEWAY_HOST            the address of that listener (default 127.0.0.1; a pod: 0.0.0.0)
    A2RL_GATEWAY_SOCKET          serve on this Unix socket
    A2RL_GATEWAY_UPSTREAM_TIMEOUT  s the upstream may stay silent (default 600)
    A2RL_DRIVER_TOKENS           spec.budget.driverTokens
    A2RL_DRIVER_COST_USD         spec.budget.driverCostUSD
    A2RL_DRIVER_PRICES           the admin's price file (YAML or JSON)
    A2RL_STORE_URI, A2RL_RUN_PREFIX   where the records go (no store: nothing recorded)

The upstream key is never in this environment: it is read from the gateway's stdin (the local
runner's pipe) or from a file only the gateway can read (a mounted Secret).
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from a2rl import constants as c
from a2rl.contracts.env import gateway_contract_env
from a2rl.errors import A2rlError
from a2rl_gateway.budget import Limits
from a2rl_gateway.protocols import DEFAULT_BASE_URLS

DEFAULT_UPSTREAM_TIMEOUT_S = 600.0
HOST = "127.0.0.1"
TOKEN_PREFIX = "a2rl-run-"
KEY_SOURCE_STDIN = "stdin"
KEY_SOURCE_FILE = "file:"


def new_run_token() -> str:
    """A fresh per-run token: random, worthless anywhere but this run's gateway."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class GatewayConfig:
    provider: str
    token: str = field(repr=False)
    base_url: str = ""
    model: str | None = None
    store_uri: str | None = None
    run_prefix: str | None = None
    #: Serve on 127.0.0.1:<port> too (0: any free port); None: the Unix socket only.
    port: int | None = None
    socket_path: Path | None = None
    limits: Limits = field(default_factory=Limits)
    prices_file: Path | None = None
    upstream_timeout_s: float = DEFAULT_UPSTREAM_TIMEOUT_S
    host: str = HOST
    #: How the `a2rl gateway serve` process gets the upstream key (`stdin`, `file:<path>`, None).
    key_source: str | None = None

    def __post_init__(self) -> None:
        if self.provider not in c.DRIVER_PROVIDERS:
            raise A2rlError(
                f"driver provider must be one of {', '.join(c.DRIVER_PROVIDERS)}, got {self.provider!r}"
            )
        if not self.base_url:
            default = DEFAULT_BASE_URLS.get(self.provider)
            if default is None:
                raise A2rlError(
                    f"provider {self.provider} needs a baseUrl (the server's API root, e.g. http://host:8000/v1)"
                )
            object.__setattr__(self, "base_url", default)
        if not self.base_url.startswith(("http://", "https://")):
            raise A2rlError(f"the driver's baseUrl must be an http(s) URL, got {self.base_url!r}")
        if len(self.token) < 16:
            raise A2rlError("the gateway's per-run token is missing or too short (16 characters at least)")
        if self.port is None and self.socket_path is None:
            raise A2rlError(
                f"the gateway needs a Unix socket ({c.ENV_GATEWAY_SOCKET}) or a port ({c.ENV_GATEWAY_PORT})"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewayConfig:
        e = os.environ if env is None else env
        missing = [n for n in (c.ENV_GATEWAY_PROVIDER, c.ENV_GATEWAY_TOKEN) if not e.get(n)]
        if missing:
            raise A2rlError(f"gateway configuration incomplete: set {', '.join(missing)}")
        port = _opt_int(e, c.ENV_GATEWAY_PORT)
        if port is not None and not 0 <= port <= 65535:
            raise A2rlError(f"{c.ENV_GATEWAY_PORT} must be between 0 and 65535, got {port}")
        socket_path = (e.get(c.ENV_GATEWAY_SOCKET) or "").strip()
        host = (e.get(c.ENV_GATEWAY_HOST) or "").strip() or HOST
        prices = (e.get(c.ENV_DRIVER_PRICES) or "").strip()
        tokens = _opt_int(e, c.ENV_DRIVER_TOKENS)
        cost = _opt_num(e, c.ENV_DRIVER_COST_USD, float)
        timeout = _opt_num(e, c.ENV_GATEWAY_UPSTREAM_TIMEOUT, float)
        return cls(
            provider=e[c.ENV_GATEWAY_PROVIDER].strip(),
            token=e[c.ENV_GATEWAY_TOKEN].strip(),
            base_url=(e.get(c.ENV_GATEWAY_BASE_URL) or "").strip(),
            model=(e.get(c.ENV_GATEWAY_MODEL) or "").strip() or None,
            store_uri=e.get(c.ENV_STORE_URI) or None,
            run_prefix=e.get(c.ENV_RUN_PREFIX) or None,
            port=port,
            socket_path=Path(socket_path).expanduser().absolute() if socket_path else None,
            limits=Limits(tokens=tokens, cost_usd=cost),
            prices_file=Path(prices).expanduser() if prices else None,
            upstream_timeout_s=DEFAULT_UPSTREAM_TIMEOUT_S if timeout is None else timeout,
            key_source=(e.get(c.ENV_GATEWAY_KEY_SOURCE) or "").strip() or None,
            host=host,
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables `from_env` reads back into this configuration."""
        return gateway_contract_env(
            provider=self.provider,
            token=self.token,
            base_url=self.base_url,
            model=self.model,
            host=None if self.host == HOST else self.host,
            port=self.port,
            socket_path=self.socket_path,
            store_uri=self.store_uri,
            run_prefix=self.run_prefix,
            driver_tokens=self.limits.tokens,
            driver_cost_usd=self.limits.cost_usd,
            prices_file=self.prices_file,
            upstream_timeout_s=self.upstream_timeout_s,
            key_source=self.key_source,
        )


def read_upstream_key(source: str | None, stdin: IO[bytes] | None = None) -> str | None:
    """The upstream key from `source`: `stdin` (one line), `file:<path>`; None: no key."""
    if not source:
        return None
    if source == KEY_SOURCE_STDIN:
        if stdin is None:
            raise A2rlError("the upstream key was to come on stdin, but there is none")
        key = stdin.readline().decode("utf-8", errors="replace").strip()
    elif source.startswith(KEY_SOURCE_FILE):
        path = Path(source[len(KEY_SOURCE_FILE) :])
        try:
            key = path.read_text().strip()
        except OSError as exc:
            raise A2rlError(f"cannot read the upstream key file {path}: {exc.strerror or exc}") from None
    else:
        raise A2rlError(f"{c.ENV_GATEWAY_KEY_SOURCE} must be 'stdin' or 'file:<path>', got {source!r}")
    if not key:
        raise A2rlError(f"the upstream key from {source} is empty")
    return key


def _opt_num(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> int | float | None:
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise A2rlError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise A2rlError(f"{name} must be a finite number ≥ 0, got {raw!r}")
    return value


def _opt_int(env: Mapping[str, str], name: str) -> int | None:
    value = _opt_num(env, name, int)
    return None if value is None else int(value)
