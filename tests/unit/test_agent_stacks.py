"""The agent stacks: their definitions, the one prompt built from a workspace, the invocation
builders (the upstream key never reaches an agent: only the per-run token does)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from a2rl_tasks import get_task

from a2rl.agent_prompt import MODE_TEXT, PromptInputs, render_prompt, workspace_prompt
from a2rl.constants import MAX_WALL_TIME_S
from a2rl.stacks import (
    AGENT_MODES,
    MAX_PROMPT_CHARS,
    PROVIDER_KEY_ENV,
    STACK_NAMES,
    STACKS,
    UPSTREAM_KEY_ENV,
    invocation,
    opencode_config,
    resolve_version,
    stack_def,
    version_problem,
)
from a2rl.workspace import WorkspaceRules, build_workspace

UPSTREAM_KEY = "sk-UPSTREAM-MARKER-0123456789"
TOKEN = "a2rl-run-token-abcdef"
GATEWAY = "http://127.0.0.1:41234"


def _arith_workspace(
    tmp_path: Path, budget_s: int = 900, max_submissions: int | None = 5
) -> tuple[Path, Path]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    train, heldout = tmp_path / "staged" / "train", tmp_path / "staged" / "heldout"
    train.mkdir(parents=True)
    heldout.mkdir(parents=True)
    rows = [
        {"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(20)
    ]
    (train / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (heldout / "heldout.jsonl").write_text('{"question": "HELDOUT-SECRET-QUESTION", "answer": "#### 4242"}\n')
    rules = WorkspaceRules(  # a2rl's own instructions.md (the reference's is verbatim RD-Agent text)
        task="arith", base_model="tiny", budget_s=budget_s, grace_s=15, max_submissions=max_submissions,
        protocol="a2rl",
    )  # fmt: skip
    root = tmp_path / "ws"
    build_workspace(
        root,
        rules,
        description=get_task("arith").description(),
        model_dir=model,
        train_dir=train,
        heldout_dir=heldout,
    )
    return root, heldout


# --- the prompt ---------------------------------------------------------------------------------


def test_prompt_is_built_from_the_workspace(tmp_path: Path) -> None:
    root, heldout = _arith_workspace(tmp_path)
    prompt = workspace_prompt(root, max_submissions=5)
    # The budget, from run_meta.json, and how to read the clock.
    assert "900 seconds (15 min)" in prompt and "at most 5 submissions" in prompt
    assert "$GRADING_SERVER_URL/time" in prompt and "run_meta.json" in prompt
    # How to submit.
    assert "POST $GRADING_SERVER_URL/submit" in prompt and '"model_path": "output/v1"' in prompt
    # description.md and instructions.md, a listing, the head of the data.
    assert (root / "description.md").read_text().strip()[:200] in prompt
    assert "# Instructions" in prompt
    assert "data/" in prompt and "train.jsonl" in prompt and "models/" in prompt
    assert "What is 0 + 0?" in prompt and "What is 4 + 4?" in prompt
    assert "What is 5 + 5?" not in prompt  # only the head
    # Nothing of the held-out split, nor where it is.
    assert "HELDOUT-SECRET-QUESTION" not in prompt and str(heldout) not in prompt
    assert "heldout.jsonl" not in prompt and str(tmp_path / "staged") not in prompt
    assert len(prompt) < MAX_PROMPT_CHARS


def test_budget_given_wins_and_no_cap_is_said(tmp_path: Path) -> None:
    root, _ = _arith_workspace(tmp_path, max_submissions=None)
    prompt = workspace_prompt(root, budget_s=3600)
    assert "3600 seconds (1 h)" in prompt and "no cap on submissions" in prompt


@pytest.mark.parametrize("mode", AGENT_MODES)
def test_each_mode_is_a_prompt_variant(tmp_path: Path, mode: str) -> None:
    root, _ = _arith_workspace(tmp_path)
    prompt = workspace_prompt(root, mode=mode)
    assert MODE_TEXT[mode] in prompt
    assert [m for m in AGENT_MODES if MODE_TEXT[m] in prompt] == [mode]


def test_free_mode_is_route_neutral() -> None:
    text = MODE_TEXT["free"]
    assert "supervised fine-tuning" in text and "reinforcement learning" in text
    assert "only" not in text.lower() and "do not" not in text.lower()
    assert "Do not use reinforcement learning" in MODE_TEXT["sft-only"]
    assert "Do not train on the reference answers" in MODE_TEXT["rl-only"]


def test_unknown_mode_and_huge_documents() -> None:
    inputs = PromptInputs(description="d", instructions="i", listing=[], data_heads={}, budget_s=60, mode="x")
    with pytest.raises(ValueError, match="unknown agent mode 'x'"):
        render_prompt(inputs)
    huge = PromptInputs(description="x" * 500_000, instructions="i", listing=[], data_heads={}, budget_s=60)
    assert len(render_prompt(huge)) < MAX_PROMPT_CHARS


def test_links_in_the_workspace_are_not_followed(tmp_path: Path) -> None:
    root, _ = _arith_workspace(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("OUTSIDE-SECRET")
    (root / "code" / "leak.txt").symlink_to(secret)
    prompt = workspace_prompt(root)
    assert "OUTSIDE-SECRET" not in prompt and "leak.txt -> (link)" in prompt


# --- the stack definitions ------------------------------------------------------------------------


def test_every_stack_is_defined_once_with_a_tested_version() -> None:
    assert tuple(STACKS) == STACK_NAMES == ("claude-code", "codex", "gemini-cli", "opencode", "openhands")
    for name, sdef in STACKS.items():
        assert sdef.versions and resolve_version(name, None) == sdef.versions[0]
        assert sdef.image() == f"ghcr.io/a2rl/agent-{name}:{sdef.versions[0]}"
        assert sdef.install in ("npm", "pypi") and sdef.packages and sdef.entry
        assert set(sdef.providers) <= set(PROVIDER_KEY_ENV)
    assert version_problem("codex", "9.9.9") == "codex 9.9.9 is not a tested version (tested: 0.169.0)"
    with pytest.raises(ValueError, match="unknown agent stack 'kodex'"):
        stack_def("kodex")


def _call(stack: str, provider: str | None = None) -> tuple[list[str], dict[str, str]]:
    return invocation(
        stack,
        prompt="PROMPT TEXT",
        model="driver-model-1",
        gateway_base_url=GATEWAY,
        token=TOKEN,
        workspace=Path("/ws"),
        provider=provider,
        install_dir=Path("/cache/agents") / f"{stack}-{STACKS[stack].default_version}",
    )


CASES = [(s, p) for s in STACK_NAMES for p in STACKS[s].providers]


@pytest.mark.parametrize(("stack", "provider"), CASES)
def test_invocation_holds_the_token_never_an_upstream_key(
    stack: str, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in UPSTREAM_KEY_ENV:
        monkeypatch.setenv(var, UPSTREAM_KEY)  # the builders read no environment
    argv, env = _call(stack, provider)
    everything = "\n".join([*argv, *env.keys(), *env.values()])
    assert UPSTREAM_KEY not in everything
    assert TOKEN in everything and GATEWAY in everything
    assert "driver-model-1" in everything
    assert argv[0] == f"/cache/agents/{stack}-{STACKS[stack].default_version}/{STACKS[stack].entry}"
    assert "PROMPT TEXT" in argv
    assert not any(k.startswith(("A2RL_", "AWS_")) for k in env)  # the runner strips those


def test_claude_code_invocation() -> None:
    argv, env = _call("claude-code")
    assert argv[1:] == [
        "-p",
        "PROMPT TEXT",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--model",
        "driver-model-1",
    ]
    assert env["ANTHROPIC_BASE_URL"] == GATEWAY and env["ANTHROPIC_API_KEY"] == TOKEN
    assert env["IS_SANDBOX"] == "1"


def test_codex_invocation_points_its_provider_at_the_gateway() -> None:
    argv, env = _call("codex")
    assert argv[1:3] == ["exec", "--json"]
    provider = argv[argv.index("model_provider=a2rl") - 2]
    assert provider == (
        'model_providers.a2rl={name="a2rl", base_url="http://127.0.0.1:41234/v1", '
        'env_key="OPENAI_API_KEY", wire_api="responses"}'
    )
    assert argv[argv.index("-m") + 1] == "driver-model-1" and argv[-1] == "PROMPT TEXT"
    assert env["OPENAI_API_KEY"] == TOKEN
    shlex.join(argv)  # every element is a plain string


def test_gemini_and_opencode_and_openhands_invocations() -> None:
    argv, env = _call("gemini-cli")
    assert argv[1:4] == ["-p", "PROMPT TEXT", "--yolo"]
    assert env["GOOGLE_GEMINI_BASE_URL"] == GATEWAY and env["GEMINI_API_KEY"] == TOKEN
    argv, env = _call("opencode", "openai-compatible")
    assert argv[1:3] == ["run", "--format"] and "a2rl/driver-model-1" in argv
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["a2rl"]["options"] == {"baseURL": f"{GATEWAY}/v1", "apiKey": TOKEN}
    assert config["provider"]["a2rl"]["npm"] == "@ai-sdk/openai-compatible"
    argv, env = _call("openhands", "anthropic")
    assert argv[1] == "-c" and "Conversation" in argv[2] and argv[3:] == ["PROMPT TEXT", "/ws"]
    assert env["OPENHANDS_LLM_MODEL"] == "anthropic/driver-model-1"
    assert env["OPENHANDS_LLM_API_KEY"] == TOKEN


def test_a_stack_refuses_a_provider_it_cannot_speak_and_a_huge_prompt() -> None:
    with pytest.raises(ValueError, match="claude-code cannot use provider openai"):
        _call("claude-code", "openai")
    with pytest.raises(ValueError, match="fit an argv"):
        invocation(
            "codex",
            prompt="x" * (MAX_PROMPT_CHARS + 1),
            model="m",
            gateway_base_url=GATEWAY,
            token=TOKEN,
            workspace=Path("/ws"),
        )


def test_opencode_config_names_every_provider_sdk() -> None:
    from a2rl.stacks import Call

    for provider in STACKS["opencode"].providers:
        call = Call("p", "m", provider, GATEWAY, TOKEN, Path("/ws"), "opencode")
        assert opencode_config(call)["model"] == "a2rl/m"


# --- validation of stack BenchRuns (the real loader and `a2rl validate`) ----------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _stack_run(agent: dict[str, object], driver: dict[str, object] | None, **budget: object) -> str:
    doc = {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "s"},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": agent,
            "budget": {"wallTimeSeconds": 600, **budget},
            **({"driver": driver} if driver is not None else {}),
        },
    }
    return json.dumps(doc)


ANTHROPIC = {"provider": "anthropic", "model": "claude-sonnet-4-5"}


@pytest.mark.parametrize(
    ("agent", "driver", "budget", "problem"),
    [
        (
            {"stack": "claude-code", "command": ["x"]},
            ANTHROPIC,
            {},
            "spec.agent.command: set either command (your own program) or stack (claude-code), not both",
        ),
        (
            {"image": "x"},
            None,
            {},
            "spec.agent.command: set command (the program to run) or stack (one of claude-code, codex, "
            "gemini-cli, opencode, openhands)",
        ),
        (
            {"stack": "claude-code"},
            None,
            {},
            "spec.driver: required with spec.agent.stack (claude-code): the LLM that drives it",
        ),
        (
            {"stack": "claude-code", "stackVersion": "2.0.0"},
            ANTHROPIC,
            {},
            "spec.agent.stackVersion: claude-code 2.0.0 is not a tested version (tested: 2.1.331)",
        ),
        (
            {"stack": "gemini-cli"},
            ANTHROPIC,
            {},
            "spec.driver.provider: gemini-cli cannot use provider anthropic (it can use: gemini)",
        ),
        (
            {"command": ["x"], "mode": "rl-only"},
            None,
            {},
            "spec.agent.mode: mode rl-only applies to a stack only",
        ),
        ({"stack": "codex", "args": ["--x"]}, {"provider": "openai", "model": "m"}, {}, "spec.agent.args: "),
        (
            {"stack": "openhands"},
            {"provider": "openai-compatible", "model": "m"},
            {},
            "spec.driver.baseUrl: required for provider openai-compatible",
        ),
        ({"command": ["x"]}, None, {"driverTokens": 10}, "spec.budget.driverTokens: needs spec.driver"),
        (
            {
                "stack": "claude-code",
                "env": [{"name": "X", "value": "1"}, {"name": "ANTHROPIC_BASE_URL", "value": "u"}],
            },
            ANTHROPIC,
            {},
            "spec.agent.env[1].name: ANTHROPIC_BASE_URL is set by a2rl for the claude-code stack",
        ),
        (
            {"stack": "codex", "env": [{"name": "OPENAI_API_KEY", "value": "sk-real"}]},
            {"provider": "openai", "model": "m"},
            {},
            "spec.agent.env[0].name: OPENAI_API_KEY is set by a2rl for the codex stack",
        ),
        (
            {"stack": "codex"},
            {"provider": "openai", "model": "m"},
            {"driverCostUSD": 0},
            "spec.budget.driverCostUSD: must be ≥ 0.01 (got 0)",
        ),
        (
            {"stack": "codex", "mode": "sft"},
            {"provider": "openai", "model": "m"},
            {},
            "spec.agent.mode: must be one of 'free', 'sft-only' or 'rl-only' (got \"sft\")",
        ),
    ],
)
def test_stack_problems_are_one_line_from_a2rl_validate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    agent: dict[str, object],
    driver: dict[str, object] | None,
    budget: dict[str, object],
    problem: str,
) -> None:
    from a2rl_cli import main

    path = tmp_path / "run.yaml"
    path.write_text(_stack_run(agent, driver, **budget))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: 1 problem(s):" and out[1].startswith(f"  {problem}"), out


def test_a_stack_run_validates_and_resolves_its_image(tmp_path: Path) -> None:
    from a2rl.api.load import load_benchrun

    path = tmp_path / "run.yaml"
    path.write_text(
        _stack_run({"stack": "codex", "mode": "rl-only"}, {"provider": "openai", "model": "gpt-5"})
    )
    run = load_benchrun(path)
    agent = run.spec.agent
    assert agent.command == [] and agent.stack_version_or_default == STACKS["codex"].default_version
    assert agent.image_ref == STACKS["codex"].image()
    assert run.spec.driver is not None and run.spec.driver.key_env == "OPENAI_API_KEY"
    assert "command" not in run.to_wire(only_set=True)["spec"]["agent"]


def test_every_stack_has_an_example_that_validates() -> None:
    from a2rl.api.load import load_benchrun

    for stack in STACK_NAMES:
        run = load_benchrun(EXAMPLES / f"{stack}-arith.yaml", {"arith"})
        assert run.spec.agent.stack == stack and run.spec.driver is not None
        assert run.spec.driver.provider in STACKS[stack].providers
    vllm = load_benchrun(EXAMPLES / "openhands-vllm-arith.yaml", {"arith"})
    assert vllm.spec.driver is not None and vllm.spec.driver.provider == "openai-compatible"


def test_home_files_select_the_api_key_auth_of_gemini_cli() -> None:
    from a2rl.stacks import home_files

    kwargs = {"model": "m", "gateway_base_url": GATEWAY, "token": TOKEN, "workspace": Path("/ws")}
    settings = json.loads(home_files("gemini-cli", **kwargs)[".gemini/settings.json"])  # type: ignore[arg-type]
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    # A silent training command is not killed by the shell tool (default: after 300 s) while a run
    # of the longest budget lasts.
    assert settings["tools"]["shell"]["inactivityTimeout"] >= MAX_WALL_TIME_S
    for stack in ("claude-code", "codex", "opencode", "openhands"):
        assert home_files(stack, **kwargs) == {}  # type: ignore[arg-type]
    _, env = _call("openhands", "gemini")
    assert env["OPENHANDS_LLM_BASE_URL"] == f"{GATEWAY}/v1beta"


def test_each_stack_has_an_image_that_installs_its_tested_version() -> None:
    images = Path(__file__).resolve().parents[2] / "images"
    for name, sdef in STACKS.items():
        dockerfile = (images / f"agent-{name}" / "Dockerfile").read_text()
        assert f"ARG VERSION={sdef.default_version}\n" in dockerfile
        assert f"-t {sdef.image()} ." in dockerfile
        assert all(pkg in dockerfile for pkg in sdef.packages)
        assert f"/opt/a2rl-cache/agents/{name}-$VERSION" in dockerfile
