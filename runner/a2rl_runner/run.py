"""`run_benchrun`: one BenchRun end to end on this machine (local mode).

Prepare (validate, stage data, resolve the base model, open the store, score the baseline, build
the workspace) → start the recorder (grading API) → run the agent under its budget → stop the
recorder (it drains in-flight evaluations and records the final code) → run.json, logs, report,
summary. Ctrl-C (or SIGTERM) stops the agent and the recorder cleanly and still records the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from a2rl_grader.report import write_report
from a2rl_grader.sandbox import baseline_box
from a2rl_tasks import TASKS, get_task
from a2rl_tasks.staging import stage_cached

from a2rl import paths
from a2rl.api.benchrun import BenchRun
from a2rl.api.load import load_benchrun
from a2rl.constants import (
    BASELINE_INDEX,
    COMPONENT_RUNNER,
    ENV_RECORDER_DRAIN_TIMEOUT,
    ENV_RECORDER_SOCKET,
    LOCAL_NAMESPACE,
    WS_DESCRIPTION,
    WS_INSTRUCTIONS,
)
from a2rl.contracts import env as envs
from a2rl.errors import A2rlError
from a2rl.eval_sandbox import eval_timeout_s
from a2rl.integrity import new_key
from a2rl.launch import run_a2rl
from a2rl.models.resolve import resolve_base_model
from a2rl.records.base import load_record, write_record
from a2rl.records.report import ReportRecord
from a2rl.records.result import ResultRecord, checked_result, seal_result, tampered_line
from a2rl.records.run import run_record
from a2rl.scores import Scored, ScoreSummary
from a2rl.scores import summarize as summarize_scores
from a2rl.store.base import ObjectStore
from a2rl.store.cas import hash_tree
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from a2rl.store.open import open_store
from a2rl.tracing import ATTR_SUBMISSION_INDEX, Tracing, current_trace_env, installed, merge_traces, span
from a2rl.workspace import (
    Workspace,
    WorkspaceRules,
    build_workspace,
    sanitize_model_name,
    update_run_meta,
)
from a2rl_runner.agent_stack import StackRun
from a2rl_runner.driver_usage import driver_line, metered, read_driver_summary
from a2rl_runner.printing import (
    StatusLine,
    evaluating,
    fmt_duration,
    fmt_score,
    submissions_status,
    summary_lines,
)
from a2rl_runner.sandbox.limits import AgentLimits, LimitWatch, agent_limits, contain_agent
from a2rl_runner.sandbox.limits import describe as describe_limits
from a2rl_runner.sandbox.policy import AGENT_HOME
from a2rl_runner.sandbox.setup import Bubblewrap, RunSandbox, check_bubblewrap
from a2rl_runner.services import RecorderProcess, free_port, last_line
from a2rl_runner.supervisor import (
    COMPLETED,
    DEADLINE_EXCEEDED,
    FAILED,
    INTERRUPTED,
    NO_SUBMISSION,
    AgentLaunch,
    AgentOutcome,
    AgentSupervisor,
    EndReason,
)

#: How often the status line is refreshed: on a terminal (in place), elsewhere (a line is printed
#: only when the status changed or `PLAIN_EVERY_S` passed; `StatusLine`).
STATUS_EVERY_TTY_S = 1.0
STATUS_EVERY_PLAIN_S = 5.0
PLAIN_EVERY_S = 60.0
#: run.json's `agent_last_words`: at most this many of the last non-empty lines of agent.log, each
#: cut to LAST_WORDS_LINE_CHARS, read from at most LAST_WORDS_TAIL_BYTES at the log's end.
LAST_WORDS_LINES = 5
LAST_WORDS_LINE_CHARS = 300
LAST_WORDS_TAIL_BYTES = 64 * 1024
#: Exit codes of `a2rl run` (docs/cli.md).
EXIT_FAILED = 1
EXIT_NO_IMPROVEMENT = 3
EXIT_INTERRUPTED = 130
#: The recorder bounds its own drain with one deadline (A2RL_RECORDER_DRAIN_TIMEOUT, default 1800 s:
#: an evaluation in flight runs here); the runner kills it only if it overruns that by this margin.
RECORDER_DRAIN_DEFAULT_S = 1800.0
RECORDER_STOP_MARGIN_S = 120.0
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LOG_COMPONENTS = ("baseline", "recorder", "agent", "gateway")
#: run.json's `sandbox` when the agent ran unisolated.
NO_SANDBOX = "none"
NO_SANDBOX_WARNING = (
    "[a2rl] warning: --no-sandbox: the agent runs as you, unisolated: it can read the held-out data, "
    "the store and your files, and its processes may outlive the run. Never for untrusted agents."
)


@dataclass(frozen=True)
class RunOutcome:
    name: str
    uid: str
    prefix: str
    store_uri: str
    workspace: Path
    end_reason: str
    agent_exit_code: int | None
    duration_s: float
    interrupted: bool
    scores: ScoreSummary
    report: ReportRecord | None
    report_uri: str | None

    @property
    def exit_status(self) -> int:
        """Exit code of `a2rl run`: 0 when the agent completed, used its whole budget or made no
        submission (`no_submission`), 1 when it failed, 130 when the run was interrupted."""
        if self.interrupted or self.end_reason == INTERRUPTED:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.end_reason == FAILED else 0

    @property
    def improved(self) -> bool:
        """A valid submission scored above the baseline (False when the baseline has no score)."""
        gain = self.scores.improvement
        return self.scores.valid_submissions > 0 and gain is not None and gain > 0


@dataclass
class _Prepared:
    run: BenchRun
    layout: RunLayout
    store: ObjectStore
    task_name: str
    evaluator_version: str
    model_dir: Path
    model_digest: str
    argv: list[str]
    logs_dir: Path
    #: The staged data (set once staged: run.json is written before).
    heldout_dir: Path = Path()
    train_dir: Path = Path()
    #: The run's integrity key (`a2rl.integrity`): held by the runner and, through a pipe, the
    #: recorder only; results and the baseline are sealed with it and checked on every read.
    run_key: bytes | None = field(default=None, repr=False)
    #: The local sandbox's bubblewrap; None with `--no-sandbox`.
    bwrap: Bubblewrap | None = None
    #: The agent stack (`spec.agent.stack`), installed, and its driver; None for a `command` agent.
    stack: StackRun | None = None
    baseline: ResultRecord | None = None
    workspace: Workspace | None = None
    #: The agent's limits and their mechanism (`a2rl_runner.sandbox.limits.describe`), once set.
    limits_label: str | None = None
    #: When the agent's clock started (epoch seconds); None before.
    started_at: float | None = None
    #: The agent's exit status, once it ended.
    agent_exit_code: int | None = None

    @property
    def sandbox_label(self) -> str:
        return self.bwrap.version if self.bwrap is not None else NO_SANDBOX


def _ticking(
    say: Callable[[str], None], status: Callable[[], tuple[str, str | None]]
) -> contextlib.AbstractContextManager[None]:
    """`StatusLine.ticking` when `say` is the runner's status line, else nothing."""
    if isinstance(say, StatusLine):
        return say.ticking(status, STATUS_EVERY_TTY_S if say.tty else STATUS_EVERY_PLAIN_S)
    return contextlib.nullcontext()


