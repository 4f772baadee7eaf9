"""The report's headline (verdict, evaluation size, budget, integrity), its one time base, the
plot's axes and the terminal view (`a2rl_grader.report.headline`, `.render`, `.text`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from a2rl_cli import main
from a2rl_grader.report.headline import IMPROVED, NO_CHANGE, NO_VALID, WORSE, compute_headline
from a2rl_grader.report.history import EvalResult, RunHistory, Submission, load_history
from a2rl_grader.report.metrics import build_report, compute_metrics
from a2rl_grader.report.render import render_html, render_markdown, trajectory_figure
from a2rl_grader.report.text import render_text
from a2rl_grader.report.times import clock

from a2rl.integrity import new_key
from a2rl.records.report import ReportHeadline
from a2rl.records.result import ResultRecord, seal_result
from a2rl.runs import RunInfo
from a2rl.store.local import LocalStore
from tests.support.report_runs import sample_run

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
BASE_DIGEST = "b" * 64


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def result(score: float | None, error: str | None = None, n: int = 500) -> EvalResult:
    return EvalResult(score=score, error=error, n=n, correct=int((score or 0) * n / 100), duration_s=4.0)


def sub(index: int, t: float, score: float | None, error: str | None = None, n: int = 500) -> Submission:
    return Submission(
        index=index,
        submitted_at=at(t),
        model_path=f"output/v{index}",
        model_digest=f"{index:064x}",
        base_model_digest=BASE_DIGEST,
        result=result(score, error, n),
    )


def run_history(
    subs: list[Submission],
    *,
    baseline: float | None = 1.0,
    end_reason: str = "completed",
    ended: float = 421.6,
    budget: int = 400,
    limit: int | None = None,
    sandbox: str | None = "bubblewrap 0.8.0",
    checked: bool = False,
    n: int = 500,
    last_words: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> RunHistory:
    """A run as run.json records it: a 400 s arith run under the reference protocol."""
    evaluation: dict[str, Any] = {"protocol": "reference"} | ({"limit": limit} if limit else {})
    run_json: dict[str, Any] = (
        {
            "name": "demo",
            "namespace": "local",
            "uid": "0123456789ab",
            "task": "arith",
            "base_model": {"name": "tiny", "source": "builtin:tiny", "digest": BASE_DIGEST},
            "budget": {"wall_time_seconds": budget, "max_submissions": None},
            "spec": {"task": "arith", "evaluation": evaluation, "budget": {"wallTimeSeconds": budget}},
            "started_at": T0.isoformat(),
            "deadline": at(budget).isoformat(),
            "ended_at": at(ended).isoformat(),
            "end_reason": end_reason,
            "agent_exit_code": 0,
            "evaluator_version": "arith-1+reference",
            "protocol": "reference",
            "mode": "local",
            "sandbox": sandbox,
        }
        | ({"agent_last_words": last_words} if last_words is not None else {})
        | (extra or {})
    )
    base = None
    if baseline is not None:
        base = Submission(
            index=0,
            submitted_at=at(-20),
            model_digest=BASE_DIGEST,
            identical_to_base=True,
            result=result(baseline, n=n),
        )
    return RunHistory(
        run=RunInfo.from_json("local/demo-0123456789ab", run_json),
        baseline=base,
        submissions=tuple(subs),
        revisions=(),
        results_checked=checked,
    )


def headline_of(history: RunHistory) -> ReportHeadline:
    return compute_headline(history, compute_metrics(history))


# --- the verdict -----------------------------------------------------------------------------


def test_improved() -> None:
    h = headline_of(run_history([sub(1, 120, 0.5), sub(2, 180, 12.5)], baseline=1.0))
    assert h.verdict == IMPROVED
    assert (h.baseline_score, h.best_score, h.best_submission, h.delta) == (1.0, 12.5, 2, 11.5)
    assert h.reason == "best 12.5 (#2) is 11.5 above the baseline 1.0; run ended: completed"
    assert (h.valid_submissions, h.total_submissions) == (2, 2)


def test_worse_is_its_own_verdict() -> None:
    """The agent made the model worse (baseline 1.0 → best 0.0): said at the top, not a table row."""
    h = headline_of(run_history([sub(1, 200, 0.0)], baseline=1.0, end_reason="deadline_exceeded"))
    assert h.verdict == WORSE and h.delta == -1.0
    assert h.reason is not None and "1.0 below the baseline 1.0" in h.reason
    assert h.reason.endswith("run ended: deadline_exceeded")
    md = render_markdown(build_report(run_history([sub(1, 200, 0.0)], baseline=1.0)))
    assert "**▼ WORSE: best 0.0 (#1) is 1.0 below the baseline 1.0" in md
    assert "| Score | baseline 1.0 → best 0.0 (#1), Δ -1.0 |" in md


def test_no_change() -> None:
    h = headline_of(run_history([sub(1, 60, 5.0), sub(2, 90, 3.0)], baseline=5.0))
    assert h.verdict == NO_CHANGE and h.delta == 0.0
    assert h.reason == "best 5.0 (#1) equals the baseline 5.0; run ended: completed"


def test_no_submission_says_so_and_why_the_run_ended() -> None:
    h = headline_of(run_history([], end_reason="no_submission"))
    assert h.verdict == NO_VALID and h.best_score is None and h.delta is None
    assert h.reason == "the agent made no submission; run ended: no_submission"
    assert (h.valid_submissions, h.total_submissions) == (0, 0)


def test_an_agent_that_gave_up_is_quoted_in_the_headline() -> None:
    words = ["Epoch 1/3: loss nan", "Training diverged; I | cannot submit a model that outputs nothing."]
    history = run_history([], end_reason="no_submission", last_words=words)
    assert headline_of(history).agent_last_words == words
    md = render_markdown(build_report(history))
    assert "| Agent's last words | Epoch 1/3: loss nan ⏎ Training diverged; I \\| cannot submit" in md
    # Once it submitted, its last words are no longer the run's story.
    assert headline_of(run_history([sub(1, 60, 2.0)], last_words=words)).agent_last_words is None


def test_a_queued_run_shows_its_queue_wait_and_evictions() -> None:
    """A cluster run queued through Kueue and preempted: run.json's `queue_wait_seconds` and
    `evictions` in the headline's Queue row (every format), its end reason `preempted`."""
    queued = {"mode": "cluster", "queue_wait_seconds": 95, "evictions": 1}
    history = run_history([sub(1, 60, 2.0)], end_reason="preempted", ended=120, extra=queued)
    h = headline_of(history)
    assert (h.queue_wait_s, h.evictions, h.end_reason) == (95, 1, "preempted")
    assert h.reason is not None and h.reason.endswith("run ended: preempted")
    report = build_report(history)
    assert (report.run.queue_wait_seconds, report.run.evictions) == (95, 1)
    line = "waited 95 s for Kueue's admission (not charged to the budget); evicted 1 time"
    assert f"| Queue | {line} |" in render_markdown(report)
    assert f"  Queue                {line}" in render_text(report)
    page = render_html(report, "t.png")
    assert "<td>Queue</td>" in page and "waited 95 s for Kueue" in page and "evicted 1 time" in page
    # Queued, never evicted; a run that was not queued has no Queue row.
    never = run_history([], extra={"queue_wait_seconds": 0, "evictions": 0})
    assert (headline_of(never).queue_wait_s, headline_of(never).evictions) == (0, 0)
    row = "| Queue | waited 0 s for Kueue's admission (not charged to the budget); never evicted |"
    assert row in render_markdown(build_report(never))
    plain = build_report(run_history([]))
    assert plain.headline is not None and plain.headline.queue_wait_s is None
    assert "| Queue |" not in render_markdown(plain) and "Queue" not in render_text(plain)


