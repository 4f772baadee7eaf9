"""`GatewayProcess`: `a2rl gateway serve` as the runner's child process, the upstream key through
its stdin (never an environment, argv or file of the agent's), its output followed for the
ready line and the budget events (and copied to `log_path`).

    config = GatewayConfig(provider="anthropic", token=new_run_token(), socket_path=sock,
                           store_uri=store_uri, run_prefix=prefix, model=model,
                           limits=Limits(tokens=..., cost_usd=...))
    gw = GatewayProcess(config, log_path, upstream_key=os.environ[api_key_env],
                        strip_env=[api_key_env], on_exhausted=lambda reason: ...)
    gw.start()                  # raises A2rlError when it does not come up
    gw.exhausted.is_set(), gw.refused.is_set(), gw.exhausted_reason
    gw.stop(timeout=60)         # SIGTERM, then SIGKILL
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

from a2rl.errors import A2rlError
from a2rl.launch import kill_group, start_a2rl, stop_service
from a2rl.redaction import MIN_SECRET_LEN
from a2rl.tracing import current_trace_env
from a2rl_gateway.app import EXHAUSTED_PREFIX, READY_PREFIX, REFUSED_PREFIX
from a2rl_gateway.config import KEY_SOURCE_STDIN, GatewayConfig
from a2rl_gateway.protocols import PROVIDER_KEY_ENVS

READY_TIMEOUT_S = 60.0


def gateway_env(
    config: GatewayConfig, base: Mapping[str, str] | None = None, strip_env: Iterable[str] = ()
) -> dict[str, str]:
    """The gateway process's environment: `base` (default: this one) without any provider key
    variable (nor those named in `strip_env`), plus the configuration, plus the trace context of
    the span current here (`A2RL_TRACEPARENT`: the gateway's spans are its children)."""
    drop = set(PROVIDER_KEY_ENVS) | set(strip_env)
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in drop}
    env.update(config.to_env())
    env.update(current_trace_env())
    return env


class GatewayProcess:
    def __init__(
        self,
        config: GatewayConfig,
        log_path: Path,
        *,
        upstream_key: str | None,
        base_env: Mapping[str, str] | None = None,
        strip_env: Iterable[str] = (),
        on_exhausted: Callable[[str], None] | None = None,
    ) -> None:
        if upstream_key is not None:
            config = _with_key_source(config, KEY_SOURCE_STDIN)
        self.config = config
        self.log_path = log_path
        self._key = upstream_key
        self._env = gateway_env(config, base_env, strip_env)
        if upstream_key is not None and len(upstream_key) >= MIN_SECRET_LEN:  # not "EMPTY" (vLLM's)
            leaked = [k for k, v in self._env.items() if upstream_key in v]
            if leaked:
                raise A2rlError(
                    f"the upstream key is in the gateway's environment ({', '.join(sorted(leaked))})"
                )
        self._on_exhausted = on_exhausted
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._ready_line = ""
        self.exhausted = threading.Event()
        self.refused = threading.Event()
        self.exhausted_reason: str | None = None
        self.url: str | None = None
        self.socket_path: str | None = str(config.socket_path) if config.socket_path else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, ready_timeout: float = READY_TIMEOUT_S) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        stdin = subprocess.PIPE if self._key is not None else subprocess.DEVNULL
        self._proc = start_a2rl(
            ["gateway", "serve"], env=self._env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=stdin
        )
        if self._key is not None:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(self._key.encode() + b"\n")
                self._proc.stdin.close()
            except OSError:
                pass  # it exited already: reported below
        assert self._proc.stdout is not None
        threading.Thread(
            target=self._follow, args=(self._proc.stdout,), name="a2rl-gateway-out", daemon=True
        ).start()
        if not self._ready.wait(ready_timeout) or not self._ready_line:
            code = self._proc.poll()
            self.kill()
            detail = _last_line(self.log_path)
            what = (
                f"exited with code {code}"
                if code is not None
                else f"was not ready within {ready_timeout:.0f} s"
            )
            raise A2rlError(
                f"the driver gateway {what}" + (f": {detail}" if detail else "") + f" (log: {self.log_path})"
            )
        for part in self._ready_line[len(READY_PREFIX) :].split():
            if part.startswith("http://"):
                self.url = part

    def _follow(self, out: IO[bytes]) -> None:
        with self.log_path.open("ab") as log:
            for raw in out:
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                if line.startswith(READY_PREFIX) and not self._ready.is_set():
                    self._ready_line = line
                    self._ready.set()
                elif line.startswith(EXHAUSTED_PREFIX):
                    self.exhausted_reason = _reason(line[len(EXHAUSTED_PREFIX) :])
                    self.exhausted.set()
                    if self._on_exhausted is not None:
                        with contextlib.suppress(Exception):
                            self._on_exhausted(self.exhausted_reason)
                elif line.startswith(REFUSED_PREFIX):
                    self.refused.set()
        self._ready.set()  # the process ended: start() stops waiting

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (calls in flight end, the summary is written), SIGKILL after `timeout` s."""
        return stop_service(self._proc, timeout)

    def kill(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        kill_group(self._proc)


def _with_key_source(config: GatewayConfig, source: str) -> GatewayConfig:
    return dataclasses.replace(config, key_source=source)


def _reason(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return str(data.get("reason", text)) if isinstance(data, dict) else text


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