def _still(what: str, since: float) -> Callable[[], tuple[str, str | None]]:
    """The status of a blocking phase: `[a2rl] <what> (1m05s)`; its key does not change."""
    return lambda: (f"[a2rl] {what} ({fmt_duration(time.monotonic() - since)})", what)


# --- entry point ---------------------------------------------------------------------------------
def run_benchrun(
    path_or_model: str | Path | BenchRun,
    *,
    store_uri: str | None = None,
    name: str | None = None,
    progress: bool = True,
    sandbox: bool = True,
) -> RunOutcome:
    """Run a BenchRun (a YAML file or a validated model) locally and return what happened.

    The agent runs in the local sandbox (`a2rl_runner.sandbox`) unless `sandbox` is False.
    Raises `A2rlError` for every user mistake before anything is started."""
    say = StatusLine(enabled=progress, plain_every_s=PLAIN_EVERY_S)
    run = load(path_or_model)
    # One trace per run: the root span "benchrun" (child of A2RL_TRACEPARENT when that is set).
    tracing = Tracing(COMPONENT_RUNNER, new_trace=True)
    prep: _Prepared | None = None
    recorded: list[_Prepared] = []  # the run, once its run.json is in the store
    try:
        with _sigterm_as_interrupt(), installed(tracing), tracing.span("benchrun") as root:
            try:
                prep = prepare(
                    run, store_uri=store_uri, name=name, say=say, sandbox=sandbox, recorded=recorded.append
                )
                tracing.bind(prep.store, prep.layout.prefix)
                root.set_attributes({"a2rl.run.name": prep.layout.name, "a2rl.run.uid": prep.layout.uid})
                return execute(prep, say=say, progress=progress)
            except KeyboardInterrupt:
                if not recorded:
                    say("[a2rl] interrupted before the run was recorded: nothing was written to the store")
                    raise
                prep = recorded[0]
                return _interrupted(prep, say)
    finally:
        tracing.shutdown()
        if prep is not None:  # the report merged the spans it saw; add the root and the report's
            with contextlib.suppress(Exception):
                merge_traces(prep.store, prep.layout)