def test_all_invalid_names_the_most_frequent_error() -> None:
    subs = [sub(1, 60, None, "model could not be loaded"), sub(2, 90, None, "model could not be loaded")]
    subs.append(sub(3, 120, None, "out of memory"))
    h = headline_of(run_history(subs, end_reason="failed"))
    assert h.verdict == NO_VALID and h.best_score is None
    assert (
        h.reason
        == "all 3 submissions were invalid (most often: model could not be loaded); run ended: failed"
    )
    assert (h.valid_submissions, h.total_submissions) == (0, 3)


# --- evaluation size, budget, protocol, integrity ----------------------------------------------


def test_a_limited_evaluation_is_shown_as_such() -> None:
    limited = build_report(run_history([sub(1, 60, 40.0, n=100)], limit=100, n=100))
    assert limited.headline is not None
    assert (limited.headline.eval_items, limited.headline.eval_limit) == (100, 100)
    line = (
        "| Evaluated on | 100 held-out items (evaluation.limit 100: a subset, not the whole held-out set) |"
    )
    assert line in render_markdown(limited)
    assert "100 held-out items (evaluation.limit 100" in render_text(limited)
    full = build_report(run_history([sub(1, 60, 40.0)]))
    assert "| Evaluated on | 500 held-out items (the whole held-out set) |" in render_markdown(full)


