"""The agent container of a stack run in a cluster: `python -m a2rl.contracts.stack_launch PARAMS`.

The operator builds the command (`launch_argv`, PARAMS a JSON object of `LaunchParams`); the
stack image runs it with its own Python (the stack images carry a2rl). It waits (bounded) for
the gateway's `/health` — the gateway pod starts beside the workspace pod —, builds the prompt
from the workspace once the set-up has filled it (`a2rl.agent_prompt`), takes the per-run token
out of its environment, writes the stack's start-up files into HOME and runs the stack's
invocation (`a2rl.stacks.invocation`) pointed at the gateway as its child (`a2rl.contracts.pid1`):
the launcher stays the container's PID 1 and passes SIGTERM on, so the deadline probe and a
deletion stop a stack that has no SIGTERM handler of its own (as PID 1 it would ignore the signal
and hold the pod for its whole grace period), and the images stay plain.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from a2rl.agent_prompt import workspace_prompt
from a2rl.contracts.pid1 import supervise
from a2rl.stacks import UPSTREAM_KEY_ENV, home_files, invocation

MODULE = "a2rl.contracts.stack_launch"


@dataclass(frozen=True)
class LaunchParams:
    stack: str
    provider: str
    model: str
    #: The gateway Service's URL.
    gateway: str
    #: Where the image installed the stack (`<root>/<stack>-<version>`).
    install_dir: str
    mode: str
    budget_s: int
    max_submissions: int | None
    #: The variable the token arrives in (removed before the stack starts).
    token_env: str
    gateway_wait_s: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def launch_argv(params: LaunchParams) -> list[str]:
    """The container command for `params` (no secret in it: the token comes from the env)."""
    return ["python", "-m", MODULE, params.to_json()]


def wait_for_gateway(url: str, wait_s: float) -> None:
    """Until the gateway answers `/health` or `wait_s` has passed (then the stack's own calls fail
    and say so)."""
    until = time.monotonic() + wait_s
    while time.monotonic() < until:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).close()
            return
        except OSError:
            time.sleep(1)


def main(argv: list[str]) -> int:
    p = LaunchParams(**json.loads(argv[0]))
    wait_for_gateway(p.gateway, p.gateway_wait_s)
    token = os.environ.pop(p.token_env)
    workspace = Path(os.environ["WORKSPACE"])
    prompt = workspace_prompt(workspace, mode=p.mode, budget_s=p.budget_s, max_submissions=p.max_submissions)
    cmd, extra = invocation(
        p.stack,
        prompt=prompt,
        model=p.model,
        gateway_base_url=p.gateway,
        token=token,
        workspace=workspace,
        provider=p.provider,
        install_dir=Path(p.install_dir),
    )
    files = home_files(
        p.stack,
        model=p.model,
        gateway_base_url=p.gateway,
        token=token,
        workspace=workspace,
        provider=p.provider,
    )
    home = Path(os.environ.get("HOME") or workspace / ".agent-home")
    for rel, content in files.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    env = {k: v for k, v in os.environ.items() if k not in UPSTREAM_KEY_ENV}
    env.update(extra)
    sys.stdout.flush()
    try:
        return supervise(cmd, env)
    except OSError as exc:
        print(f"a2rl: cannot start the {p.stack} stack ({cmd[0]}): {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
