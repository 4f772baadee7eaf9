"""`a2rl run --dry-run`: what a run would do and what it may cost, resolved without doing it.

Nothing is staged, built, fetched, evaluated or written: the base model is looked up where it would
be resolved, the data and the baseline in their caches (by the keys the run would use), the
sandbox probed (`bwrap --version` and a namespace probe), the driver's worst case computed from its
token budget and the gateway's price table. Every part that cannot be resolved says why instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from a2rl_gateway.pricing import load_prices, lookup
from a2rl_grader.baseline import baseline_cache_key
from a2rl_tasks import get_task
from a2rl_tasks.base import Task
from a2rl_tasks.staging import cached_dir

from a2rl import paths
from a2rl.api.benchrun import BenchRun
from a2rl.constants import ENV_DRIVER_PRICES, ENV_HELDOUT_SECRET_FILE
from a2rl.contracts import env as envs
from a2rl.errors import A2rlError
from a2rl.eval_sandbox import eval_timeout_s, local_store_dir
from a2rl.integrity import fingerprint
from a2rl.local_keys import BASELINE_CACHE_KEY, HELDOUT_SEED_KEY, keys_dir, read_secret_file
from a2rl.local_keys import heldout_secret as read_heldout_secret
from a2rl.models.library import STORE_PREFIX
from a2rl.models.resolve import BUILTIN_PREFIX, resolve_base_model
from a2rl.store.cas import hash_tree
from a2rl.store.open import open_store
from a2rl_runner.printing import fmt_duration
from a2rl_runner.sandbox.limits import agent_limits

#: What the wrap-up may take at most beyond the agent's budget: the recorder drains in-flight
#: evaluations (bounded by the evaluation time-out), then logs and the report (seconds).
REPORT_ESTIMATE_S = 30.0


def plan_lines(run: BenchRun, *, store_uri: str | None, sandbox: bool = True) -> list[str]:
    """The resolved plan of `run`, one line per part (see the module docstring)."""
    spec = run.spec
    store = store_uri or spec.store.uri or paths.default_store_uri()
    lines = [f"plan        {run.metadata.name} (dry run: nothing staged, nothing started)"]
    task: Task | None = None
    try:
        task = get_task(spec.task, envs.eval_environ(spec), protocol=spec.evaluation.protocol)
    except A2rlError as exc:
        lines.append(f"task        {spec.task}: {exc}")
    model_dir, model_line = _model(spec.base_model.source)
    lines.append(f"model       {spec.base_model.name} from {spec.base_model.source}: {model_line}")
    heldout: Path | None = None
    if task is not None:
        heldout, data_line = _data(task, spec.seed)
        lines.append(
            f"data        task {task.name}, seed {spec.seed}, data version {task.data_version}, "
            f"protocol {spec.evaluation.protocol}: {data_line}"
        )
    lines.append(f"agent       {_agent(run)}")
    lines.append(f"sandbox     {_sandbox(sandbox)}")
    lines.append(f"limits      {_limits(run)}")
    lines.append(f"store       {store}")
    cached: bool | None = None
    if task is not None:
        cached, baseline_line = _baseline(task, spec.evaluation.limit, model_dir, heldout, store)
        lines.append(f"baseline    {baseline_line}")
    lines.append(f"driver      {_driver_cost(run)}")
    lines.append(f"wall time   {_wall_time(run, cached)}")
    return lines


def _model(source: str) -> tuple[Path | None, str]:
    if source.strip().startswith(STORE_PREFIX):
        return None, "fetched from the store at run time (a cached copy is reused when unchanged)"
    try:
        model_dir = resolve_base_model(source, build=False)
    except A2rlError as exc:
        if source.strip().startswith(BUILTIN_PREFIX):
            return None, f"not built yet (built at run time; {exc})"
        return None, f"not found ({exc})"
    return model_dir, f"{model_dir} (cached)"


def _existing_key(name: str) -> bytes | None:
    """This machine's secret `name`, None when it has none yet (never created here)."""
    try:
        return read_secret_file(keys_dir() / name)
    except FileNotFoundError:
        return None


def _data(task: Task, seed: int) -> tuple[Path | None, str]:
    secret: bytes | None = None
    if task.secret_heldout:
        secret = (
            read_heldout_secret()
            if os.environ.get(ENV_HELDOUT_SECRET_FILE)
            else _existing_key(HELDOUT_SEED_KEY)
        )
        if secret is None:
            return None, "not staged (staged at run time)"
    final = cached_dir(task, seed, secret=secret)
    if final.is_dir():
        return final / "heldout", f"staged at {final}"
    return None, f"not staged (staged into {final} at run time)"


