"""`a2rl campaign run FILE`: run every run of a BenchCampaign on this machine (docs/campaigns.md).

The campaign is expanded into its planned runs (`a2rl.campaign.matrix.expand`: deterministic
names, one label naming the campaign); each planned run is one `a2rl run` of a generated BenchRun
file, a child process in a session of its own, so that a crashed run never takes the campaign
with it and a terminal's Ctrl-C reaches the campaign alone, which stops each child with SIGTERM (the
child records its run as `interrupted`, as `a2rl run` does for Ctrl-C). Each child's output goes
to its log file, `$A2RL_HOME/campaigns/<campaign>/logs/<run>.log`; the terminal gets the
campaign's own lines.

A second invocation resumes: a planned run that has a finished record in the store (run.json
with the campaign's label and the planned name, `ended_at` set, `end_reason` not `interrupted`)
is skipped; an interrupted run, or one that never ended (its runner killed), runs again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from a2rl_grader.campaign_report import write_campaign_report, write_store_index
from a2rl_tasks import TASKS

from a2rl import paths
from a2rl.api.benchcampaign import BenchCampaign
from a2rl.api.load import load_benchcampaign
from a2rl.campaign.matrix import CampaignError, PlannedRun, cells_of, expand, run_labels
from a2rl.campaign.rollup import Rollup, best_cell_line, rollup
from a2rl.campaign.store_outcomes import (
    campaign_document,
    collect_outcomes,
    finished_runs,
    write_campaign,
)
from a2rl.constants import API_GROUP_VERSION, BENCHRUN_KIND, LOCAL_NAMESPACE
from a2rl.contracts import env as envs
from a2rl.errors import A2rlError, InvalidDocumentError
from a2rl.launch import start_a2rl
from a2rl.records.campaign_report import CampaignReportRecord
from a2rl.runs import RunInfo
from a2rl.store.base import ObjectStore
from a2rl.store.layout import CampaignLayout
from a2rl.store.local import LocalStore
from a2rl.store.open import open_store
from a2rl_runner.printing import StatusLine, fmt_duration
from a2rl_runner.run import EXIT_FAILED, EXIT_INTERRUPTED, open_writable_store

#: `a2rl run`'s exit code for a user mistake: the campaign stops starting runs.
EXIT_USAGE = 2
#: How often the campaign looks at its children (seconds).
POLL_S = 0.5
#: Off a terminal, the progress line repeats at least this often while nothing changes.
PLAIN_EVERY_S = 60.0
#: Rough time of a run beyond its agent's budget (baseline when not cached, wrap-up, report).
RUN_OVERHEAD_S = 60.0


def campaign_dir(name: str) -> Path:
    """The campaign's files on this machine: generated BenchRun files, child logs, the lock."""
    return paths.home() / "campaigns" / name


def load_campaign(path: str | Path) -> BenchCampaign:
    """The validated BenchCampaign in the file (every problem on one `A2rlError` line)."""
    try:
        return load_benchcampaign(Path(path), TASKS)
    except InvalidDocumentError as exc:
        raise A2rlError(f"{exc.source}: {'; '.join(exc.problems)}") from None


@dataclass
class CampaignPlan:
    source: str
    campaign: BenchCampaign
    planned: list[PlannedRun]
    store: ObjectStore
    layout: CampaignLayout
    #: Planned name → its finished record (skipped).
    done: dict[str, RunInfo]

    @property
    def name(self) -> str:
        return self.campaign.metadata.name

    @property
    def todo(self) -> list[PlannedRun]:
        return [run for run in self.planned if run.name not in self.done]


def plan_campaign(path: str | Path, *, store_uri: str | None, writable: bool = True) -> CampaignPlan:
    """Load and expand the campaign, check what can be checked before anything starts (each
    run's agent command, the store, a campaign of the same name with another template or other
    axes), and find the runs already done. Every mistake is one `A2rlError` line."""
    campaign = load_campaign(path)
    name = campaign.metadata.name
    try:
        planned = expand(name, campaign.spec)
    except CampaignError as exc:
        raise A2rlError(f"{path}: {exc}") from None
    for run in planned:
        if run.spec.agent.stack is None:
            try:
                envs.resolve_agent_argv(list(run.spec.agent.command), list(run.spec.agent.args))
            except A2rlError as exc:
                raise A2rlError(f"{path}: cell {run.cell.label}: {exc}") from None
    uri = store_uri or campaign.spec.template.store.uri
    store = open_writable_store(uri) if writable else open_store(uri)
    layout = CampaignLayout(LOCAL_NAMESPACE, name)
    _check_same_campaign(store, layout, campaign)
    done = finished_runs(store, LOCAL_NAMESPACE, name)
    return CampaignPlan(str(path), campaign, planned, store, layout, done)