def load(path_or_model: str | Path | BenchRun) -> BenchRun:
    if isinstance(path_or_model, BenchRun):
        return path_or_model

    return load_benchrun(Path(path_or_model), TASKS)


def check_run_name(name: str) -> str:
    if len(name) > 63 or not _NAME.match(name):
        raise A2rlError(
            f"invalid run name {name!r}: use lower-case letters, digits and '-', at most 63 characters"
        )
    return name


def open_writable_store(uri: str | None) -> ObjectStore:
    """The store at `uri`, checked writable with a probe object."""

    shown = uri or paths.default_store_uri()
    try:
        store = open_store(uri)
    except A2rlError as exc:
        if not (shown.startswith(("s3://", "S3://"))) and "unsupported" not in str(exc):
            raise A2rlError(f"store path not writable: {shown} ({exc})") from None
        raise
    probe = f".a2rl-write-probe-{secrets.token_hex(4)}"
    try:
        store.put_bytes(probe, b"ok")
        store.delete(probe)
    except (OSError, A2rlError) as exc:
        raise A2rlError(f"store path not writable: {shown} ({exc})") from None
    except Exception as exc:  # S3 client errors (access denied, no such bucket, …)
        raise A2rlError(f"store path not writable: {shown} ({type(exc).__name__}: {exc})") from None
    return store


# --- preparation: everything that can fail because of the user's input --------------------------
def prepare(
    run: BenchRun,
    *,
    store_uri: str | None,
    name: str | None,
    say: Callable[[str], None],
    sandbox: bool = True,
    recorded: Callable[[_Prepared], None] | None = None,
) -> _Prepared:
    """Everything before the agent. `recorded` is called with the run as soon as its run.json is
    in the store (from then on an interruption is recorded)."""

    spec = run.spec
    run_name = check_run_name(name or run.metadata.name)
    bwrap = check_bubblewrap() if sandbox else None
    # its evaluator version names the judge and the protocol
    task = get_task(spec.task, envs.eval_environ(spec), protocol=spec.evaluation.protocol)
    stack: StackRun | None = None
    if spec.agent.stack is not None:
        with span("install_stack"):
            stack = StackRun.prepare(spec, say)
        argv = [str(stack.installed.entry)]
    else:
        argv = envs.resolve_agent_argv(list(spec.agent.command), list(spec.agent.args))
    store = open_writable_store(store_uri or spec.store.uri)
    say(f"[a2rl] resolving base model {spec.base_model.source}")
    with span("resolve_base_model"):
        model_dir = resolve_base_model(spec.base_model.source, store=store)
    uid = secrets.token_hex(6)
    layout = RunLayout(namespace=LOCAL_NAMESPACE, name=run_name, uid=uid)
    prep = _Prepared(
        run=run,
        layout=layout,
        store=store,
        task_name=task.name,
        evaluator_version=task.evaluator_version,
        model_dir=model_dir,
        model_digest=hash_tree(model_dir).digest,
        argv=argv,
        logs_dir=paths.run_logs_dir(f"{run_name}-{uid}"),
        run_key=new_key(),
        bwrap=bwrap,
        stack=stack,
    )
    _write_run_json(prep)
    if recorded is not None:
        recorded(prep)
    say(f"[a2rl] run {layout.prefix} in {store.uri}")
    say(f"[a2rl] staging data of task {task.name} (seed {spec.seed})")
    try:
        with span("stage_data"):
            staged = stage_cached(task, spec.seed)
    except Exception:
        # A user mistake (data that must be staged with `a2rl data stage` first): nothing stays
        # recorded, as for every mistake caught before the run starts.
        with contextlib.suppress(Exception):
            store.delete(layout.run_json)
        raise
    prep.heldout_dir, prep.train_dir = staged.heldout_dir, staged.train_dir
    with span("baseline_eval", {ATTR_SUBMISSION_INDEX: BASELINE_INDEX}):
        prep.baseline = _baseline(prep, say)
    root = paths.workspaces_dir() / f"{run_name}-{uid}"
    with span("workspace_setup"):
        prep.workspace = build_workspace(
            root,
            WorkspaceRules(
                task=task.name,
                base_model=spec.base_model.name,
                budget_s=spec.budget.wall_time_seconds,
                grace_s=spec.budget.grace_seconds,
                max_submissions=spec.budget.max_submissions,
                protocol=spec.evaluation.protocol,
            ),
            description=task.description(),
            model_dir=model_dir,
            train_dir=staged.train_dir,
            heldout_dir=staged.heldout_dir,
        )
    say(f"[a2rl] workspace {root}")
    return prep