def test_budget_used_is_a_percentage_of_the_wall_clock_budget() -> None:
    report = build_report(run_history([sub(1, 60, 40.0)], ended=421.6, budget=400))
    assert report.headline is not None
    assert (report.headline.budget_used_pct, report.headline.budget_s, report.headline.used_s) == (
        105.4,
        400.0,
        421.6,
    )
    md = render_markdown(report)
    assert (
        "| Budget used | 105.4 % of 400 s (wall-clock: 421.6 s from the agent's start to the run's end) |"
        in md
    )
    assert "| Evaluation protocol | reference |" in md and "| End reason | completed |" in md
    assert "Budget used | 1.0" not in md  # the bare ratio is gone


def test_integrity_is_shown_for_a_clean_run_too() -> None:
    clean = headline_of(run_history([sub(1, 60, 40.0), sub(2, 70, 41.0)], checked=True))
    assert (clean.sandboxed, clean.results_checked, clean.results_verified, clean.results_tampered) == (
        True,
        True,
        3,
        0,
    )  # the baseline's result counts
    md = render_markdown(build_report(run_history([sub(1, 60, 40.0), sub(2, 70, 41.0)], checked=True)))
    assert "| Integrity | ✓ sandboxed (bubblewrap 0.8.0); 3 results sealed and verified |" in md
    unchecked = render_markdown(build_report(run_history([sub(1, 60, 40.0)])))
    assert "| Integrity | ? sandboxed (bubblewrap 0.8.0); not verified here (no run key" in unchecked
    bare = render_markdown(build_report(run_history([sub(1, 60, 40.0)], sandbox="none", checked=True)))
    assert "| Integrity | ✗ NOT sandboxed (--no-sandbox); 2 results sealed and verified |" in bare


def test_sealed_and_tampered_results_from_a_store(tmp_path: Path) -> None:
    """With the run's key, sealed results are verified and an unsealed one is counted as failed."""
    w = sample_run(tmp_path)
    key = new_key()
    for index in (0, 1, 2, 3, 4):  # submission 5 has no result; leave 4 unsealed below
        data = w.store.get_json(w.layout.submission_result(index))
        if index != 4:
            seal_result(w.store, w.layout, index, ResultRecord.from_json(data), key)
    h = build_report(load_history(w.store, w.layout, run_key=key)).headline
    assert h is not None and h.results_checked
    assert (h.results_sealed, h.results_verified, h.results_tampered) == (4, 4, 1)
    # Without the key (a report rebuilt later) the seals are counted but not verified.
    unchecked = render_markdown(build_report(load_history(w.store, w.layout)))
    assert (
        "| Integrity | ? sandbox not recorded; 4 results sealed, not verified here (no run key" in unchecked
    )
    assert h.results_tampered and "1 result(s) FAILED their integrity check" in render_markdown(
        build_report(load_history(w.store, w.layout, run_key=key))
    )


