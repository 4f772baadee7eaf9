"""The campaign report from fabricated run records (no training): its figures equal the runs'
own report.json figures, the paper's table layout, links that resolve in a directory store, a
byte-identical rebuild; the store's index page; what `a2rl campaign` says of bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli import main
from a2rl_grader.campaign_report import write_campaign_report, write_store_index
from a2rl_grader.report import write_report

from a2rl.api.benchcampaign import BenchCampaign
from a2rl.campaign.matrix import PlannedRun, expand, run_labels
from a2rl.campaign.stats import mean_ci
from a2rl.campaign.store_outcomes import collect_outcomes, finished_runs, write_campaign
from a2rl.records.report import ReportRecord
from a2rl.store.layout import CampaignLayout
from a2rl.store.local import LocalStore
from tests.support.report_runs import RunWriter

ROOT = Path(__file__).resolve().parents[2]


def _campaign() -> BenchCampaign:
    template = yaml.safe_load((ROOT / "examples" / "arith-sft.yaml").read_text())["spec"]
    return BenchCampaign.model_validate(
        {
            "metadata": {"name": "paper"},
            "spec": {
                "template": template,
                "matrix": {
                    "tasks": ["arith", "gsm8k"],
                    "agents": [
                        {"name": "a", "agent": {"command": ["python", "-m", "a2rl_agents.sft_baseline"]}},
                        {"name": "b", "agent": {"command": ["python", "-m", "a2rl_agents.grpo_baseline"]}},
                    ],
                    "seeds": [0, 1],
                },
            },
        }
    )


def _planned(campaign: BenchCampaign, task: str, agent: str, seed: int) -> PlannedRun:
    (run,) = [
        r
        for r in expand("paper", campaign.spec)
        if r.cell.as_dict() == {"task": task, "agent": agent} and r.seed == seed
    ]
    return run


def _run(
    store: LocalStore,
    tmp: Path,
    run: PlannedRun,
    uid: str,
    scores: list[float | None],
    *,
    end_reason: str = "completed",
    start: float = 0.0,
    report: bool = True,
    seal: bool = False,
) -> RunWriter:
    """A finished run of `run` (baseline 5.0, then `scores`), with its report unless `report` is False."""
    w = RunWriter(store, tmp, name=run.name, uid=uid, start_offset_s=start)
    w.run_json(labels=run_labels("paper", run.cell), task=run.spec.task, end_reason=end_reason)
    w.submission(0, -20, None, 5.0)
    for i, score in enumerate(scores, start=1):
        model = None if score is None else _model(tmp, uid, i)
        w.submission(i, 100 * i, model, score, error=None if score is not None else "no score")
    if seal:
        for i in range(len(scores) + 1):
            store.put_json(w.layout.submission_seal(i), {"algorithm": "hmac-sha256", "mac": "0" * 64})
    if report:
        write_report(store, w.layout)
    return w


def _model(tmp: Path, uid: str, index: int) -> Any:
    from tests.support.report_runs import tree

    return tree(tmp / f"model-{uid}-{index}", {"config.json": "{}", "model.safetensors": f"{uid}-{index}"})


def _report_json(store: LocalStore, w: RunWriter) -> ReportRecord:
    return ReportRecord.model_validate_json(
        (store.root / w.layout.report_dir / "report.json").read_text(encoding="utf-8")
    )


@pytest.fixture
def fabricated(tmp_path: Path) -> tuple[LocalStore, BenchCampaign, dict[str, RunWriter]]:
    store = LocalStore(tmp_path / "store")
    campaign = _campaign()
    write_campaign(store, CampaignLayout("local", "paper"), campaign)
    runs = {
        "a-arith-0": _run(store, tmp_path, _planned(campaign, "arith", "a", 0), "aaaaaaaaaa00", [7.5, 9.0]),
        "a-arith-1": _run(
            store, tmp_path, _planned(campaign, "arith", "a", 1), "aaaaaaaaaa01", [12.0], start=10
        ),
        # interrupted, then run again: the finished record counts, with 2 attempts
        "b-arith-0-old": _run(
            store,
            tmp_path,
            _planned(campaign, "arith", "b", 0),
            "bbbbbbbbbb00",
            [30.0],
            end_reason="interrupted",
            start=20,
        ),
        "b-arith-0": _run(
            store, tmp_path, _planned(campaign, "arith", "b", 0), "bbbbbbbbbb10", [4.0, None], start=30
        ),
        # no report: scored from its sealed results
        "b-arith-1": _run(
            store,
            tmp_path,
            _planned(campaign, "arith", "b", 1),
            "bbbbbbbbbb01",
            [6.5],
            start=40,
            report=False,
            seal=True,
        ),
        # a run that failed (the agent exited non-zero after no submission)
        "a-gsm8k-0": _run(
            store,
            tmp_path,
            _planned(campaign, "gsm8k", "a", 0),
            "cccccccccc00",
            [],
            end_reason="failed",
            start=50,
        ),
    }
    return store, campaign, runs


def test_the_table_has_the_runs_own_figures(
    fabricated: tuple[LocalStore, BenchCampaign, dict[str, RunWriter]],
) -> None:
    store, campaign, runs = fabricated
    report = write_campaign_report(store, campaign, "local")
    folder = store.root / "campaigns" / "local" / "paper" / "report"

    # The paper's table: rows are the agents, columns the tasks, each entry a cell's key.
    assert report.table.row_axes == ["agent"]
    assert report.table.rows == ["a", "b"]
    assert report.table.columns == ["arith", "gsm8k"]
    cells = {(c.row, c.task): c for c in report.cells}
    assert report.table.cells == [
        [cells["a", "arith"].key, cells["a", "gsm8k"].key],
        [cells["b", "arith"].key, cells["b", "gsm8k"].key],
    ]

    # Cell (a, arith): the mean ± t-interval of the runs' own report.json improvements.
    own = [_report_json(store, runs[k]) for k in ("a-arith-0", "a-arith-1")]
    gains = [float(r.improvement) for r in own if r.improvement is not None]
    assert gains == [4.0, 7.0]
    expected = mean_ci(gains)
    a_arith = cells["a", "arith"]
    assert (a_arith.improvement.n, a_arith.improvement.mean) == (2, pytest.approx(expected.mean))
    assert a_arith.improvement.ci_low == pytest.approx(expected.low)
    assert a_arith.improvement.ci_high == pytest.approx(expected.high)
    assert a_arith.best_score.mean == pytest.approx((9.0 + 12.0) / 2)
    assert (a_arith.runs, a_arith.finished, a_arith.succeeded, a_arith.failed) == (2, 2, 2, 0)
    assert a_arith.success_rate == 1.0

    # Cell (b, arith): the re-run (not the interrupted record) and the run scored from its results.
    rows = {r.name: r for r in report.runs}
    b0 = rows[runs["b-arith-0"].layout.name]
    assert (b0.prefix, b0.attempts, b0.source) == (runs["b-arith-0"].layout.prefix, 2, "report")
    assert b0.improvement == _report_json(store, runs["b-arith-0"]).improvement == -1.0
    b1 = rows[runs["b-arith-1"].layout.name]
    assert (b1.source, b1.best_score, b1.improvement, b1.report) == ("results", 6.5, 1.5, None)
    b_arith = cells["b", "arith"]
    assert b_arith.improvement.mean == pytest.approx(0.25) and b_arith.success_rate == 0.5

    # A failed run counts (its base model is its result); a cell without runs has no figures.
    a_gsm8k = cells["a", "gsm8k"]
    assert (a_gsm8k.runs, a_gsm8k.finished, a_gsm8k.failed) == (2, 1, 1)
    assert a_gsm8k.improvement.mean == 0.0 and a_gsm8k.improvement.n == 1
    assert cells["b", "gsm8k"].finished == 0 and cells["b", "gsm8k"].improvement.mean is None

    # The summary is a BenchCampaign status' figures.
    counts = report.summary["runs"]
    assert (counts["total"], counts["succeeded"], counts["failed"], counts["notCreated"]) == (8, 4, 1, 3)
    assert report.summary["progress"] == "5/8"
    assert report.summary["bestCell"].startswith("task=arith, agent=a: +5.5 ± ")
    assert report.summary["reportUri"].endswith("campaigns/local/paper/report/report.html")

    # The files: links to each run's report resolve from the campaign's report folder.
    for name in ("report.json", "report.md", "report.html", "improvement.png"):
        assert (folder / name).is_file(), name
    page = (folder / "report.html").read_text()
    md = (folder / "report.md").read_text()
    for run in report.runs:
        if run.report is not None:
            assert (folder / run.report).resolve().is_file()
            assert f"href='{run.report}'" in page and f"[report]({run.report})" in md
    assert "| agent | arith | gsm8k |" in md
    assert "| a | +5.5 ± 19.1 (n=2) | +0.0 (n=1) |" in md
    # Deterministic: the same store gives the same report.json, byte for byte.
    before = (folder / "report.json").read_bytes()
    write_campaign_report(store, campaign, "local")
    assert (folder / "report.json").read_bytes() == before
    assert json.loads(before)["schema_version"] == "1"


def test_resume_and_outcomes_see_the_newest_finished_record(
    fabricated: tuple[LocalStore, BenchCampaign, dict[str, RunWriter]],
) -> None:
    store, campaign, runs = fabricated
    done = finished_runs(store, "local", "paper")
    # the interrupted record is not finished; the re-run is
    assert done[runs["b-arith-0"].layout.name].layout.uid == "bbbbbbbbbb10"
    assert len(done) == 5
    outcomes = collect_outcomes(store, "local", "paper", expand("paper", campaign.spec))
    assert outcomes[runs["a-gsm8k-0"].layout.name].outcome.phase == "Failed"
    assert outcomes[runs["a-arith-0"].layout.name].outcome.phase == "Succeeded"
    # another namespace holds none of them
    assert collect_outcomes(store, "team-a", "paper", expand("paper", campaign.spec)) == {}


def test_dry_run_names_the_skipped_runs(
    fabricated: tuple[LocalStore, BenchCampaign, dict[str, RunWriter]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, campaign, runs = fabricated
    path = tmp_path / "paper.yaml"
    doc = {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchCampaign", **campaign.to_wire(only_set=True)}
    path.write_text(yaml.safe_dump(doc))
    assert main(["campaign", "run", str(path), "--store", str(store.root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "8 in 4 cell(s)" in out and "5 finished already (skipped), 3 to run" in out
    assert f"{runs['b-arith-0'].layout.name}  seed 0  finished ({runs['b-arith-0'].layout.prefix}" in out


def test_a_campaign_of_the_same_name_with_other_axes_is_refused(
    fabricated: tuple[LocalStore, BenchCampaign, dict[str, RunWriter]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, campaign, _runs = fabricated
    doc = {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchCampaign", **campaign.to_wire(only_set=True)}
    path = tmp_path / "paper.yaml"
    grown = json.loads(json.dumps(doc))
    grown["spec"]["matrix"]["seeds"] = [0, 1, 2]  # more seeds: the same campaign, grown
    path.write_text(yaml.safe_dump(grown))
    assert main(["campaign", "run", str(path), "--store", str(store.root), "--dry-run"]) == 0
    assert "12 in 4 cell(s)" in capsys.readouterr().out
    other = json.loads(json.dumps(doc))
    other["spec"]["template"]["budget"]["wallTimeSeconds"] = 60  # another template: refused
    path.write_text(yaml.safe_dump(other))
    assert main(["campaign", "run", str(path), "--store", str(store.root), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was run with another template or other matrix axes" in err


def test_the_store_index_lists_every_run_newest_first_and_the_campaigns(
    fabricated: tuple[LocalStore, BenchCampaign, dict[str, RunWriter]],
) -> None:
    store, campaign, runs = fabricated
    write_campaign_report(store, campaign, "local")
    url = write_store_index(store)
    page = (store.root / "index.html").read_text()
    assert url.endswith("/index.html")
    prefixes = [w.layout.prefix for w in runs.values()]
    positions = [page.index(p) for p in prefixes]
    # newest first: the runs were started 0, 10, 20, … s apart, in this order
    assert positions == sorted(positions, reverse=True)
    assert f"href='{runs['a-arith-0'].layout.report_dir}/report.html'" in page
    assert "href='campaigns/local/paper/report/report.html'" in page
    assert "task=arith, agent=a: +5.5" in page  # the campaign's best cell
    # the run without a report is listed without a link
    assert f"<td>{runs['b-arith-1'].layout.prefix}</td>" in page


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: BenchRun\napiVersion: a2rl.dev/v1alpha1\n", "kind: must be BenchCampaign"),
        ("{{", "invalid YAML"),
        (
            "apiVersion: a2rl.dev/v1alpha1\nkind: BenchCampaign\nmetadata: {name: c}\nspec:\n"
            "  template: {task: arith, baseModel: {name: t, source: 'builtin:tiny'},"
            " agent: {command: [python]}, budget: {wallTimeSeconds: 10}}\n"
            "  matrix: {seedz: [1], tasks: [gsm9k]}\n",
            "spec.matrix.seedz: unknown field (did you mean seeds?); "
            "spec.matrix.tasks[0]: unknown task 'gsm9k'",
        ),
        (
            "apiVersion: a2rl.dev/v1alpha1\nkind: BenchCampaign\nmetadata: {name: c}\nspec:\n"
            "  template: {task: arith, baseModel: {name: t, source: 'builtin:tiny'},"
            " agent: {command: [python]}, budget: {wallTimeSeconds: 10}}\n  matrix: {stacks: [codex]}\n",
            "cell stack=codex: spec.agent: set either command",
        ),
    ],
)
def test_a_bad_campaign_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    assert main(["campaign", "run", str(path), "--store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"a2rl: error: {path}: ")
    assert message in err
    assert not (tmp_path / "store" / "campaigns").exists()


def test_a_report_of_an_unknown_campaign_names_the_known_ones(
    fabricated: tuple[LocalStore, BenchCampaign, dict[str, RunWriter]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, _campaign, _runs = fabricated
    assert main(["campaign", "report", "papr", "--store", str(store.root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no campaign 'papr'" in err and "campaigns there: local/paper" in err
    assert main(["campaign", "report", "paper", "--store", str(store.root), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["progress"] == "5/8" and len(summary["cells"]) == 4
