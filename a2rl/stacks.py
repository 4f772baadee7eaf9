"""The LLM agent stacks a BenchRun can name in `spec.agent.stack` (docs/agents.md, "Agent stacks").

Pure data and pure functions: what each stack is (the tested versions, how it is installed, its
entry binary, its cluster image, the driver protocols it speaks) and how it is started
non-interactively against the run's driver gateway (`invocation`). Installing a stack is I/O and
lives in the runner (`a2rl_runner.stacks.install`).

Every invocation detail of a stack is in its one `StackDef` below (`argv`, `env`), so that what a
real CLI turns out to need is corrected in one place. The agent never gets the upstream key: the
builders take only the per-run gateway token, and no builder reads the environment.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, get_args

from a2rl.constants import MAX_WALL_TIME_S

StackName = Literal["claude-code", "codex", "gemini-cli", "opencode", "openhands"]
AgentMode = Literal["free", "sft-only", "rl-only"]
Provider = Literal["anthropic", "openai", "gemini", "openai-compatible"]
#: What a client sends on the wire (the gateway speaks each of them).
Protocol = Literal["anthropic-messages", "openai-chat", "openai-responses", "gemini-generate-content"]

STACK_NAMES: Final[tuple[str, ...]] = get_args(StackName)
AGENT_MODES: Final[tuple[str, ...]] = get_args(AgentMode)
PROVIDERS: Final[tuple[str, ...]] = get_args(Provider)

#: The variable holding each provider's API key in the user's environment (`spec.driver.apiKeyEnv`
#: defaults to it locally). These are what the runner strips from the agent's environment.
PROVIDER_KEY_ENV: Final[dict[str, str]] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "openai-compatible": "OPENAI_API_KEY",
}
#: Every variable through which a CLI could pick up a real provider key: removed from the agent's
#: environment before the stack's own variables (holding the per-run token) are added.
UPSTREAM_KEY_ENV: Final[tuple[str, ...]] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "OPENROUTER_API_KEY",
    "LLM_API_KEY",
)

#: Image registry of the per-stack agent images (`images/agent-<stack>/Dockerfile`).
IMAGE_REGISTRY: Final = "ghcr.io/a2rl"

#: Oldest Node.js major version the npm stacks run on (gemini-cli asks for 20).
NODE_MIN_MAJOR: Final = 20

#: Longest prompt passed on a command line (Linux caps one argv element at 128 KiB).
MAX_PROMPT_CHARS: Final = 100_000


@dataclass(frozen=True)
class Call:
    """What an invocation builder gets: the run's prompt, the driver model and the gateway."""

    prompt: str
    model: str
    provider: str
    #: Root URL of the run's gateway (`http://127.0.0.1:<port>`, no path): it serves each
    #: protocol at the upstream's own paths (`/v1/messages`, `/v1/chat/completions`,
    #: `/v1/responses`, `/v1beta/models/<model>:generateContent`).
    gateway: str
    token: str
    workspace: Path
    entry: str


Argv = Callable[[Call], list[str]]
Env = Callable[[Call], dict[str, str]]
#: Files the stack reads at start, relative to the agent's HOME (the runner writes them there).
Files = Callable[[Call], dict[str, str]]


def _no_files(call: Call) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class StackDef:
    """One stack: everything a2rl needs to install, start and package it."""

    name: str
    #: Versions a2rl tests (the first is the default of `spec.agent.stackVersion`).
    versions: tuple[str, ...]
    install: Literal["npm", "pypi"]
    #: npm: the package installed at the version; pypi: the distributions installed at the version.
    packages: tuple[str, ...]
    #: The program started, relative to the install directory.
    entry: str
    #: Driver providers the stack can be pointed at, and the protocol it then speaks.
    protocols: dict[str, str]
    argv: Argv
    env: Env
    #: The format of what the stack writes on stdout (the run's trajectory).
    events: str
    #: npm stacks whose entry is a JavaScript file need `node` inside the sandbox.
    needs_node: bool = False
    #: pypi stacks: the oldest Python the distributions support.
    python_min: tuple[int, int] | None = None
    #: Arguments of `entry` that print the version (the installer checks the install with them).
    check: tuple[str, ...] = ("--version",)
    files: Files = _no_files

    @property
    def default_version(self) -> str:
        return self.versions[0]

    @property
    def providers(self) -> tuple[str, ...]:
        return tuple(self.protocols)

    def image(self, version: str | None = None) -> str:
        """The cluster image of this stack at `version` (built from `images/agent-<stack>/`)."""
        return f"{IMAGE_REGISTRY}/agent-{self.name}:{version or self.default_version}"