def _agent(run: BenchRun) -> str:
    agent = run.spec.agent
    if agent.stack is not None:
        mode = f", mode {agent.mode}" if agent.mode else ""
        return f"stack {agent.stack} {agent.stack_version_or_default}{mode}"
    try:
        return "command " + " ".join(envs.resolve_agent_argv(list(agent.command), list(agent.args)))
    except A2rlError as exc:
        return f"command {' '.join([*agent.command, *agent.args])} ({exc})"


def _sandbox(enabled: bool) -> str:
    if not enabled:
        return "none (--no-sandbox: the agent runs as you, unisolated)"
    from a2rl_runner.sandbox.setup import check_bubblewrap

    try:
        bwrap = check_bubblewrap()
    except A2rlError as exc:
        return f"unavailable: {exc}"
    who = "a dedicated uid (the runner is root)" if os.geteuid() == 0 else "you, in namespaces"
    return f"{bwrap.version}; the agent runs as {who}"


def _limits(run: BenchRun) -> str:
    wanted = agent_limits(run.spec.resources)
    limits = wanted.limits
    parts = []
    if limits.memory_bytes is not None:
        parts.append(f"memory {limits.memory_bytes / 2**30:.1f} GiB")
    if limits.max_processes is not None:
        parts.append(f"processes {limits.max_processes}")
    if limits.file_size_bytes is not None:
        parts.append(f"file size {limits.file_size_bytes / 2**30:.1f} GiB")
    parts.append(f"disk {wanted.disk_bytes / 2**30:.1f} GiB")
    parts.append(f"/dev/shm {wanted.shm_bytes / 2**30:.2f} GiB")
    budget = run.spec.budget
    parts.append(f"budget {budget.wall_time_seconds} s (+{budget.grace_seconds} s grace)")
    parts.append(f"submissions {budget.max_submissions or 'unlimited'}")
    return ", ".join(parts)


def _baseline(
    task: Task, limit: int | None, model_dir: Path | None, heldout: Path | None, store_uri: str
) -> tuple[bool | None, str]:
    if model_dir is None or heldout is None:
        return None, "not cached (the model or the data are not there yet: evaluated at run time)"
    key_secret = _existing_key(BASELINE_CACHE_KEY)
    if key_secret is None:
        return False, "not cached (no baseline cached on this machine yet): evaluated at run time"
    try:
        digest = hash_tree(model_dir).digest
        key = baseline_cache_key(task, digest, limit, hash_tree(heldout).digest, fingerprint(key_secret))
        local = local_store_dir(store_uri)
        found = (local / key).is_file() if local is not None else open_store(store_uri).exists(key)
    except (A2rlError, OSError, ValueError) as exc:
        return None, f"unknown ({exc})"
    if found:
        return True, f"cached ({key})"
    return False, f"not cached ({key}): evaluated at run time, up to {fmt_duration(eval_timeout_s())}"


def _driver_cost(run: BenchRun) -> str:
    spec = run.spec
    if spec.driver is None:
        return "none"
    tokens, cap = spec.budget.driver_tokens, spec.budget.driver_cost_usd
    prices_file = os.environ.get(ENV_DRIVER_PRICES, "").strip()
    try:
        found = lookup(load_prices(Path(prices_file) if prices_file else None), spec.driver.model)
    except A2rlError as exc:
        found, problem = None, str(exc)
    else:
        problem = f"no price for {spec.driver.model}"
    parts = [f"{spec.driver.provider} {spec.driver.model}"]
    worst: float | None = None
    if tokens is not None and found is not None:
        price = found[1]
        per_token = max(p for p in (price.input, price.output, price.cache_write) if p is not None) / 1e6
        worst = tokens * per_token
        parts.append(f"{tokens} tokens x at most ${per_token * 1e6:g}/M = ${worst:.2f}")
    elif tokens is not None:
        parts.append(f"{tokens} tokens ({problem}: cost unknown)")
    if cap is not None:
        worst = cap if worst is None else min(worst, cap)
        parts.append(f"cost cap ${cap:.2f}")
    if worst is None:
        return ", ".join(parts) + "; worst case: unbounded (set budget.driverTokens or driverCostUSD)"
    return ", ".join(parts) + f"; worst case ${worst:.2f}"


def _wall_time(run: BenchRun, baseline_cached: bool | None) -> str:
    budget = run.spec.budget
    agent = budget.wall_time_seconds + budget.grace_seconds
    baseline = 0.0 if baseline_cached else eval_timeout_s()
    wrap_up = eval_timeout_s() + REPORT_ESTIMATE_S  # in-flight evaluations, then logs and report
    parts = [f"agent {fmt_duration(agent)}"]
    if baseline:
        parts.append(f"baseline up to {fmt_duration(baseline)}")
    parts.append(f"wrap-up up to {fmt_duration(wrap_up)}")
    most = fmt_duration(agent + baseline + wrap_up)
    return f"about {fmt_duration(agent)}, at most {most} ({', '.join(parts)})"


__all__ = ["plan_lines"]
