"""Helpers of the tests that run a BenchRun in local mode (`a2rl run`): BenchRun documents of
the `arith` task with a scripted agent, and running an example with the reference agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: A scripted agent's code (no training): write code, submit a copy of the base model as
#: `output/v1` and print the grading server's reply; and it prints the store credentials it sees.
SUBMIT_BASE_COPY = """\
print("agent: secrets visible:", sorted(k for k in os.environ if k.startswith(("AWS_", "A2RL_STORE"))))
os.makedirs("code", exist_ok=True)
with open("code/train.py", "w") as f:
    f.write("print('pretend training')\\n")
shutil.copytree(os.environ["MODEL_PATH"], "output/v1")
req = urllib.request.Request(
    os.environ["GRADING_SERVER_URL"] + "/submit",
    data=json.dumps({"model_path": "output/v1"}).encode(),
    headers={"Content-Type": "application/json"},
)
print("agent: submit ->", urllib.request.urlopen(req, timeout=300).read().decode(), flush=True)
"""


def arith_spec(agent: Path, *, wall_s: int, grace_s: int, limit: int = 20, **extra: Any) -> dict[str, Any]:
    """A BenchRun spec: `arith` on the tiny base model, `python AGENT` as the agent, scored on
    `limit` held-out items; `extra` adds or replaces spec fields."""
    return {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"command": ["python", str(agent)]},
        "budget": {"wallTimeSeconds": wall_s, "graceSeconds": grace_s},
        "evaluation": {"backend": "transformers", "limit": limit},
        **extra,
    }


def benchrun_doc(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchRun", "metadata": {"name": name}, "spec": spec}


def run_example(
    example: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    name: str,
    agent_env: dict[str, str],
    eval_limit: int,
    budget_s: int,
    grace_s: int = 10,
) -> tuple[Path, str]:
    """`a2rl run` of `examples/EXAMPLE` renamed to `name`, with `agent_env` for the agent, the
    budget and the evaluation limit set, into a fresh local store under `tmp_path`; asserts that
    it exits 0. (The run's directory in the store, what `a2rl run` printed.)"""
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["agent"]["env"] = [{"name": k, "value": v} for k, v in agent_env.items()]
    doc["spec"]["evaluation"]["limit"] = eval_limit
    doc["spec"]["budget"]["wallTimeSeconds"] = budget_s
    doc["spec"]["budget"]["graceSeconds"] = grace_s
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    store = tmp_path / "store"

    code = main(["run", str(path), "--store", str(store)])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    (run_dir,) = (store / "local").iterdir()
    return run_dir, out