# --- the invocation tables, one per stack ---------------------------------------------------------


def _toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for what we write


_QUIET_CLAUDE = {
    # The run's sandbox is what contains the agent; the CLI refuses to skip permissions as root
    # unless told so.
    "IS_SANDBOX": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}

CLAUDE_CODE = StackDef(
    name="claude-code",
    versions=("2.1.331",),
    install="npm",
    packages=("@anthropic-ai/claude-code",),
    entry="node_modules/.bin/claude",  # a native binary (optional dependency per platform)
    protocols={"anthropic": "anthropic-messages"},
    argv=lambda c: [
        c.entry,
        "-p",
        c.prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--model",
        c.model,
    ],
    env=lambda c: {
        "ANTHROPIC_BASE_URL": c.gateway,
        "ANTHROPIC_API_KEY": c.token,
        # Every call (the background "small fast" ones too) goes to the driver model.
        "ANTHROPIC_MODEL": c.model,
        "ANTHROPIC_SMALL_FAST_MODEL": c.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": c.model,
        **_QUIET_CLAUDE,
    },
    events="stream-json",
)

CODEX = StackDef(
    name="codex",
    versions=("0.169.0",),
    install="npm",
    packages=("@openai/codex",),
    entry="node_modules/.bin/codex",  # a node launcher of the native binary (optional dependency)
    protocols={"openai": "openai-responses", "openai-compatible": "openai-responses"},
    argv=lambda c: [
        c.entry,
        "exec",
        "--json",
        "--skip-git-repo-check",
        # a2rl's sandbox contains the agent; Codex's own (Landlock) would nest inside it.
        "--dangerously-bypass-approvals-and-sandbox",
        "--cd",
        str(c.workspace),
        "-c",
        "model_providers.a2rl={name="
        + _toml("a2rl")
        + ", base_url="
        + _toml(c.gateway.rstrip("/") + "/v1")
        + ", env_key="
        + _toml("OPENAI_API_KEY")
        + ', wire_api="responses"}',
        "-c",
        "model_provider=a2rl",
        "-m",
        c.model,
        c.prompt,
    ],
    env=lambda c: {"OPENAI_API_KEY": c.token, "CODEX_API_KEY": c.token},
    events="jsonl",
    needs_node=True,
)

# Gemini CLI 0.61.0 derives the auth type "gateway" from GOOGLE_GEMINI_BASE_URL and then refuses
# it in headless mode ("Invalid auth method selected."): the settings select the API-key auth, which
# still sends every request to GOOGLE_GEMINI_BASE_URL (checked against a loopback server).
#: Seconds Gemini CLI's shell tool waits for a silent command: as long as any run may last.
GEMINI_SHELL_INACTIVITY_S = MAX_WALL_TIME_S
GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    # Its shell tool kills a command that prints nothing for 300 s (the default), which a training
    # run (`python train.py > train.log`) easily does; the other stacks keep such a command running
    # (in the background, or polled). The run's deadline ends it, not the tool.
    "tools": {"shell": {"inactivityTimeout": GEMINI_SHELL_INACTIVITY_S}},
}

GEMINI_CLI = StackDef(
    name="gemini-cli",
    versions=("0.61.0",),
    install="npm",
    packages=("@google/gemini-cli",),
    entry="node_modules/.bin/gemini",  # a JavaScript bundle run by node
    protocols={"gemini": "gemini-generate-content"},
    argv=lambda c: [
        c.entry,
        "-p",
        c.prompt,
        "--yolo",
        "--output-format",
        "stream-json",
        "--model",
        c.model,
    ],
    env=lambda c: {
        "GOOGLE_GEMINI_BASE_URL": c.gateway,
        "GEMINI_API_KEY": c.token,
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # headless runs refuse an untrusted folder
        "GEMINI_TELEMETRY_ENABLED": "false",
    },
    events="stream-json",
    needs_node=True,
    files=lambda c: {".gemini/settings.json": json.dumps(GEMINI_SETTINGS, indent=2) + "\n"},
)

# OpenCode reads its provider from a generated config (OPENCODE_CONFIG_CONTENT): the AI SDK
# package of the provider's protocol, pointed at the gateway.
_OPENCODE_SDK = {
    "anthropic": ("@ai-sdk/anthropic", "/v1"),
    "openai": ("@ai-sdk/openai", "/v1"),
    "gemini": ("@ai-sdk/google", "/v1beta"),
    "openai-compatible": ("@ai-sdk/openai-compatible", "/v1"),
}


