"""A hostile agent run with `--no-sandbox` (same user) rewrites the store; no score changes.

The agent does what the attack did: it finds the store and the run prefix in the recorder's
/proc/<pid>/environ, rewrites its submission's result.json to 100 and every baseline cache entry
to 42. The run's summary and report do not score the rewrite; the next run does not use the
poisoned baseline and says why. Real runner, recorder, eval processes and store.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from a2rl_runner.run import run_benchrun

from a2rl.api.benchrun import BenchRun
from a2rl.records.result import TAMPERED_ERROR
from tests.support.run_support import SUBMIT_BASE_COPY, arith_spec

pytestmark = pytest.mark.slow

HOSTILE = (
    "import glob, json, os, shutil, urllib.parse, urllib.request\n"
    + SUBMIT_BASE_COPY
    + textwrap.dedent(
        """
        found = {}
        for path in glob.glob("/proc/[0-9]*/environ"):
            try:
                raw = open(path, "rb").read().decode(errors="replace")
            except OSError:
                continue
            env = dict(kv.split("=", 1) for kv in raw.split("\\0") if "=" in kv)
            if "A2RL_RUN_PREFIX" in env and env.get("WORKSPACE") == os.environ["WORKSPACE"]:
                found = env
                break
        store = urllib.parse.urlparse(found["A2RL_STORE_URI"]).path
        result = os.path.join(store, found["A2RL_RUN_PREFIX"], "submissions", "00001", "result.json")
        doc = json.load(open(result))
        doc["score"] = 100.0
        json.dump(doc, open(result, "w"))
        for entry in glob.glob(os.path.join(store, "baselines", "**", "*.json"), recursive=True):
            cached = json.load(open(entry))
            cached["score"] = 42.0
            json.dump(cached, open(entry, "w"))
        print("agent: rewrote", result, flush=True)
        print("agent: recorder keys:", sorted(k for k in found if "KEY" in k), flush=True)
        """
    )
)


def test_rewrites_by_an_unsandboxed_agent_change_no_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    agent = tmp_path / "agent.py"
    agent.write_text(HOSTILE)
    run = BenchRun.model_validate(
        {"metadata": {"name": "hostile"}, "spec": arith_spec(agent, wall_s=120, grace_s=2, limit=4)}
    )
    outcome = run_benchrun(run, store_uri=str(store), progress=True, sandbox=False)
    out = capsys.readouterr().out
    agent_log = (store / outcome.prefix / "logs" / "agent.log").read_text()
    assert "agent: rewrote" in agent_log, agent_log
    seen = agent_log.split("agent: recorder keys:", 1)[1].splitlines()[0]
    assert "A2RL_RUN_KEY_SOURCE" in seen and seen.count("RUN_KEY") == 1  # the flag, never a key
    # The summary: the rewritten 100 is not a score; the tamper is named.
    assert outcome.scores.best_score is None and outcome.scores.valid_submissions == 0
    assert f"submission 1: {TAMPERED_ERROR}" in out
    assert "100.0" not in out.split("agent ended", 1)[-1]
    report = json.loads((store / outcome.prefix / "report" / "report.json").read_text())
    assert report["best_score"] is None and report["submissions"][0]["error"] == TAMPERED_ERROR
    baseline = report["baseline_score"]
    assert baseline is not None and baseline != 42.0
    # It ran unsandboxed, and the output and the report say so.
    assert "--no-sandbox: the agent runs as you" in out
    assert report["run"]["sandbox"] == "none"
    assert "without the local sandbox" in (store / outcome.prefix / "report" / "report.md").read_text()

    # The next run: the poisoned cache entry is not used; the run says why.
    quiet = tmp_path / "quiet.py"
    quiet.write_text("print('agent: nothing to do')\n")
    again = BenchRun.model_validate(
        {"metadata": {"name": "after"}, "spec": arith_spec(quiet, wall_s=60, grace_s=2, limit=4)}
    )
    second = run_benchrun(again, store_uri=str(store), progress=True, sandbox=False)
    out = capsys.readouterr().out
    assert "failed its integrity check; the base model was evaluated again" in out
    assert "baseline score 42.0" not in out and second.scores.baseline_score == baseline
