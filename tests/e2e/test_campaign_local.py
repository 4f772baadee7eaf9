"""`a2rl campaign run` end to end: a tiny campaign derived from examples/campaign-arith.yaml (its
template, budgets cut to seconds, two scripted agents instead of the trained ones: 2 cells, 1
seed, 2 runs) runs through the real CLI — each run a real `a2rl run` child with its recorder, its
baseline and its report — and writes the campaign report; running it again does nothing; an
interrupted run is run again on resume.

Fast on purpose: the agents train nothing (one submits a copy of the base model, scored from the
baseline without an evaluation; the other submits nothing), the held-out set is cut to 20 items,
and the baseline is evaluated once, then served from the store's cache."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli import main

from tests.support.run_support import EXAMPLES, SUBMIT_BASE_COPY

NAME = "camp-e2e"
COPY_AGENT = "import json, os, shutil, urllib.request\n" + SUBMIT_BASE_COPY
QUIET_AGENT = textwrap.dedent(
    """
    print("agent: nothing worth submitting", flush=True)
    """
)


def _campaign_file(tmp_path: Path) -> Path:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "campaign-arith.yaml").read_text())
    doc["metadata"]["name"] = NAME
    template = doc["spec"]["template"]
    template["budget"].update(wallTimeSeconds=40, graceSeconds=2)
    template["evaluation"]["limit"] = 20
    agents = []
    for name, code in (("copy", COPY_AGENT), ("quiet", QUIET_AGENT)):
        script = tmp_path / f"{name}.py"
        script.write_text(code)
        agents.append({"name": name, "agent": {"command": ["python", str(script)]}})
    doc["spec"]["matrix"] = {"agents": agents, "seeds": [0]}
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _runs(store: Path) -> dict[str, dict[str, Any]]:
    """Every run.json in the store, by its folder."""
    return {p.parent.name: json.loads(p.read_text()) for p in (store / "local").glob("*/run.json")}


def test_a_campaign_runs_reports_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _campaign_file(tmp_path)
    store = tmp_path / "store"
    report_dir = store / "campaigns" / "local" / NAME / "report"

    # 1. Every planned run, then the report.
    code = main(["campaign", "run", str(path), "--store", str(store)])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    runs = _runs(store)
    assert len(runs) == 2
    assert {doc["labels"]["a2rl.dev/campaign"] for doc in runs.values()} == {NAME}
    assert {doc["end_reason"] for doc in runs.values()} == {"completed", "no_submission"}
    assert "[campaign] 2/2 done" in out and f"report      {report_dir / 'report.html'}" in out
    report = json.loads((report_dir / "report.json").read_text())
    assert report["summary"]["progress"] == "2/2" and report["table"]["rows"] == ["copy", "quiet"]
    cells = {c["row"]: c for c in report["cells"]}
    for row in report["runs"]:
        own = json.loads((store / row["prefix"] / "report" / "report.json").read_text())
        assert (row["baseline_score"], row["best_score"], row["improvement"]) == (
            own["baseline_score"],
            own["best_score"],
            own["improvement"],
        )
        assert (report_dir / row["report"]).resolve() == (store / row["prefix"] / "report" / "report.html")
    copy = cells["copy"]
    copied = next(r for r in report["runs"] if r["cell"] == copy["key"])
    assert copied["improvement"] == 0.0  # a copy of the base model scores the baseline
    assert copy["improvement"] == {"n": 1, "mean": 0.0, "ci_low": None, "ci_high": None}
    # no valid submission: the base model is the run's result
    assert cells["quiet"]["best_score"]["mean"] == copied["baseline_score"]
    for name in ("report.md", "report.html", "improvement.png"):
        assert (report_dir / name).is_file()
    assert (store / "index.html").is_file()
    logs = Path(os.environ["A2RL_HOME"]) / "campaigns" / NAME / "logs"
    assert sorted(p.stem for p in logs.glob("*.log")) == sorted(doc["name"] for doc in runs.values())

    # 2. Again: every run finished, nothing runs, the report is the same.
    before = (report_dir / "report.json").read_bytes()
    assert main(["campaign", "run", str(path), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "nothing to do: all 2 runs finished already" in out
    assert _runs(store).keys() == runs.keys()
    assert (report_dir / "report.json").read_bytes() == before

    # 3. A run recorded as interrupted is run again; the other is skipped.
    quiet = next(folder for folder, doc in runs.items() if doc["end_reason"] == "no_submission")
    doc = runs[quiet]
    doc["end_reason"] = "interrupted"
    (store / "local" / quiet / "run.json").write_text(json.dumps(doc))
    assert main(["campaign", "run", str(path), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "1 finished already (skipped), 1 to run" in out
    again = _runs(store)
    assert len(again) == 3
    (new,) = again.keys() - runs.keys()
    assert again[new]["name"] == doc["name"] and again[new]["end_reason"] == "no_submission"
    report = json.loads((report_dir / "report.json").read_text())
    row = next(r for r in report["runs"] if r["name"] == doc["name"])
    assert (row["prefix"], row["attempts"]) == (f"local/{new}", 2)