def opencode_config(call: Call) -> dict[str, object]:
    """The OpenCode config of a run: one provider `a2rl` (the gateway), every tool allowed."""
    npm, path = _OPENCODE_SDK[call.provider]
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"a2rl/{call.model}",
        "small_model": f"a2rl/{call.model}",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "provider": {
            "a2rl": {
                "npm": npm,
                "name": "a2rl gateway",
                "options": {"baseURL": call.gateway.rstrip("/") + path, "apiKey": call.token},
                "models": {call.model: {"name": call.model}},
            }
        },
    }


OPENCODE = StackDef(
    name="opencode",
    versions=("1.18.33",),
    install="npm",
    packages=("opencode-ai",),
    entry="node_modules/.bin/opencode",  # a native binary (optional dependency per platform)
    protocols={
        "anthropic": "anthropic-messages",
        "openai": "openai-responses",
        "gemini": "gemini-generate-content",
        "openai-compatible": "openai-chat",
    },
    # --dir: OpenCode runs its tools in $PWD (the caller's, not the process's cwd) unless told.
    argv=lambda c: [
        c.entry,
        "run",
        "--format",
        "json",
        "--auto",
        "--dir",
        str(c.workspace),
        "--model",
        f"a2rl/{c.model}",
        c.prompt,
    ],
    env=lambda c: {
        "OPENCODE_CONFIG_CONTENT": json.dumps(opencode_config(c)),
        "OPENCODE_DISABLE_AUTOUPDATE": "true",
        "OPENCODE_DISABLE_MODELS_FETCH": "true",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
        "OPENCODE_DISABLE_SHARE": "true",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
        "OPENCODE_DISABLE_CLAUDE_CODE": "true",
        "OPENCODE_DISABLE_PROJECT_CONFIG": "true",
    },
    events="jsonl",
)

# OpenHands has no CLI of the SDK: a small runner of ours (passed with `python -c`, so nothing
# of a2rl needs to be visible in the sandbox) starts an agent with the terminal, file-editor and
# task-tracker tools in the workspace and prints every event as one JSON line.
OPENHANDS_RUNNER: Final = r"""
import json, os, sys
from pydantic import SecretStr
from openhands.sdk import LLM, Agent, Conversation, Tool
from openhands.tools.file_editor import FileEditorTool
from openhands.tools.task_tracker import TaskTrackerTool
from openhands.tools.terminal import TerminalTool

def emit(event):
    try:
        line = event.model_dump_json()
    except Exception:
        line = json.dumps({"kind": type(event).__name__, "repr": repr(event)[:2000]})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

llm = LLM(
    usage_id="agent",
    model=os.environ["OPENHANDS_LLM_MODEL"],
    base_url=os.environ["OPENHANDS_LLM_BASE_URL"],
    api_key=SecretStr(os.environ["OPENHANDS_LLM_API_KEY"]),
)
agent = Agent(
    llm=llm,
    tools=[Tool(name=TerminalTool.name), Tool(name=FileEditorTool.name), Tool(name=TaskTrackerTool.name)],
)
conversation = Conversation(agent=agent, workspace=sys.argv[2], callbacks=[emit], visualizer=None)
conversation.send_message(sys.argv[1])
conversation.run()
"""

# litellm's model prefix and the gateway path of each provider.
_LITELLM = {
    "anthropic": ("anthropic", ""),
    "openai": ("openai", "/v1"),
    "gemini": ("gemini", "/v1beta"),  # litellm appends /models/<m>:generateContent
    "openai-compatible": ("openai", "/v1"),
}

OPENHANDS = StackDef(
    name="openhands",
    versions=("1.58.2",),
    install="pypi",
    packages=("openhands-sdk", "openhands-tools"),
    entry="bin/python",  # the install directory is a virtualenv
    protocols={
        "anthropic": "anthropic-messages",
        "openai": "openai-chat",
        "gemini": "gemini-generate-content",
        "openai-compatible": "openai-chat",
    },
    argv=lambda c: [c.entry, "-c", OPENHANDS_RUNNER, c.prompt, str(c.workspace)],
    env=lambda c: {
        "OPENHANDS_LLM_MODEL": f"{_LITELLM[c.provider][0]}/{c.model}",
        "OPENHANDS_LLM_BASE_URL": c.gateway.rstrip("/") + _LITELLM[c.provider][1],
        "OPENHANDS_LLM_API_KEY": c.token,
        "OPENHANDS_SUPPRESS_BANNER": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of litellm's price list at start
        "PYTHONUNBUFFERED": "1",
    },
    events="jsonl",
    python_min=(3, 12),
    check=(
        "-c",
        "from importlib.metadata import version; import openhands.sdk, openhands.tools; "
        "print(version('openhands-sdk'))",
    ),
)