# --- one time base -----------------------------------------------------------------------------


def submit_span(seconds: float, index: int) -> list[dict[str, Any]]:
    ns = int(T0.timestamp() * 1e9)
    root: dict[str, Any] = {"trace_id": "t1", "span_id": "r", "name": "benchrun", "service": "a2rl-runner"}
    root |= {"start_time_unix_nano": ns, "end_time_unix_nano": ns + 400 * 10**9}
    step: dict[str, Any] = {
        "trace_id": "t1",
        "span_id": "s",
        "parent_span_id": "r",
        "name": "submission",
        "service": "recorder",
    }
    step |= {"attributes": {"a2rl.submission.index": index}, "status": "UNSET"}
    step |= {
        "start_time_unix_nano": ns + int(seconds * 1e9),
        "end_time_unix_nano": ns + int((seconds + 5) * 1e9),
    }
    return [root, step]


def test_a_submission_at_180_s_reads_the_same_in_the_submissions_table_and_the_timeline() -> None:
    report = build_report(run_history([sub(1, 180, 40.0)]), submit_span(180, 1))
    md = render_markdown(report)
    assert clock(180) == "3:00"
    assert "| 1 | 3:00 | 40.0 | yes | 40.0 |" in md
    timeline = md[md.index("## Timeline") :]
    assert "| submission #1 | recorder | 3:00 | 5.0 | 0 |" in timeline
    # Nothing failed: OpenTelemetry's UNSET is not shown, nor a status column.
    assert "UNSET" not in md and "| step | service | start | duration s | spans under it |" in timeline
    page = render_html(report)
    assert "<tr><td>1</td><td>3:00</td><td>40.0</td>" in page
    assert "<tr><td>submission #1</td><td>recorder</td><td>3:00</td>" in page


def test_a_failed_step_brings_the_status_column_back() -> None:
    spans = submit_span(180, 1)
    spans[1]["status"] = "ERROR"
    md = render_markdown(build_report(run_history([sub(1, 180, 40.0)]), spans))
    assert "| step | service | start | duration s | status | spans under it |" in md
    assert "| submission #1 | recorder | 3:00 | 5.0 | ERROR | 0 |" in md


def test_the_clock_format() -> None:
    assert [clock(s) for s in (0, 59.6, 180, -20, 3725)] == ["0:00", "1:00", "3:00", "-0:20", "1:02:05"]
    assert clock(None) == "-"


# --- the plot's axes ---------------------------------------------------------------------------


def test_the_plot_spans_the_metric_range_and_the_budget() -> None:
    """Scores 0.19 to 0.21 on a 0-100 metric stay small; the x-axis ends at the budget, not the run."""
    history = run_history([sub(1, 60, 0.19), sub(2, 120, 0.21)], baseline=0.2, ended=200.0, budget=400)
    ax = trajectory_figure(history).axes[0]
    low, high = ax.get_ylim()
    assert low <= 0.0 and 100.0 <= high < 110.0
    assert ax.get_xlim() == (0.0, 400.0)
    assert ax.get_ylabel() == "exact match (%)"
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert "3:00" in labels or "5:00" in labels  # ticks on the page's time base (m:ss)


def test_the_plot_goes_past_the_budget_when_the_run_did() -> None:
    ax = trajectory_figure(run_history([sub(1, 410, 10.0)], ended=421.6, budget=400)).axes[0]
    assert ax.get_xlim() == (0.0, 421.6)