def _baseline(prep: _Prepared, say: Callable[[str], None]) -> ResultRecord:
    spec = prep.run.spec
    args = [
        "eval", "baseline",
        "--store", prep.store.uri,
        "--run-prefix", prep.layout.prefix,
        "--task", prep.task_name,
        "--model-dir", str(prep.model_dir),
        "--base-name", sanitize_model_name(spec.base_model.name),
        "--heldout", str(prep.heldout_dir),
        "--backend", spec.evaluation.backend,
    ]  # fmt: skip
    if spec.evaluation.limit is not None:
        args += ["--limit", str(spec.evaluation.limit)]
    say("[a2rl] scoring the base model (submission 0; cached across runs)")
    log = prep.logs_dir / "baseline.log"
    eval_env = envs.eval_environ(spec)  # the run's own judge: the box lets the evaluation reach it
    with (
        baseline_box(
            task=prep.task_name,
            store_uri=prep.store.uri,
            run_prefix=prep.layout.prefix,
            model_dir=prep.model_dir,
            heldout=prep.heldout_dir,
            env=eval_env,
        ) as box,
        _ticking(say, _still("scoring the base model: still evaluating", time.monotonic())),
    ):
        done = run_a2rl(
            args,
            log_path=log,
            env={**eval_env, **current_trace_env(), **box.env},
            wrapper=box.prefix,
            preexec_fn=box.preexec,
            timeout_s=eval_timeout_s(),
        )
    code, out = done.returncode, done.stdout
    if code != 0:
        detail = last_line(log)
        raise A2rlError(
            f"baseline evaluation failed (exit code {code}): {detail or 'no output'} (log: {log})"
        )
    printed = _last_json(out)
    result = (
        ResultRecord.from_json(printed)
        if printed is not None
        else load_record(prep.store, prep.layout.submission_result(BASELINE_INDEX), ResultRecord)
    )
    if prep.run_key is not None:  # before the agent starts: what the baseline eval reported
        seal_result(prep.store, prep.layout, BASELINE_INDEX, result, prep.run_key)
    if result.cache_problem:
        say(f"[a2rl] warning: {result.cache_problem}; the base model was evaluated again")
    if result.score is None:
        say(f"[a2rl] warning: the base model could not be scored: {result.error}")
    else:
        cached = " (cached)" if result.cached else ""
        say(f"[a2rl] baseline score {fmt_score(result.score)}{cached}")
    return result


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


