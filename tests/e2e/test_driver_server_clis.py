"""The real agent stacks, at their pinned versions, against the scripted driver server.

Each stack is installed (once, cached in `<cache>/agents/<stack>-<version>`, by the runner's own
installer) and run headless in a scratch workspace against `tests/support/driver_server.py`
playing the default script: write `code/train.py`, run it, submit `output/v1` with curl to a
stand-in grading API, stop. Each test checks that the three commands ran (the files exist,
`/submit` was hit once), that the stack finished on the final text, which protocol it spoke, that
the key reached the server in the stack's header, and that the usage the stack itself reports
equals the usage the server sent. The invocations are the ones documented in docs/agents.md,
"Driving the stacks offline (test fixture)".

A stack whose install fails for lack of network is skipped with the installer's reason; any other
failure fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from a2rl.stacks import stack_def
from tests.support.driver_server import (
    SUBMIT_COMMAND,
    DriverServer,
    Script,
    Step,
    SubmitStub,
    Usage,
    default_script,
    write_file_command,
)

pytestmark = pytest.mark.slow

KEY = "sk-a2rl-driver-test-key"
PROMPT = "Train the model on the data, then submit output/v1 to the grading server."
TRAIN_PY = (
    "from pathlib import Path\n\n"
    'out = Path("output/v1")\n'
    "out.mkdir(parents=True, exist_ok=True)\n"
    '(out / "x").write_text("trained\\n")\n'
    'print("trained")\n'
)
RUN_TIMEOUT_S = 300

# OpenHands has no CLI: this runner (run with the stack's own Python) starts the SDK agent with
# the terminal and file-editor tools, prints each event as a JSON line and, last, the usage the
# SDK metered.
OPENHANDS_RUNNER = r"""
import json, os, sys
from pydantic import SecretStr
from openhands.sdk import LLM, Agent, Conversation, Tool
from openhands.tools.file_editor import FileEditorTool
from openhands.tools.terminal import TerminalTool

def emit(event):
    try:
        sys.stdout.write(event.model_dump_json() + "\n")
    except Exception:
        sys.stdout.write(json.dumps({"kind": type(event).__name__}) + "\n")
    sys.stdout.flush()

