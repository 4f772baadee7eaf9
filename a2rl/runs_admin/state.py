"""Whether a run is still going: the rule `a2rl runs` uses to show a run's state and to refuse
deleting a live one (docs/cli.md, "a2rl runs rm").

A run's `run.json` gets `ended_at` when the runner (or the operator) records its end, Ctrl-C and
SIGTERM included. A run without it is either still going or its runner died without a word
(SIGKILL, a power cut). Nothing in the store names the runner's process, so the rule reads time:

- `ended_at` set: ended (`end_reason`, or `ended` when none is recorded);
- the run's logs on this machine (`$A2RL_HOME/logs/<name>-<uid>/`) were written in the last
  `ACTIVITY_WINDOW`: `running` (or `starting` before the agent's clock started);
- `started_at` set: `running` until its deadline + the kill grace + `WRAPUP_MARGIN` (draining
  evaluations, uploading logs, the report), `stale` after;
- no `started_at` yet (staging data, scoring the baseline): `starting` for `STARTUP_WINDOW` after
  run.json was last written — or for ever when the store cannot tell when that was — `stale` after.

`running` and `starting` are live: `a2rl runs rm` refuses them without `--force`, `prune` skips them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from a2rl.records.run import RunRecord
from a2rl.runs import parse_time

RUNNING: Final = "running"
STARTING: Final = "starting"
#: No end recorded and nothing says the run is still going: its runner died.
STALE: Final = "stale"
#: `ended_at` without an `end_reason`.
ENDED: Final = "ended"
LIVE_STATES: Final = frozenset({RUNNING, STARTING})

ACTIVITY_WINDOW: Final = timedelta(minutes=10)
WRAPUP_MARGIN: Final = timedelta(hours=1)
STARTUP_WINDOW: Final = timedelta(hours=6)
#: `spec.budget.graceSeconds`' default (a2rl.api.benchrun.BudgetSpec).
DEFAULT_GRACE_S: Final = 30


def grace_seconds(record: RunRecord) -> float:
    """`spec.budget.graceSeconds` as run.json's spec has it (wire form), else its default."""
    budget: Any = (record.spec or {}).get("budget")
    value = budget.get("graceSeconds") if isinstance(budget, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else DEFAULT_GRACE_S


def run_state(
    record: RunRecord,
    now: datetime,
    *,
    local_activity: datetime | None = None,
    run_json_written: datetime | None = None,
) -> str:
    """The run's state (module docstring): its end reason, `running`, `starting` or `stale`.

    `local_activity`: the newest write to the run's logs on this machine; `run_json_written`:
    when run.json was last written (`ObjectStore.modified_at`), None when unknown.
    """
    if parse_time(record.ended_at) is not None:
        return record.end_reason or ENDED
    started = parse_time(record.started_at)
    if local_activity is not None and now - local_activity < ACTIVITY_WINDOW:
        return RUNNING if started is not None else STARTING
    if started is not None:
        wall = record.budget.wall_time_seconds if record.budget is not None else None
        if wall is None:
            deadline = parse_time(record.deadline)
            limit = deadline if deadline is not None else started
        else:
            limit = started + timedelta(seconds=float(wall))
        limit += timedelta(seconds=grace_seconds(record)) + WRAPUP_MARGIN
        return RUNNING if now < limit else STALE
    if run_json_written is None or now - run_json_written < STARTUP_WINDOW:
        return STARTING
    return STALE


def is_live(state: str) -> bool:
    return state in LIVE_STATES
