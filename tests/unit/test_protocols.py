"""Evaluation protocols (issue 12): `spec.evaluation.protocol` reaches every task a run builds —
the evaluator version (hence the baseline cache key), the agent's description, protocol-dependent
staged data, run.json and the evaluation processes' environment."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from a2rl_tasks import get_task
from a2rl_tasks.base import EvalResult, StagedData, Task
from a2rl_tasks.staging import cached_dir

from a2rl.api.benchrun import BenchRun
from a2rl.contracts.env import agent_base_env, eval_environ
from a2rl.contracts.setup import SetupParams, setup_argv
from a2rl.errors import A2rlError
from a2rl.protocols import (
    DEFAULT_PROTOCOL,
    ENV_EVAL_PROTOCOL,
    PROTOCOLS,
    parse_protocol,
    protocol_from_env,
    spec_protocol,
)
from a2rl.records.run import run_record
from a2rl.store.layout import RunLayout

#: The tasks whose evaluator versions this suite pins (alfworld, webshop and deepsearchqa name
#: their protocol through `Task.versioned` too, in their own modules).
MY_TASKS = {"arith": "arith-1", "gsm8k": "gsm8k-2", "humaneval": "humaneval-2", "alpacaeval": "alpacaeval-2"}


def _run(**evaluation: object) -> BenchRun:
    spec = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"command": ["python", "-m", "agent"]},
        "budget": {"wallTimeSeconds": 300},
        "evaluation": evaluation,
    }
    return BenchRun.model_validate({"metadata": {"name": "demo"}, "spec": spec})


def test_default_is_reference_and_unknown_protocols_are_refused() -> None:
    assert DEFAULT_PROTOCOL == "reference" and PROTOCOLS == ("reference", "a2rl")
    assert protocol_from_env(None) == "reference" and protocol_from_env({}) == "reference"
    assert protocol_from_env({ENV_EVAL_PROTOCOL: "a2rl"}) == "a2rl"
    with pytest.raises(A2rlError, match="unknown evaluation protocol 'paper'"):
        parse_protocol("paper")
    with pytest.raises(A2rlError):
        get_task("arith", {ENV_EVAL_PROTOCOL: "paper"})
    assert (
        spec_protocol(None) == "reference" and spec_protocol({"evaluation": {"protocol": "a2rl"}}) == "a2rl"
    )


@pytest.mark.parametrize(("name", "base"), sorted(MY_TASKS.items()))
def test_evaluator_versions_name_the_protocol(name: str, base: str) -> None:
    assert get_task(name).evaluator_version == f"{base}+reference"
    assert get_task(name, protocol="a2rl").evaluator_version == f"{base}+a2rl"
    # An evaluation environment names it (A2RL_EVAL_PROTOCOL); an explicit protocol wins.
    assert get_task(name, {ENV_EVAL_PROTOCOL: "a2rl"}).protocol == "a2rl"
    assert get_task(name, {ENV_EVAL_PROTOCOL: "a2rl"}, protocol="reference").protocol == "reference"


def test_the_spec_protocol_reaches_evaluations_run_json_and_set_up_but_never_the_agent() -> None:
    assert _run().spec.evaluation.protocol == "reference"
    run = _run(protocol="a2rl")
    env = eval_environ(run.spec, {"PATH": "/bin"})
    assert env[ENV_EVAL_PROTOCOL] == "a2rl"
    assert ENV_EVAL_PROTOCOL not in agent_base_env(env)
    assert get_task(run.spec.task, env).evaluator_version.endswith("+a2rl")
    layout = RunLayout(namespace="local", name="demo", uid="0123456789ab")
    assert run_record(run, layout, base_model_digest="d", evaluator_version="x").protocol == "a2rl"
    argv = setup_argv(SetupParams("builtin:tiny", "tiny", seed=0, grace_s=5, protocol="a2rl"))
    assert argv[argv.index("--protocol") + 1] == "a2rl"


class _ProtocolDataTask(Task):
    name = "protocoldemo"
    level = "cpu"
    metric = "none"
    evaluator_version = "protocoldemo-1"
    data_version = "3"
    protocol_data = True

    def stage(
        self, staged: StagedData, *, source: str | None = None, seed: int = 0, heldout_seed: int | None = None
    ) -> None:
        raise NotImplementedError

    def evaluate(self, backend: Any, heldout_dir: Path, *, limit: int | None = None) -> EvalResult:
        raise NotImplementedError


def test_protocol_dependent_data_are_staged_apart() -> None:
    ref, ours = _ProtocolDataTask(), _ProtocolDataTask(protocol="a2rl")
    assert (ref.data_version, ours.data_version) == ("3+reference", "3+a2rl")
    assert _ProtocolDataTask.data_version == "3"  # the class is untouched
    assert cached_dir(ref, 0) != cached_dir(ours, 0)
    # A task whose data do not depend on the protocol shares one staging.
    assert cached_dir(get_task("arith"), 0, secret=b"s") == cached_dir(
        get_task("arith", protocol="a2rl"), 0, secret=b"s"
    )


def test_description_picks_the_protocol_specific_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "protodesc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from a2rl_tasks.arith.task import ArithTask\n\nclass DescTask(ArithTask):\n    pass\n"
    )
    (pkg / "description.md").write_text("ours\n")
    (pkg / "description.reference.md").write_text("the reference's\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from protodesc import DescTask  # type: ignore[import-not-found]

    assert DescTask().description() == "the reference's\n"
    assert DescTask(protocol="a2rl").description() == "ours\n"
    (pkg / "description.reference.md").unlink()
    assert DescTask().description() == "ours\n"  # no protocol-specific file: description.md
    sys.modules.pop("protodesc", None)


def test_baseline_cache_keys_name_the_protocol_and_the_heldout_data(tmp_path: Path) -> None:
    """Issue 12's cache-key fix: the protocol (through the evaluator version) and the held-out
    data's digest key the baseline, in cluster mode too (the manifest staged in the store)."""
    from a2rl_grader.baseline import baseline_cache_key, cluster_baseline_cache_key, stored_heldout_digest
    from a2rl_tasks.artifacts import stage_to_store

    from a2rl.store.open import open_store

    store = open_store(tmp_path.as_uri())
    ref, ours = get_task("humaneval"), get_task("humaneval", protocol="a2rl")
    assert stored_heldout_digest(store, ref, 0) is None  # not staged: the version alone keys it
    assert cluster_baseline_cache_key(ref, "m" * 64, None, store, 0) == (
        f"baselines/humaneval/{'m' * 64}/humaneval-2+reference.json"
    )
    stage_to_store(ref, store, source=None, seed=0)
    digest = stored_heldout_digest(store, ref, 0)
    assert digest and len(digest) == 64
    key_ref = cluster_baseline_cache_key(ref, "m" * 64, None, store, 0)
    key_ours = cluster_baseline_cache_key(ours, "m" * 64, None, store, 0)
    assert key_ref == f"baselines/humaneval/{'m' * 64}/humaneval-2+reference-data-{digest}.json"
    assert key_ours == f"baselines/humaneval/{'m' * 64}/humaneval-2+a2rl-data-{digest}.json"
    # Local mode adds the signer; a limited evaluation never poses as a full one.
    assert baseline_cache_key(ref, "m" * 64, 5, "h" * 64, "s1").endswith(
        f"humaneval-2+reference+limit5-data-{'h' * 64}-signer-s1.json"
    )


