"""The recorder (grading API) of a local run, as a child process, and the HTTP calls the runner makes.

The run's integrity key (`a2rl.integrity`) reaches the recorder through its stdin, one line,
then the pipe is closed; `A2RL_RUN_KEY_SOURCE=stdin` tells it to read it. The key is never in an
environment (the agent may read /proc/<pid>/environ of same-user processes under --no-sandbox).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from a2rl.constants import ENV_RUN_KEY_SOURCE
from a2rl.errors import A2rlError
from a2rl.integrity import key_line
from a2rl.launch import kill_group, start_a2rl, stop_service

HEALTH_TIMEOUT_S = 60.0
HTTP_TIMEOUT_S = 5.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def http_json(url: str, timeout: float = HTTP_TIMEOUT_S) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


class RecorderProcess:
    """`a2rl recorder serve` as a child process in its own session (Ctrl-C does not reach it)."""

    def __init__(
        self, env: Mapping[str, str], port: int, log_path: Path, *, run_key: bytes | None = None
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._env = dict(env)
        self._run_key = run_key
        if run_key is not None:
            self._env[ENV_RUN_KEY_SOURCE] = "stdin"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, health_timeout: float = HEALTH_TIMEOUT_S) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            if self._run_key is None:
                self._proc = start_a2rl(["recorder", "serve"], env=self._env, stdout=log)
            else:
                # The run's key goes through a pipe: a same-user agent can read environments
                # (/proc/<pid>/environ), not another process's stdin.
                self._proc = start_a2rl(
                    ["recorder", "serve"], env=self._env, stdout=log, stdin=subprocess.PIPE
                )
                assert self._proc.stdin is not None
                try:
                    self._proc.stdin.write(key_line(self._run_key))
                    self._proc.stdin.close()
                except OSError:
                    pass  # it exited already: reported below
        end = time.monotonic() + health_timeout
        while time.monotonic() < end:
            code = self._proc.poll()
            if code is not None:
                detail = last_line(self.log_path)
                raise A2rlError(
                    f"recorder exited with code {code} before it was ready"
                    + (f": {detail}" if detail else "")
                    + f" (log: {self.log_path})"
                )
            try:
                if http_json(f"{self.url}/health", timeout=1.0).get("status") == "ok":
                    return
            except (OSError, ValueError, AttributeError):
                pass
            time.sleep(0.2)
        self.kill()
        raise A2rlError(
            f"recorder did not answer {self.url}/health within {health_timeout:.0f} s (log: {self.log_path})"
        )

    def submissions(self) -> list[dict[str, Any]] | None:
        """GET /submissions, or None when the recorder does not answer."""
        try:
            data = http_json(f"{self.url}/submissions", timeout=2.0)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, list) else None

    def stop(self, timeout: float) -> int | None:
        """SIGTERM (the recorder drains in-flight evaluations and flushes the last code revision),
        then SIGKILL after `timeout` seconds. Returns the exit code."""
        return stop_service(self._proc, timeout)

    def kill(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        # The whole session: the eval process it may be running dies with it.
        kill_group(self._proc)