# --- execution: recorder + agent, then recording ---------------------------------------------------
def execute(prep: _Prepared, *, say: Callable[[str], None], progress: bool) -> RunOutcome:
    assert prep.workspace is not None
    ws = prep.workspace
    spec = prep.run.spec
    budget = spec.budget.wall_time_seconds
    port = free_port()
    grading_url = f"http://127.0.0.1:{port}"  # the same inside the sandbox (relayed)
    cwd = envs.agent_cwd(spec, ws)
    env = envs.agent_env(spec, ws, grading_url)
    argv = prep.argv
    stack = prep.stack
    wanted = agent_limits(spec.resources)
    # What the sandbox and the limits hold (cgroups, staged mounts, scratch) is released however
    # this ends, from here on: a failure before the agent starts (a stack's start-up files, the
    # recorder's construction) leaves nothing behind.
    with contextlib.ExitStack() as held:
        sandbox = _sandbox(prep, port, cwd, wanted, held) if prep.bwrap is not None else None
        box = sandbox.containment if sandbox is not None else None
        if box is None:
            box = contain_agent(f"agent-{prep.layout.uid}", wanted, own_uid=False)
            held.callback(box.close)
        prep.limits_label = describe_limits(box, wanted)
        watch = LimitWatch(box, wanted.disk_bytes, [ws.root, _scratch(ws)])
        if stack is not None:
            home = sandbox.home if sandbox is not None else _scratch(ws) / "home"
            argv, env = stack.command(ws.root, env, home, AGENT_HOME if sandbox is not None else str(home))
        if sandbox is not None:
            argv, env = sandbox.wrap(argv), sandbox.agent_env(env)
            say(f"[a2rl] sandbox: {prep.sandbox_label} (only the workspace and the grading API are visible)")
        else:
            say(NO_SANDBOX_WARNING)
        say(f"[a2rl] agent limits: {prep.limits_label}")

        start = time.time()  # the agent's clock: recorder start-up counts against the budget
        prep.started_at = start
        update_run_meta(ws.root, start_time=start, timeout_s=budget)
        _write_run_json(prep)
        recorder = RecorderProcess(
            envs.recorder_env(
                spec=spec,
                store_uri=prep.store.uri,
                layout=prep.layout,
                ws=ws,
                port=port,
                start_epoch=start,
                base_model_digest=prep.model_digest,
                heldout_dir=prep.heldout_dir,
            )
            | ({ENV_RECORDER_SOCKET: str(sandbox.api_socket)} if sandbox is not None else {})
            | current_trace_env(),  # the recorder's spans are children of the run's root span
            port,
            prep.logs_dir / "recorder.log",
            run_key=prep.run_key,
        )
        launch = AgentLaunch(
            argv=argv,
            env=env,
            cwd=ws.root if sandbox is not None else cwd,  # bubblewrap enters `cwd` itself
            log_path=prep.logs_dir / "agent.log",
            console_prefix="agent | " if progress else None,
            echo=say if isinstance(say, StatusLine) else None,
            sandboxed=sandbox is not None,
            preexec=sandbox.preexec if sandbox is not None else box.preexec,
        )
        supervisor = AgentSupervisor(
            launch,
            protected=lambda: [
                p for p in (recorder.pid, stack.gateway_pid if stack else None) if p is not None
            ],
        )
        error: A2rlError | None = None
        outcome: AgentOutcome | None = None
        cut_short = False  # Ctrl-C while the recorder finished in-flight evaluations
        try:
            try:
                say(f"[a2rl] starting the grading server on {grading_url}")
                with span("recorder_start"):
                    recorder.start()
                if stack is not None:
                    stack.start_gateway(
                        store_uri=prep.store.uri,
                        run_prefix=prep.layout.prefix,
                        socket_path=sandbox.gateway_socket if sandbox is not None else None,
                        log_path=prep.logs_dir / "gateway.log",
                        say=say,
                    )
                if sandbox is not None:
                    sandbox.grant_sockets()
                say(f"[a2rl] starting the agent: {_agent_label(prep)} (budget {budget} s)")
                remaining = max(start + budget - time.time(), 0.0)
                with span("agent") as agent_span:
                    outcome = supervisor.run(
                        remaining,
                        spec.budget.grace_seconds,
                        on_tick=_ticker(recorder, start, budget, say),
                        tick_s=STATUS_EVERY_TTY_S if getattr(say, "tty", False) else STATUS_EVERY_PLAIN_S,
                        stop_when=_first_reason(stack.budget_spent if stack is not None else None, watch),
                    )
                    agent_span.set_attribute("a2rl.agent.end_reason", outcome.end_reason)
            except A2rlError as exc:
                error = exc
            except KeyboardInterrupt:
                supervisor.stop(min(spec.budget.grace_seconds, 5))
                code = supervisor.poll() if supervisor.pid else None
                outcome = AgentOutcome(
                    exit_code=code, end_reason=INTERRUPTED, duration_s=time.time() - start, interrupted=True
                )
            finally:
                if isinstance(say, StatusLine):
                    say.clear()
            if outcome is None:
                outcome = AgentOutcome(exit_code=None, end_reason=FAILED, duration_s=time.time() - start)
            ended = time.time()
            prep.agent_exit_code = outcome.exit_code
            if outcome.interrupted:
                # Recorded at once: a second Ctrl-C during the wrap-up leaves a consistent run.json.
                _write_run_json(
                    prep, ended_at=ended, end_reason=INTERRUPTED, agent_exit_code=outcome.exit_code
                )
                say("[a2rl] interrupted: agent stopped; recording what was submitted")
            else:
                say(f"[a2rl] agent ended: {outcome.end_reason} (exit code {outcome.exit_code})")
            if stack is not None:
                stack.stop()
            with span("recorder_stop"):
                cut_short = _stop_recorder(recorder, say)
        finally:
            # Whatever went wrong above, no process of this run outlives it.
            supervisor.stop(0)
            recorder.kill()
            if stack is not None:
                stack.kill()
    update_run_meta(ws.root, end_time=ended)
    scores = _final_scores(prep)
    reason: EndReason = INTERRUPTED if cut_short else outcome.end_reason
    last_words: list[str] | None = None
    if scores.submissions == 0 and reason != INTERRUPTED:
        last_words = agent_last_words(prep.logs_dir / "agent.log")
        if reason in (COMPLETED, DEADLINE_EXCEEDED):
            reason = NO_SUBMISSION
            say("[a2rl] warning: the agent made no submission; its last words:")
            for line in last_words or ["(its log is empty)"]:
                say(f"[a2rl]   {line}")
    report, report_uri, again = _record_end(
        prep,
        say,
        ended_at=ended,
        end_reason=reason,
        agent_exit_code=outcome.exit_code,
        agent_last_words=last_words,
    )
    if again:
        reason = INTERRUPTED
    for line in summary_lines(
        prefix=prep.layout.prefix,
        summary=scores,
        end_reason=reason,
        exit_code=outcome.exit_code,
        duration_s=outcome.duration_s,
        report_uri=report_uri,
        workspace=str(ws.root),
        store_uri=prep.store.uri,
    ):
        say(line)
    if stack is not None:
        say(driver_line(read_driver_summary(prep.store, prep.layout)))
    if error is not None:
        raise error
    return RunOutcome(
        name=prep.layout.name,
        uid=prep.layout.uid,
        prefix=prep.layout.prefix,
        store_uri=prep.store.uri,
        workspace=ws.root,
        end_reason=reason,
        agent_exit_code=outcome.exit_code,
        duration_s=outcome.duration_s,
        interrupted=outcome.interrupted or cut_short or again,
        scores=scores,
        report=report,
        report_uri=report_uri,
    )