def test_instructions_follow_the_protocol() -> None:
    """`reference`: the reference's English instructions.md byte for byte (plus a cap line when
    the run caps submissions); `a2rl`: ours, route-neutral."""
    from a2rl.reference_instructions import REFERENCE_INSTRUCTIONS
    from a2rl.workspace import WorkspaceRules, instructions_for

    rules = WorkspaceRules(task="gsm8k", base_model="Org/M", budget_s=600, grace_s=5, max_submissions=None)
    assert instructions_for(rules) == REFERENCE_INSTRUCTIONS
    assert REFERENCE_INSTRUCTIONS.startswith(
        "#AutoRL-Bench task description\n\nYou are a reinforcement learning training agent"
    )
    assert len(REFERENCE_INSTRUCTIONS) == 5909  # RD-Agent core/instructions.md, English (014f031)
    capped = instructions_for(WorkspaceRules("gsm8k", "Org/M", 600, 5, 3))
    assert capped.startswith(REFERENCE_INSTRUCTIONS) and "at most 3 times" in capped
    ours = instructions_for(WorkspaceRules("gsm8k", "Org/M", 600, 5, None, protocol="a2rl"))
    assert ours.startswith("# Instructions") and "any method is allowed" in ours
    # Route-neutral task descriptions under a2rl: no route is called the usual or fastest one.
    for name in ("gsm8k", "humaneval", "alpacaeval"):
        text = get_task(name, protocol="a2rl").description()
        assert "scoring prefers none" in text and "usual" not in text and "fastest" not in text
        assert get_task(name).description().startswith("#")  # the reference's own description


def test_every_registered_task_names_its_protocol() -> None:
    """A new task cannot forget the protocol: its evaluator version (the baseline cache key)
    must differ between the two protocols and end in `+<protocol>` or carry it before a suffix."""
    from a2rl_tasks import TASKS

    for name in TASKS:
        ref, ours = get_task(name).evaluator_version, get_task(name, protocol="a2rl").evaluator_version
        assert "+reference" in ref and "+a2rl" in ours and ref != ours, name