llm = LLM(
    usage_id="agent",
    model=os.environ["DRIVER_MODEL"],
    base_url=os.environ["DRIVER_BASE_URL"],
    api_key=SecretStr(os.environ["DRIVER_API_KEY"]),
    num_retries=0,
)
agent = Agent(llm=llm, tools=[Tool(name=TerminalTool.name), Tool(name=FileEditorTool.name)])
conversation = Conversation(
    agent=agent, workspace=os.getcwd(), callbacks=[emit], visualizer=None, max_iteration_per_run=30
)
conversation.send_message(sys.argv[1])
conversation.run()
usage = conversation.conversation_stats.get_combined_metrics().accumulated_token_usage
print("A2RL_USAGE " + (usage.model_dump_json() if usage else "{}"), flush=True)
"""


@dataclass
class Invocation:
    """How one stack is started against the driver, and what it is expected to speak."""

    argv: list[str]
    env: dict[str, str]
    protocol: str  # the driver server's name of the protocol
    stream: bool
    key_header: str  # where the key shows up
    files: dict[str, str] = field(default_factory=dict)  # written under $HOME first
    usage: Callable[[str], Usage] = lambda stdout: Usage()  # the usage the stack reports


def _jsonl(stdout: str) -> Iterator[dict[str, Any]]:
    for raw in stdout.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except ValueError:
                continue


def _claude_usage(stdout: str) -> Usage:
    result = [e for e in _jsonl(stdout) if e.get("type") == "result"][-1]
    u = result["usage"]
    cached = int(u.get("cache_read_input_tokens", 0))
    return Usage(int(u["input_tokens"]) + cached, int(u["output_tokens"]), cached)


def _codex_usage(stdout: str) -> Usage:
    total = Usage()
    for e in _jsonl(stdout):
        if e.get("type") == "turn.completed":
            u = e["usage"]
            total = total + Usage(u["input_tokens"], u["output_tokens"], u.get("cached_input_tokens", 0))
    return total


def _gemini_usage(stdout: str) -> Usage:
    stats = [e for e in _jsonl(stdout) if e.get("type") == "result"][-1]["stats"]
    return Usage(stats["input_tokens"], stats["output_tokens"], stats.get("cached", 0))


def _opencode_usage(stdout: str) -> Usage:
    total = Usage()
    for e in _jsonl(stdout):
        if e.get("type") == "step_finish":
            t = e["part"]["tokens"]
            read = int(t.get("cache", {}).get("read", 0))
            total = total + Usage(int(t["input"]) + read, int(t["output"]), read)
    return total


def _openhands_usage(stdout: str) -> Usage:
    line = [x for x in stdout.splitlines() if x.startswith("A2RL_USAGE ")][-1]
    u = json.loads(line.split(" ", 1)[1])
    return Usage(u["prompt_tokens"], u["completion_tokens"], u.get("cache_read_tokens", 0))


def invocation(stack: str, entry: Path, url: str, provider: str | None = None) -> Invocation:
    """The exact argv and environment of each stack (docs/agents.md, "Driving the stacks offline")."""
    if stack == "claude-code":
        return Invocation(
            argv=[
                str(entry),
                *("-p", PROMPT, "--output-format", "stream-json", "--verbose"),
                *("--dangerously-skip-permissions", "--model", "claude-sonnet-4-5"),
            ],
            env={
                "ANTHROPIC_BASE_URL": url,
                "ANTHROPIC_API_KEY": KEY,
                "IS_SANDBOX": "1",  # as root, --dangerously-skip-permissions needs it
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
            protocol="anthropic",
            stream=True,
            key_header="x-api-key",
            usage=_claude_usage,
        )
    if stack == "codex":
        provider = f'{{name="driver", base_url="{url}/v1", env_key="DRIVER_API_KEY", wire_api="responses"}}'
        return Invocation(
            argv=[
                str(entry),
                *("exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"),
                *("-c", f"model_providers.driver={provider}", "-c", "model_provider=driver"),
                *("-m", "gpt-5-codex", PROMPT),
            ],
            env={"DRIVER_API_KEY": KEY},
            protocol="openai-responses",
            stream=True,
            key_header="authorization",
            usage=_codex_usage,
        )
    if stack == "gemini-cli":
        settings = {
            # 0.61.0 takes GOOGLE_GEMINI_BASE_URL alone as auth type "gateway", which headless
            # mode rejects ("Invalid auth method selected."): the API-key type, named here,
            # still honours the base URL.
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            # The shell tool kills a command silent for 300 s by default: training can be.
            "tools": {"shell": {"inactivityTimeout": 1800}},
        }
        return Invocation(
            argv=[
                str(entry),
                "-p",
                PROMPT,
                "--yolo",
                "--output-format",
                "stream-json",
                "-m",
                "gemini-2.5-pro",
            ],
            env={
                "GOOGLE_GEMINI_BASE_URL": url,
                "GEMINI_API_KEY": KEY,
                "GEMINI_CLI_TRUST_WORKSPACE": "true",
                "GEMINI_CLI_NO_RELAUNCH": "true",
            },
            protocol="gemini",
            stream=True,
            key_header="x-goog-api-key",
            files={".gemini/settings.json": json.dumps(settings)},
            usage=_gemini_usage,
        )
    if stack == "opencode":
        # provider: (AI SDK package, base path, model, protocol, key header)
        npm, base, model, protocol, header = {
            "openai-compatible": (
                "@ai-sdk/openai-compatible",
                "/v1",
                "scripted",
                "openai-chat",
                "authorization",
            ),
            "anthropic": ("@ai-sdk/anthropic", "/v1", "claude-sonnet-4-5", "anthropic", "x-api-key"),
            "openai": ("@ai-sdk/openai", "/v1", "gpt-5", "openai-responses", "authorization"),
            "gemini": ("@ai-sdk/google", "/v1beta", "gemini-2.5-pro", "gemini", "x-goog-api-key"),
        }[provider or "openai-compatible"]
        config = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
            "model": f"driver/{model}",
            "small_model": f"driver/{model}",
            "provider": {
                "driver": {
                    "npm": npm,  # bundled in the binary: nothing is fetched
                    "name": "driver",
                    "options": {"baseURL": url + base, "apiKey": "{env:DRIVER_API_KEY}"},
                    "models": {model: {"name": model, "tool_call": True}},
                }
            },
        }
        return Invocation(
            argv=[str(entry), "run", "--format", "json", "--model", f"driver/{model}", PROMPT],
            env={
                "OPENCODE_CONFIG_CONTENT": json.dumps(config),
                "DRIVER_API_KEY": KEY,
                "OPENCODE_DISABLE_MODELS_FETCH": "1",  # else: an ERROR line (models.dev unreachable)
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
            },
            protocol=protocol,
            stream=True,
            key_header=header,
            usage=_opencode_usage,
        )
    if stack == "openhands":
        # provider: (litellm model, base path, protocol, key header); litellm picks the
        # Responses API for gpt-5 and posts Gemini calls to <base>/models/<m>:generateContent.
        model, base, protocol, header = {
            "openai-compatible": ("openai/scripted", "/v1", "openai-chat", "authorization"),
            "anthropic": ("anthropic/claude-sonnet-4-5", "", "anthropic", "x-api-key"),
            "openai": ("openai/gpt-5", "/v1", "openai-responses", "authorization"),
            "gemini": ("gemini/gemini-2.5-pro", "", "gemini", "x-goog-api-key"),
        }[provider or "openai-compatible"]
        return Invocation(
            argv=[str(entry), "-c", OPENHANDS_RUNNER, PROMPT],
            env={
                "DRIVER_MODEL": model,
                "DRIVER_BASE_URL": url + base,
                "DRIVER_API_KEY": KEY,
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else: 3 tries to fetch litellm's prices
                "OPENHANDS_SUPPRESS_BANNER": "1",
                "PYTHONUNBUFFERED": "1",
            },
            protocol=protocol,
            stream=False,
            key_header=header,
            usage=_openhands_usage,
        )
    raise AssertionError(stack)


def _install(stack: str) -> Any:
    """The stack, installed by the runner's installer (cached); skipped only when offline."""
    from a2rl_runner.stacks.install import StackInstallError, ensure_stack

    try:
        return ensure_stack(stack)
    except StackInstallError as exc:
        if "registry is unreachable" in str(exc):
            pytest.skip(f"{stack} {stack_def(stack).default_version} cannot be installed: {exc}")
        raise


