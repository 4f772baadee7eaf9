"""Reports from real store trees in a LocalStore: load_history, write_report, rendering."""

from __future__ import annotations

import json
from pathlib import Path

from a2rl_grader.report.history import NO_RESULT_ERROR, load_history
from a2rl_grader.report.metrics import build_report, report_json_bytes
from a2rl_grader.report.render import render_html, render_markdown
from a2rl_grader.report.write import read_report, report_summary, write_report

from a2rl.store.local import LocalStore
from tests.support.report_runs import T0, RunWriter, sample_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_load_history_reads_every_document(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    h = load_history(w.store, w.layout)
    assert h.run.task == "arith" and h.run.started_at == T0
    assert h.baseline is not None and h.baseline.score == 5.0
    assert [s.index for s in h.submissions] == [1, 2, 3, 4, 5]
    assert [r.index for r in h.revisions] == [1, 2]
    assert h.submissions[4].result is None and h.submissions[4].error == NO_RESULT_ERROR
    assert h.submissions[2].model_files == 2 and h.submissions[2].code_revision == 2
    assert h.base_model_digest == w.base.digest


def test_metrics_of_a_stored_run(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    report = build_report(load_history(w.store, w.layout))
    m = report.metrics
    assert (report.baseline_score, report.best_score, report.best_submission) == (5.0, 42.5, 3)
    assert report.improvement == 37.5
    assert (m.total_submissions, m.valid_submissions, m.invalid_submissions) == (5, 3, 2)
    assert m.valid_submission_rate == 0.6
    assert m.copy_of_base_count == 1
    assert m.first_valid_index == 2 and m.first_improvement_index == 3
    assert m.time_to_first_improvement_s == 200.0 and m.time_to_best_s == 200.0
    assert m.monotonic_ratio == 0.5
    assert m.last_submit_gap_s == 300.0
    assert m.time_used_ratio == 1.0
    assert m.code_revisions == 2 and m.revisions_before_first_submission == 1
    assert m.distinct_models == 3
    assert report.revisions[1].paths == ["+sft.py", "~train.py"]


def test_write_report_stores_four_files(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    report = write_report(w.store, w.layout)
    keys = set(w.store.list(w.layout.report_dir))
    names = {"report.json", "report.md", "report.html", "trajectory.png"}
    assert keys == {f"{w.layout.report_dir}/{n}" for n in names}
    assert w.store.get_bytes(f"{w.layout.report_dir}/trajectory.png").startswith(PNG_MAGIC)
    stored = w.store.get_bytes(f"{w.layout.report_dir}/report.json")
    assert stored == report_json_bytes(report)
    assert read_report(w.store, w.layout) == report
    # Rewriting from the same store gives a byte-identical report.json.
    write_report(w.store, w.layout)
    assert w.store.get_bytes(f"{w.layout.report_dir}/report.json") == stored
    summary = report_summary(report, w.store.url_for(w.layout.report_dir))
    assert summary["best_score"] == 42.5 and summary["valid_submissions"] == 3


def test_png_for_a_run_without_submissions(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    w = RunWriter(store, tmp_path)
    w.run_json(ended=60.0)
    report = write_report(store, w.layout)
    assert report.submissions == [] and report.baseline_score is None
    png = store.get_bytes(f"{w.layout.report_dir}/trajectory.png")
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    assert "No submissions." in store.get_bytes(f"{w.layout.report_dir}/report.md").decode()


def test_markdown_and_html_contain_the_key_rows(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    report = build_report(load_history(w.store, w.layout))
    md = render_markdown(report)
    for needle in (
        "## Headline",
        "**▲ IMPROVED: best 42.5 (#3) is 37.5 above the baseline 5.0; run ended: completed**",
        "| Score | baseline 5.0 → best 42.5 (#3), Δ +37.5 |",
        "| Valid submissions | 3 of 5 |",
        "## Summary",
        "## Submissions",
        "## Code revisions",
        "## Metrics",
        "no: model could not be loaded",
        "no: no result",
        f"{w.base.digest[:12]} (base)",
        "+sft.py, ~train.py",
        "| Valid-submission rate | 0.6 |",
        "| Copies of the base model | 1 |",
    ):
        assert needle in md, needle
    # Every submission has one row: 3:20 (200 s since the start) for submission 3 with its score.
    assert "| 3 | 3:20 | 42.5 | yes | 42.5 |" in md
    # Each fact once: the headline's numbers are not repeated in the summary or the metrics.
    assert "| Baseline score |" not in md and "| Best score |" not in md and "| Budget used |" in md
    assert md.count("| Valid submissions |") == 1 and "| Improvement" not in md
    page = render_html(report, "trajectory.png")
    assert page.startswith("<!DOCTYPE html>") and "<img src='trajectory.png'" in page
    assert "42.5" in page and "<script" not in page


def test_unreadable_documents_are_tolerated(tmp_path: Path) -> None:
    w = sample_run(tmp_path)
    w.store.put_bytes(w.layout.submission_result(4), b"{not json")
    w.store.put_bytes(w.layout.revision(3), b"[]")
    h = load_history(w.store, w.layout)
    assert h.submissions[3].error == NO_RESULT_ERROR
    assert [r.index for r in h.revisions] == [1, 2]
    json.loads(report_json_bytes(build_report(h)))


def test_the_report_names_the_sandbox_and_warns_without_one(tmp_path: Path) -> None:
    sandboxed = sample_run(tmp_path / "a")
    sandboxed.run_json(sandbox="bubblewrap 0.8.0")
    md = render_markdown(build_report(load_history(sandboxed.store, sandboxed.layout)))
    assert (
        "| Integrity | ? sandboxed (bubblewrap 0.8.0); not verified here (no run key" in md
        and "--no-sandbox" not in md
    )

    bare = sample_run(tmp_path / "b")
    bare.run_json(sandbox="none")
    report = build_report(load_history(bare.store, bare.layout))
    assert report.run.sandbox == "none"
    md = render_markdown(report)
    assert "| Integrity | ✗ NOT sandboxed (--no-sandbox);" in md
    assert "## Integrity" in md and "without the local sandbox (--no-sandbox)" in md
    assert "without the local sandbox (--no-sandbox)" in render_html(report)