def _axes_of(spec: dict[str, Any]) -> tuple[Any, Any]:
    matrix = dict(spec.get("matrix") or {})
    matrix.pop("seeds", None)
    return spec.get("template"), matrix


def _check_same_campaign(store: ObjectStore, layout: CampaignLayout, campaign: BenchCampaign) -> None:
    """Refuse a campaign whose name the store already holds with another template or other axes:
    its finished runs carry the same names and would be taken for this campaign's. Seeds, repeats
    and `maxConcurrentRuns` may change (a campaign grows by seeds)."""
    try:
        stored = store.get_json(layout.campaign_json)
    except (A2rlError, ValueError):
        return
    spec = stored.get("spec") if isinstance(stored, dict) else None
    if not isinstance(spec, dict):
        return
    if _axes_of(spec) != _axes_of(campaign_document(campaign)["spec"]):
        raise A2rlError(
            f"campaign {layout.name!r} in store {store.uri} was run with another template or other "
            "matrix axes (only seeds, repeats and maxConcurrentRuns may change): its runs would be "
            "mixed with these; give this campaign another metadata.name, or another --store"
        )


# --- the dry run ----------------------------------------------------------------------------------


def _run_budget_s(run: PlannedRun) -> float:
    budget = run.spec.budget
    return float(budget.wall_time_seconds + budget.grace_seconds) + RUN_OVERHEAD_S


def plan_lines(plan: CampaignPlan, parallel: int) -> list[str]:
    """What `a2rl campaign run --dry-run` prints: the runs by cell, which are skipped, the time."""
    spec = plan.campaign.spec
    cells = cells_of(plan.planned)
    todo = plan.todo
    lines = [
        f"campaign    {plan.name} (dry run: nothing started, nothing written)",
        f"store       {plan.store.uri}",
        f"runs        {len(plan.planned)} in {len(cells)} cell(s) (seeds {spec.matrix.seeds}, repeats "
        f"{spec.repeats}): {len(plan.done)} finished already (skipped), {len(todo)} to run, "
        f"{parallel} at a time",
    ]
    for cell in cells:
        runs = [run for run in plan.planned if run.cell.key == cell.key]
        lines.append(f"cell        {cell.label} ({cell.key}): {len(runs)} run(s)")
        for run in runs:
            done = plan.done.get(run.name)
            state = f"finished ({done.prefix}, {done.end_reason}): skipped" if done else "to run"
            lines.append(f"  run       {run.name}  seed {run.seed}  {state}")
    total = sum(_run_budget_s(run) for run in todo)
    longest = max((_run_budget_s(run) for run in todo), default=0.0)
    estimate = max(total / max(parallel, 1), longest)
    lines.append(
        f"wall time   about {fmt_duration(estimate)} at most ({len(todo)} run(s) of up to "
        f"{fmt_duration(longest)} each: budget, grace and about {fmt_duration(RUN_OVERHEAD_S)} of "
        f"baseline and report; {parallel} at a time)"
    )
    return lines


# --- running --------------------------------------------------------------------------------------


@dataclass
class _Child:
    run: PlannedRun
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    stops: int = 0


@dataclass
class CampaignResult:
    report: CampaignReportRecord | None
    report_location: str | None
    index_location: str | None
    exit_status: int
    interrupted: bool = False
    #: `a2rl run`'s one-line error when a child refused its run (a user mistake).
    usage_error: str | None = None
    crashed: list[str] = field(default_factory=list)


def run_document(campaign: str, run: PlannedRun) -> dict[str, Any]:
    """The BenchRun a planned run is: its name, the campaign's labels, its spec."""
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": BENCHRUN_KIND,
        "metadata": {"name": run.name, "labels": run_labels(campaign, run.cell)},
        "spec": run.spec.to_wire(),
    }