@dataclass
class Outcome:
    rc: int
    wall_s: float
    stdout: str
    stderr: str
    workspace: Path
    server: DriverServer
    submissions: list[dict[str, Any]]

    def explain(self) -> str:
        return (
            f"rc={self.rc} wall={self.wall_s:.1f}s\nrequests: {self.server.paths()}\n"
            f"stderr (tail): {self.stderr[-3000:]}\nstdout (tail): {self.stdout[-3000:]}"
        )


def run_stack(
    stack: str, tmp_path: Path, script: Script, provider: str | None = None, **server_options: Any
) -> tuple[Outcome, Invocation]:
    installed = _install(stack)
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    log = tmp_path / "requests.jsonl"
    with DriverServer(script, log_path=log, **server_options) as server, SubmitStub() as stub:
        inv = invocation(stack, Path(installed.entry), server.url, provider)
        for rel, content in inv.files.items():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(content)
        path = os.pathsep.join(
            [*(str(p) for p in installed.path_dirs), os.environ.get("PATH", "/usr/bin:/bin")]
        )
        # Nothing of the caller's environment but PATH: no real provider key can leak in.
        # PWD too: OpenCode works in $PWD when it is set, whatever the process's cwd.
        env = {"PATH": path, "HOME": str(home), "PWD": str(workspace), "LANG": "C.UTF-8"}
        env |= {"GRADING_SERVER_URL": stub.url, **inv.env}
        start = time.monotonic()
        try:
            proc = subprocess.run(
                inv.argv,
                cwd=workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{stack} did not finish in {RUN_TIMEOUT_S} s; requests: {server.paths()}; {exc}")
        wall = time.monotonic() - start
        outcome = Outcome(
            proc.returncode, wall, proc.stdout, proc.stderr, workspace, server, list(stub.submissions)
        )
    (tmp_path / "stdout.txt").write_text(proc.stdout)
    (tmp_path / "stderr.txt").write_text(proc.stderr)
    return outcome, inv


STACKS = ("claude-code", "codex", "gemini-cli", "opencode", "openhands")


def check_default_script(label: str, out: Outcome, inv: Invocation) -> None:
    why = out.explain()
    assert out.rc == 0, why
    # The three commands ran: the file was written, the training ran, /submit was hit once.
    assert (out.workspace / "code" / "train.py").read_text() == TRAIN_PY, why
    assert (out.workspace / "output" / "v1" / "x").read_text() == "trained\n", why
    assert out.submissions == [{"path": "/submit", "body": {"model_path": "output/v1"}}], why
    server = out.server
    # Each step played once, then the final text: the stack stopped by itself.
    assert server.steps_played() == [0, 1, 2] and server.finished(), why
    agent_calls = [r for r in server.model_calls() if r.kind in ("step", "final")]
    assert {(r.protocol, r.stream) for r in agent_calls} == {(inv.protocol, inv.stream)}, why
    results = agent_calls[-1].tool_results
    assert "trained" in results[1] and "accepted" in results[2], results
    # The key reached the server in the stack's header.
    seen = server.header_values(inv.key_header)
    assert seen and all(KEY in v for v in seen), seen
    # The usage adds up: the log's total is the sum of what was sent, and what the stack itself
    # reports for its agent calls is what the server sent for them.
    assert server.usage_total() == sum((r.usage for r in server.model_calls() if r.usage), Usage())
    sent = sum((r.usage for r in agent_calls if r.usage), Usage())
    assert sent == Usage(4 * 1200, 4 * 40, 4 * 200)
    assert inv.usage(out.stdout) == sent, why
    print(
        f"\n[driver-e2e] {label}: wall {out.wall_s:.1f} s; "
        f"{len(server.records)} requests: {sorted(set(server.paths()))}; side calls: "
        f"{sum(1 for r in server.model_calls() if r.kind == 'side')}"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_stack_plays_the_default_script(stack: str, tmp_path: Path) -> None:
    out, inv = run_stack(stack, tmp_path, default_script(TRAIN_PY))
    check_default_script(f"{stack} {stack_def(stack).default_version}", out, inv)


@pytest.mark.parametrize(
    ("stack", "provider"),
    [(s, p) for s in ("opencode", "openhands") for p in ("anthropic", "openai", "gemini")],
)
def test_multi_provider_stack_on_each_protocol(stack: str, provider: str, tmp_path: Path) -> None:
    """OpenCode and OpenHands can be driven through every provider: each protocol, end to end."""
    out, inv = run_stack(stack, tmp_path, default_script(TRAIN_PY), provider)
    check_default_script(f"{stack} ({provider})", out, inv)


def test_codex_waits_for_a_step_longer_than_its_yield_time(tmp_path: Path) -> None:
    """Codex's `exec_command` returns after its `yield_time_ms` (at most 30 s) with the command
    still running; the server polls it with `write_stdin` until it exits before playing the next
    step. The step asks for 2 s, so a 12 s command outlives it (as a training outlives 30 s)."""
    script = Script(
        steps=[
            Step(write_file_command("slow.sh", "sleep 12\necho slept > slept.txt\n")),
            Step("bash slow.sh", timeout_s=2),
            Step(SUBMIT_COMMAND),
        ]
    )
    out, _ = run_stack("codex", tmp_path, script)
    why = out.explain()
    assert out.rc == 0, why
    assert (out.workspace / "slept.txt").read_text() == "slept\n", why
    kinds = [r.kind for r in out.server.model_calls()]
    assert kinds.count("poll") >= 1 and kinds[-1] == "final", kinds
    assert len(out.submissions) == 1, why


# The status a driver error must have for each stack to stop at once (one failed call, no retry)
# and show the error's message in its own output: measured, see docs/agents.md. Claude Code
# retries a 400 five times with fewer betas, and 409/429/5xx with backoff; Codex reconnects five
# times on any 4xx but 400 and replaces a 429 `insufficient_quota` message with its own; the
# others back off on 429 for minutes.
BUDGET_STATUS = {"claude-code": 402, "codex": 400, "gemini-cli": 400, "opencode": 400, "openhands": 400}
BUDGET_MESSAGE = "a2rl: DriverBudgetExhausted: the driver token budget of this run is spent"


@pytest.mark.parametrize("stack", STACKS)
def test_stack_stops_on_a_driver_budget_error(stack: str, tmp_path: Path) -> None:
    """Past the budget every call gets the provider's error: the stack stops after that one call
    and its own output (its event stream or stderr) carries the message."""
    out, _ = run_stack(
        stack,
        tmp_path,
        default_script(TRAIN_PY),
        fail_after=1,
        fail_status=BUDGET_STATUS[stack],
        fail_message=BUDGET_MESSAGE,
    )
    why = out.explain()
    assert out.rc != 0, why
    assert len(out.server.errors_sent()) == 1, why
    assert BUDGET_MESSAGE in out.stdout + out.stderr, why
    assert out.submissions == [], why
    print(f"\n[driver-e2e] {stack}: budget error {BUDGET_STATUS[stack]} -> rc {out.rc} in {out.wall_s:.1f} s")