def test_an_unknown_task_autoscales() -> None:
    history = run_history([sub(1, 60, 0.19), sub(2, 120, 0.21)])
    record = history.run.record.model_copy(update={"task": "no-such-task"})
    other = RunHistory(
        run=RunInfo.from_json("local/demo-0123456789ab", record.to_json()),
        baseline=history.baseline,
        submissions=history.submissions,
        revisions=(),
    )
    assert trajectory_figure(other).axes[0].get_ylim()[1] < 2.0  # the baseline 1.0 and the scores


# --- the terminal ------------------------------------------------------------------------------


def test_terminal_view_is_plain_text_with_the_headline_and_submissions() -> None:
    report = build_report(run_history([sub(1, 180, 0.0)], baseline=1.0, end_reason="deadline_exceeded"))
    text = render_text(report)
    assert text.splitlines()[2].startswith("▼ WORSE: best 0.0 (#1) is 1.0 below the baseline 1.0")
    assert "|" not in text and "**" not in text and "<" not in text  # no Markdown or HTML
    assert "  Budget used          105.4 % of 400 s" in text
    assert "  End reason           deadline_exceeded" in text
    rows = text[text.index("Submissions") :].splitlines()
    assert rows[1].split() == ["#", "time", "score", "valid", "best", "so", "far", "model", "code", "rev"]
    assert rows[3].split()[:5] == ["1", "3:00", "0.0", "yes", "0.0"]


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def test_cli_forms(store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = sample_run(tmp_path, store)
    args = ["--store", str(store.root)]
    assert main(["report", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Run report: demo") and "▲ IMPROVED" in out and "| " not in out
    assert main(["report", "--md", *args]) == 0
    assert capsys.readouterr().out.startswith("# Run report: demo")
    assert main(["report", "--html", *args]) == 0
    page = Path(capsys.readouterr().out.strip())
    assert page == store.root / w.layout.report_dir / "report.html" and page.read_text().startswith(
        "<!DOCTYPE"
    )
    assert (page.parent / "trajectory.png").exists()


def test_cli_open_without_an_opener_prints_the_path(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from a2rl_cli import report_cmd

    w = sample_run(tmp_path, store)
    monkeypatch.setattr(report_cmd, "opener", lambda: None)
    assert main(["report", "--open", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out.strip()
    page = store.root / w.layout.report_dir / "report.html"
    assert out.startswith("no opener found") and out.endswith(str(page))
    opened: list[list[str]] = []

    class Popen:
        def __init__(self, argv: list[str], **_kw: Any) -> None:
            opened.append(argv)

    monkeypatch.setattr(report_cmd, "opener", lambda: ["xdg-open"])
    monkeypatch.setattr(report_cmd.subprocess, "Popen", Popen)
    assert main(["report", "--open", "--store", str(store.root)]) == 0
    assert opened == [["xdg-open", str(page)]]
    assert capsys.readouterr().out.startswith("opened ")


def test_cli_forms_are_exclusive(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample_run(tmp_path, store)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--md", "--json", "--store", str(store.root)])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_stored_report_without_a_headline_is_rebuilt(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = sample_run(tmp_path, store)
    assert main(["report", "--json", "--store", str(store.root)]) == 0
    capsys.readouterr()
    key = f"{w.layout.report_dir}/report.json"
    old = store.get_json(key)
    del old["headline"]
    store.put_json(key, old)
    assert main(["report", "--store", str(store.root)]) == 0
    assert "▲ IMPROVED" in capsys.readouterr().out
    assert "headline" in store.get_json(key)


def test_a_report_written_before_the_headline_still_renders_its_numbers() -> None:
    report = build_report(run_history([sub(1, 60, 40.0)]))
    old = report.model_copy(update={"headline": None})
    md, text = render_markdown(old), render_text(old)
    assert "## Headline" not in md and "| Best score | 40.0 (submission 1) |" in md
    assert "| End reason | completed |" in md and "Best score" in text