def location(store: ObjectStore, key: str) -> str:
    """A key as a path for a directory store, else its URL."""
    if isinstance(store, LocalStore):
        return str(store.root.joinpath(*key.split("/")))
    return store.url_for(key)


@contextlib.contextmanager
def _exclusive(folder: Path, name: str) -> Iterator[None]:
    """One `a2rl campaign run` of a campaign at a time on this machine."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise A2rlError(
                f"campaign {name!r} is already being run on this machine (another `a2rl campaign run`)"
            ) from None
        yield


@contextlib.contextmanager
def _signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP stop the campaign as Ctrl-C does (its children are in sessions of their
    own: only the campaign hears the terminal)."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        raise KeyboardInterrupt

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_signal)}
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Campaign:
    def __init__(self, plan: CampaignPlan, parallel: int, status: StatusLine) -> None:
        self.plan = plan
        self.parallel = parallel
        self.status = status
        self.folder = campaign_dir(plan.name)
        self.running: list[_Child] = []
        self.usage_error: str | None = None
        self.crashed: list[str] = []
        self.rollup: Rollup | None = None

    def say(self, line: str) -> None:
        self.status.say(line)

    # -- children --

    def start(self, run: PlannedRun) -> None:
        files, logs = self.folder / "runs", self.folder / "logs"
        files.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        path = files / f"{run.name}.yaml"
        path.write_text(json.dumps(run_document(self.plan.name, run), indent=2) + "\n", encoding="utf-8")
        log = logs / f"{run.name}.log"
        with log.open("ab") as out:
            out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} a2rl run {path}\n".encode())
            out.flush()
            proc = start_a2rl(["run", str(path), "--store", self.plan.store.uri], stdout=out, stderr=out)
        self.running.append(_Child(run, proc, log, time.monotonic()))
        self.say(f"[campaign] started {run.name} ({run.cell.label}, seed {run.seed}); log {log}")

    def reap(self) -> list[tuple[_Child, int]]:
        ended = [(c, code) for c in self.running if (code := c.proc.poll()) is not None]
        for child, _code in ended:
            self.running.remove(child)
        return ended

    def stop_all(self) -> None:
        """SIGTERM to each running child (itself, not its group: it stops its agent and records the
        run); at the third request SIGKILL to the child's group."""
        for child in self.running:
            child.stops += 1
            with contextlib.suppress(ProcessLookupError):
                if child.stops <= 2:
                    child.proc.send_signal(signal.SIGTERM)
                else:
                    os.killpg(child.proc.pid, signal.SIGKILL)

    # -- what the store says --

    def refresh(self) -> Rollup:
        stored = collect_outcomes(self.plan.store, LOCAL_NAMESPACE, self.plan.name, self.plan.planned)
        self.rollup = rollup(self.plan.planned, {name: s.outcome for name, s in stored.items()})
        return self.rollup

    def ended(self, child: _Child, code: int) -> None:
        run = child.run
        took = fmt_duration(time.monotonic() - child.started)
        stored = collect_outcomes(self.plan.store, LOCAL_NAMESPACE, self.plan.name, [run]).get(run.name)
        if code == EXIT_USAGE and (stored is None or stored.info.ended_at is None):
            self.usage_error = _last_error(child.log) or f"a2rl run exited 2; see {child.log}"
            self.say(f"[campaign] {run.name} refused: {self.usage_error}")
            return
        if stored is None or stored.info.ended_at is None:
            self.crashed.append(run.name)
            self.say(
                f"[campaign] {run.name} ended without recording its end (exit code {code}); see {child.log}"
            )
            return
        outcome = stored.outcome
        figures = (
            f"baseline {_num(outcome.baseline_score)}, best {_num(outcome.best_score)}, "
            f"improvement {_num(outcome.improvement, signed=True)}"
        )
        self.say(f"[campaign] {run.name} ended after {took}: {stored.info.end_reason}; {figures}")

    def progress(self) -> tuple[str, str]:
        result = self.rollup or self.refresh()
        now = time.monotonic()
        names = ", ".join(f"{c.run.name} {fmt_duration(now - c.started)}" for c in self.running)
        key_names = ", ".join(c.run.name for c in self.running)
        best = best_cell_line(result)
        head = f"[campaign] {result.finished}/{result.counts.total} done"
        tail = f", best so far {best}" if best else ""
        return (
            f"{head} ({len(self.running)} running: {names or 'none'}){tail}",
            f"{head} {key_names}{tail}",
        )

    def show_progress(self) -> None:
        self.status.update(*self.progress())

    # -- the loop --

    def run(self, todo: Sequence[PlannedRun]) -> bool:
        """Run `todo`; False when interrupted (the children were stopped and have ended)."""
        pending = list(todo)
        try:
            while pending or self.running:
                while pending and len(self.running) < self.parallel and self.usage_error is None:
                    self.start(pending.pop(0))
                    self.show_progress()
                if self.usage_error is not None and not self.running:
                    break
                time.sleep(POLL_S)
                ended = self.reap()
                for child, code in ended:
                    self.ended(child, code)
                if ended:
                    self.refresh()
                self.show_progress()
            return True
        except KeyboardInterrupt:
            self.interrupt()
            return False

    def interrupt(self) -> None:
        self.status.clear()
        if self.running:
            names = ", ".join(c.run.name for c in self.running)
            self.say(
                f"[campaign] interrupted: stopping {len(self.running)} run(s) ({names}); they record "
                "`interrupted` and `a2rl campaign run` again resumes (Ctrl-C again skips their wrap-up)"
            )
        else:
            self.say("[campaign] interrupted")
        self.stop_all()
        while self.running:
            try:
                time.sleep(POLL_S)
                for child, code in self.reap():
                    self.say(f"[campaign] {child.run.name} stopped (exit code {code})")
            except KeyboardInterrupt:
                self.stop_all()