def _record_end(
    prep: _Prepared, say: Callable[[str], None], *, ended_at: float, end_reason: EndReason, **fields: Any
) -> tuple[ReportRecord | None, str | None, bool]:
    """The wrap-up: run.json's end, the logs, the report. A Ctrl-C here skips what is left (run.json
    then says `interrupted`). Returns (report, its URI, interrupted during the wrap-up)."""
    _write_run_json(prep, ended_at=ended_at, end_reason=end_reason, **fields)
    try:
        with span("logs_upload"):
            _upload_logs(prep)
            if prep.stack is not None:
                prep.stack.keep_trajectory(prep.store, prep.layout, prep.logs_dir / "agent.log")
        report, report_uri = _report(prep, say)
    except KeyboardInterrupt:
        say("[a2rl] interrupted again: the logs and the report may be incomplete")
        if end_reason != INTERRUPTED:
            _write_run_json(prep, ended_at=ended_at, end_reason=INTERRUPTED, **fields)
        return None, None, True
    return report, report_uri, False


def _interrupted(prep: _Prepared, say: Callable[[str], None]) -> RunOutcome:
    """Ctrl-C (or SIGTERM) that `execute` did not handle itself (staging, baseline, workspace,
    start-up, or a second one late in the wrap-up): the run is recorded as `interrupted`, with
    what is known of the agent, its logs and its report."""
    say("[a2rl] interrupted: recording the run")
    ended = time.time()
    report, report_uri, _ = _record_end(
        prep, say, ended_at=ended, end_reason=INTERRUPTED, agent_exit_code=prep.agent_exit_code
    )
    scores = _final_scores(prep)
    for line in summary_lines(
        prefix=prep.layout.prefix,
        summary=scores,
        end_reason=INTERRUPTED,
        exit_code=prep.agent_exit_code,
        duration_s=ended - prep.started_at if prep.started_at is not None else 0.0,
        report_uri=report_uri,
        workspace=str(prep.workspace.root) if prep.workspace is not None else "-",
        store_uri=prep.store.uri,
    ):
        say(line)
    return RunOutcome(
        name=prep.layout.name,
        uid=prep.layout.uid,
        prefix=prep.layout.prefix,
        store_uri=prep.store.uri,
        workspace=prep.workspace.root if prep.workspace is not None else paths.workspaces_dir(),
        end_reason=INTERRUPTED,
        agent_exit_code=prep.agent_exit_code,
        duration_s=ended - prep.started_at if prep.started_at is not None else 0.0,
        interrupted=True,
        scores=scores,
        report=report,
        report_uri=report_uri,
    )