STACKS: Final[dict[str, StackDef]] = {
    s.name: s for s in (CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE, OPENHANDS)
}
assert tuple(STACKS) == STACK_NAMES


def stack_def(stack: str) -> StackDef:
    """The definition of `stack` (ValueError naming the stacks for an unknown one)."""
    try:
        return STACKS[stack]
    except KeyError:
        raise ValueError(f"unknown agent stack {stack!r} (known: {', '.join(STACK_NAMES)})") from None


def resolve_version(stack: str, version: str | None) -> str:
    """`version`, or the stack's default; ValueError naming the tested versions otherwise."""
    sdef = stack_def(stack)
    if version is None:
        return sdef.default_version
    problem = version_problem(stack, version)
    if problem:
        raise ValueError(problem)
    return version


def version_problem(stack: str, version: str) -> str | None:
    """Why `version` is not one a2rl tests for `stack` (None: it is)."""
    sdef = STACKS.get(stack)
    if sdef is None or version in sdef.versions:
        return None
    return f"{stack} {version} is not a tested version (tested: {', '.join(sdef.versions)})"


def provider_problem(stack: str, provider: str) -> str | None:
    """Why `stack` cannot be driven through `provider` (None: it can)."""
    sdef = STACKS.get(stack)
    if sdef is None or provider in sdef.protocols:
        return None
    return f"{stack} cannot use provider {provider} (it can use: {', '.join(sdef.providers)})"


def default_api_key_env(provider: str) -> str:
    """The variable holding `provider`'s key in a user's environment (`spec.driver.apiKeyEnv`)."""
    return PROVIDER_KEY_ENV[provider]


def _call(
    stack: str,
    *,
    prompt: str,
    model: str,
    gateway_base_url: str,
    token: str,
    workspace: Path,
    provider: str | None,
    install_dir: Path | None,
) -> tuple[StackDef, Call]:
    sdef = stack_def(stack)
    provider = provider or sdef.providers[0]
    problem = provider_problem(stack, provider)
    if problem:
        raise ValueError(problem)
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt has {len(prompt)} characters; at most {MAX_PROMPT_CHARS} fit an argv")
    entry = str(install_dir / sdef.entry) if install_dir is not None else sdef.entry
    call = Call(
        prompt=prompt,
        model=model,
        provider=provider,
        gateway=gateway_base_url.rstrip("/"),
        token=token,
        workspace=workspace,
        entry=entry,
    )
    return sdef, call


def invocation(
    stack: str,
    *,
    prompt: str,
    model: str,
    gateway_base_url: str,
    token: str,
    workspace: Path,
    provider: str | None = None,
    install_dir: Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and the environment additions that start `stack` non-interactively on `prompt`,
    driven by `model` through the run's gateway at `gateway_base_url` with the per-run `token`.

    `provider` is `spec.driver.provider` (default: the stack's first). argv[0] is the entry under
    `install_dir` (or relative to the install directory when None). The environment additions
    hold the token only; the caller removes `UPSTREAM_KEY_ENV` from the agent's environment
    before adding them, and writes `home_files(...)` into the agent's HOME."""
    sdef, call = _call(
        stack,
        prompt=prompt,
        model=model,
        gateway_base_url=gateway_base_url,
        token=token,
        workspace=workspace,
        provider=provider,
        install_dir=install_dir,
    )
    return sdef.argv(call), sdef.env(call)


def home_files(
    stack: str,
    *,
    model: str,
    gateway_base_url: str,
    token: str,
    workspace: Path,
    provider: str | None = None,
) -> dict[str, str]:
    """Files `stack` must find in the agent's HOME (path relative to HOME → content), for the
    same run as `invocation`; the runner writes them into the per-run HOME before the start."""
    sdef, call = _call(
        stack,
        prompt="",
        model=model,
        gateway_base_url=gateway_base_url,
        token=token,
        workspace=workspace,
        provider=provider,
        install_dir=None,
    )
    return sdef.files(call)


def stack_env_names(stack: str) -> frozenset[str]:
    """Every variable a2rl sets for `stack` (with any provider it can use), plus the provider key
    variables: `spec.agent.env` of a stack run may set none of them."""
    sdef = stack_def(stack)
    names: set[str] = set(UPSTREAM_KEY_ENV)
    for provider in sdef.providers:
        call = Call("", "m", provider, "http://127.0.0.1", "t", Path("/"), sdef.entry)
        names.update(sdef.env(call))
    return frozenset(names)