def _num(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def _last_error(log: Path) -> str | None:
    """The last `a2rl: error: …` line of a child's log (what `a2rl run` says of a user mistake)."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    errors = [line for line in lines if line.startswith("a2rl: error: ")]
    return errors[-1].removeprefix("a2rl: error: ") if errors else None


def write_reports(plan: CampaignPlan) -> tuple[CampaignReportRecord, str, str]:
    """The campaign's report and the store's index page; (report, its location, the index's)."""
    report = write_campaign_report(plan.store, plan.campaign, LOCAL_NAMESPACE)
    write_store_index(plan.store)
    return (
        report,
        location(plan.store, f"{plan.layout.report_dir}/report.html"),
        location(plan.store, "index.html"),
    )


def run_campaign(
    plan: CampaignPlan,
    *,
    parallel: int = 1,
    stream: IO[str] | None = None,
    report: Callable[[CampaignPlan], tuple[CampaignReportRecord, str, str]] = write_reports,
) -> CampaignResult:
    """Run the plan's runs not done yet, at most `parallel` at once, then write the campaign's
    report. Exit status: 0 when every run finished and none failed, 1 when one failed (or ended
    without a record), 2 when a child refused its run (a user mistake: no more runs are started),
    130 when interrupted."""
    status = StatusLine(stream, plain_every_s=PLAIN_EVERY_S)
    todo = plan.todo
    with _exclusive(campaign_dir(plan.name), plan.name), _signals_as_interrupt():
        write_campaign(plan.store, plan.layout, plan.campaign)
        cells = len(cells_of(plan.planned))
        if not todo:
            status.say(
                f"[campaign] {plan.name}: nothing to do: all {len(plan.planned)} runs finished already "
                "(skipped); writing the report"
            )
        else:
            status.say(
                f"[campaign] {plan.name}: {len(plan.planned)} runs in {cells} cell(s); "
                f"{len(plan.done)} finished already (skipped), {len(todo)} to run, at most {parallel} "
                f"at a time; store {plan.store.uri}"
            )
        campaign = _Campaign(plan, parallel, status)
        completed = campaign.run(todo) if todo else True
        status.clear()
        try:
            record, where, index = report(plan)
        except KeyboardInterrupt:
            record, where, index = None, None, None
        result = campaign.refresh()
    if not completed:
        code = EXIT_INTERRUPTED
    elif campaign.usage_error is not None:
        code = EXIT_USAGE
    elif result.counts.failed or campaign.crashed or not result.done:
        code = EXIT_FAILED
    else:
        code = 0
    return CampaignResult(
        report=record,
        report_location=where,
        index_location=index,
        exit_status=code,
        interrupted=not completed,
        usage_error=campaign.usage_error,
        crashed=campaign.crashed,
    )