def agent_last_words(log: Path) -> list[str]:
    """The last non-empty lines of the agent's log (`LAST_WORDS_*` bound them); [] without a log."""
    try:
        with log.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - LAST_WORDS_TAIL_BYTES, 0))
            tail = f.read(LAST_WORDS_TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if size > LAST_WORDS_TAIL_BYTES and lines:
        lines = lines[1:]  # the first line read may be cut
    return [line[:LAST_WORDS_LINE_CHARS] for line in lines[-LAST_WORDS_LINES:]]


def _scratch(ws: Workspace) -> Path:
    """The run's scratch directory next to its workspace (the agent's /tmp and home)."""
    return ws.root.with_name(f"{ws.root.name}.scratch")


def _agent_label(prep: _Prepared) -> str:
    return " ".join(prep.argv) if prep.stack is None else prep.stack.label


def _first_reason(*checks: Callable[[], EndReason | None] | None) -> Callable[[], EndReason | None]:
    """A `stop_when` that gives the first reason any of `checks` has."""

    def check() -> EndReason | None:
        return next((r for c in checks if c is not None and (r := c()) is not None), None)

    return check


def _sandbox(
    prep: _Prepared, port: int, cwd: Path, wanted: AgentLimits, held: contextlib.ExitStack
) -> RunSandbox:
    """The run's sandbox: the workspace (base model and data read-only), the grading API, and for
    an agent stack its install and the driver gateway. Its containment and its own cleanup are
    `held` (released, in reverse order, when the run ends)."""
    assert prep.bwrap is not None and prep.workspace is not None
    ws = prep.workspace
    store_root = [prep.store.root] if isinstance(prep.store, LocalStore) else []
    containment = contain_agent(f"agent-{prep.layout.uid}", wanted, own_uid=os.geteuid() == 0)
    held.callback(containment.close)
    sandbox = RunSandbox.create(
        prep.bwrap,
        workspace=ws.root,
        read_only=[ws.model_dir.parent, ws.data_dir, ws.root / WS_DESCRIPTION, ws.root / WS_INSTRUCTIONS],
        agent_argv=prep.argv,
        cwd=cwd,
        api_port=port,
        gateway_port=prep.stack.port if prep.stack is not None else None,
        extra_toolchain=prep.stack.installed.read_only if prep.stack is not None else (),
        scratch=_scratch(ws),
        private=[paths.home(), paths.cache_dir(), Path.home(), prep.heldout_dir, prep.logs_dir, *store_root],
        run_uid=prep.layout.uid,
        shm_bytes=wanted.shm_bytes,
        containment=containment,
    )
    held.callback(sandbox.cleanup)
    return sandbox


def _ticker(
    recorder: RecorderProcess, start: float, budget: int, say: Callable[[str], None]
) -> Callable[[float, float], None]:
    def tick(_elapsed: float, remaining: float) -> None:
        if remaining < 1.0:  # the deadline itself is reported by the next line
            return
        now = time.time()
        elapsed = now - start
        clock = (
            f"[a2rl] agent running  {fmt_duration(elapsed)} elapsed, {fmt_duration(budget - elapsed)} left"
        )
        entries = recorder.submissions() if recorder.alive() else None
        if entries is None:
            text, key = f"{clock}  (grading server not answering)", "not answering"
        else:
            status, key = submissions_status(entries, now)
            text = f"{clock}  {status}"
        if isinstance(say, StatusLine):
            say.update(text, key)
        else:
            say(text)

    return tick


def _stop_recorder(recorder: RecorderProcess, say: Callable[[str], None]) -> bool:
    """Stop the recorder, letting it finish in-flight evaluations; True when a Ctrl-C cut that short."""
    if recorder.pid is None:
        return False
    say("[a2rl] stopping the grading server (finishing in-flight evaluations)")
    since = time.monotonic()

    def status() -> tuple[str, str | None]:
        waited = fmt_duration(time.monotonic() - since)
        entries = recorder.submissions() if recorder.alive() else None
        current = evaluating(entries, time.time()) if entries else None
        if current is None:
            return f"[a2rl] wrapping up: still finishing in-flight evaluations ({waited})", "draining"
        index, running = current
        running_for = f" ({fmt_duration(running)} since submitted)" if running is not None else ""
        return f"[a2rl] wrapping up: still evaluating #{index}{running_for}; {waited} so far", f"#{index}"

    try:
        with _ticking(say, status):
            code = recorder.stop(_recorder_stop_timeout())
    except KeyboardInterrupt:
        recorder.kill()
        say("[a2rl] interrupted: grading server killed")
        return True
    if code not in (0, None, -signal.SIGTERM):
        say(f"[a2rl] warning: the grading server exited with code {code} (log: {recorder.log_path})")
    return False


def _recorder_stop_timeout() -> float:
    raw = os.environ.get(ENV_RECORDER_DRAIN_TIMEOUT, "")
    try:
        drain = float(raw) if raw.strip() else RECORDER_DRAIN_DEFAULT_S
    except ValueError:
        drain = RECORDER_DRAIN_DEFAULT_S
    return drain + RECORDER_STOP_MARGIN_S


def _write_run_json(prep: _Prepared, **times: Any) -> None:
    times.setdefault("started_at", prep.started_at)
    record = run_record(
        prep.run,
        prep.layout,
        base_model_digest=prep.model_digest,
        evaluator_version=prep.evaluator_version,
        sandbox=prep.sandbox_label,
        agent_limits=prep.limits_label,
        **times,
        **metered(read_driver_summary(prep.store, prep.layout)),
    )
    write_record(prep.store, prep.layout.run_json, record)


def _upload_logs(prep: _Prepared) -> None:
    for component in LOG_COMPONENTS:
        path = prep.logs_dir / f"{component}.log"
        if path.is_file():
            prep.store.put_file(prep.layout.log(component), path)


def _report(prep: _Prepared, say: Callable[[str], None]) -> tuple[ReportRecord | None, str | None]:
    for index, result in _checked_results(prep):
        if result.tampered:
            say(f"[a2rl] warning: {tampered_line(index)}")
    say("[a2rl] writing the report")
    try:
        with _ticking(say, _still("still writing the report", time.monotonic())):
            report = write_report(prep.store, prep.layout, run_key=prep.run_key)
    except Exception as exc:  # the run is recorded; a report bug must not hide it
        say(f"[a2rl] warning: the report could not be written: {type(exc).__name__}: {exc}")
        return None, None
    for name in ("report.html", "report.md", "report.json"):
        key = f"{prep.layout.report_dir}/{name}"
        if prep.store.exists(key):
            return report, prep.store.url_for(key)
    return report, prep.store.url_for(prep.layout.report_dir)


def _final_scores(prep: _Prepared) -> ScoreSummary:
    """Scores from the results in the store (the source of truth), not from the recorder's memory;
    each checked against its seal (a tampered one is never scored)."""
    keys = list(prep.store.list(prep.layout.submissions))
    scored = [Scored(index, result.score) for index, result in _checked_results(prep, keys)]
    manifests = sum(1 for k in keys if k.endswith("/manifest.json"))
    summary = summarize_scores(scored)
    # A submission whose evaluation never finished has a manifest but no result: still counted.
    agent_manifests = max(manifests - 1, 0)
    if agent_manifests > summary.submissions:
        summary = ScoreSummary(
            baseline_score=summary.baseline_score,
            best_score=summary.best_score,
            best_submission=summary.best_submission,
            last_score=summary.last_score,
            submissions=agent_manifests,
            valid_submissions=summary.valid_submissions,
        )
    return summary


def _checked_results(prep: _Prepared, keys: list[str] | None = None) -> list[tuple[int, ResultRecord]]:
    """(index, result) of every result.json, the index from its key, checked with the run's key."""
    found = []
    base = prep.layout.submissions + "/"
    for key in keys if keys is not None else prep.store.list(prep.layout.submissions):
        number, _, name = key[len(base) :].partition("/") if key.startswith(base) else ("", "", "")
        if name == "result.json" and number.isdigit():
            result = checked_result(prep.store, prep.layout, int(number), prep.run_key)
            if result is not None:
                found.append((int(number), result))
    return found


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM to the runner behaves like Ctrl-C: stop the agent, still record the run. So does
    SIGHUP, the terminal closing under it (unless it was started ignoring SIGHUP, as `nohup`
    does): its output then goes to /dev/null, since a write to the lost terminal would fail."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        raise KeyboardInterrupt

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd)
        os.close(null)
        raise KeyboardInterrupt

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term)}
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["RunOutcome", "check_run_name", "load", "open_writable_store", "run_benchrun"]
