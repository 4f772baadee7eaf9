"""The one writer of BenchRun status: every handler that changes a run's status calls `write_status`.

A write reads the run's status as a `BenchRunStatus`, applies the condition changes (`status.py`'s
math: `lastTransitionTime` moves only when a status does) and any other status fields, derives
`phase`, `startTime` and `completionTime`, and replaces the status subresource (`status_wire`)
guarded by resourceVersion, retried on conflicts (`Kube.update_status`), so the Job, Pod, Event,
BenchSubmission watchers and the timers of one run never lose each other's writes; the run as
written is kept in `RUNS`. A written transition a user acts on or waits for
(`status.worth_an_event`: a Warning, the run's end) gets one Kubernetes Event on the BenchRun; the
GitOps-readable conditions (`Reconciling`, `Stalled`, `Ready`, `Finished`, and
`Succeeded=False`/`Failed=False` beside the terminal one: `status.lifecycle`) follow the others on
every write and get none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from a2rl.api.benchrun import BenchRunStatus
from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_KIND
from a2rl.protocols import spec_protocol
from a2rl.runs import parse_time
from a2rl_operator import status as st
from a2rl_operator.kube import Kube
from a2rl_operator.watched import WatchedRuns

Body = dict[str, Any]
#: Every run as this operator last wrote its status or its watch last delivered it (the newer):
#: what `benchrun.refresh` reads instead of a GET. Every status write goes through `write_status`,
#: so no condition this operator wrote can be missing from what is kept here.
RUNS = WatchedRuns()
#: The condition changes to apply, given the run's current conditions.
ChangesFor = Callable[[list[st.Cond]], list[st.Change]]
#: Other status fields: `(run, status) -> new status` (e.g. the aggregate scores, `report`).
EditStatus = Callable[[Body, BenchRunStatus], BenchRunStatus]


def run_ref(run: Body) -> Body:
    """What `kopf.event` needs to post an Event about the run."""
    meta = run["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": BENCHRUN_KIND,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
    }


def post_events(kube: Kube, run: Body, transitions: list[st.Change]) -> None:
    """One Event per transition worth one (`status.worth_an_event`), one per reason."""
    seen: set[str] = set()
    for change in transitions:
        if not st.worth_an_event(change):
            continue
        reason = change.reason
        if reason in seen:
            continue
        seen.add(reason)
        message = st.one_line(f"{change.type}={change.status}: {change.message}")
        kube.post_event(run_ref(run), st.event_type(change), reason, message)


def write_status(
    kube: Kube,
    namespace: str,
    name: str,
    changes_for: ChangesFor | None = None,
    *,
    edit: EditStatus | None = None,
    only_if: Callable[[list[st.Cond]], bool] | None = None,
    pod: Body | None = None,
    run: Body | None = None,
) -> list[st.Change]:
    """Write the run's status; returns the condition transitions written (Events are posted).

    - `changes_for(conditions)`: condition changes; when given, `observedGeneration`, `phase`,
      the GitOps-readable conditions (`status.lifecycle` of `status.run_outcome`), `startTime`
      (from the agent container of `pod`) and `completionTime` are kept in step;
    - `edit(run, status)`: other status fields, computed from the fresh read of each attempt;
    - `only_if(conditions)`: write nothing unless it holds (someone else may have moved on);
    - `run`: a read used for the first attempt (saves a GET; a stale one costs a 409 and a GET).
    No write (and no Event) when nothing changes; the run as written is kept in `RUNS`."""
    transitions: list[st.Change] = []
    refs: list[Body] = []

    def mutate(current: Body) -> Body | None:
        old = st.run_status(current)
        conds = st.conditions_of(old)
        if only_if is not None and not only_if(conds):
            return None
        new = edit(current, old.model_copy()) if edit is not None else old.model_copy()
        changed: list[st.Change] = []
        if changes_for is not None:
            generation = current["metadata"].get("generation")
            now = st.now_iso()
            new_conds, changed = st.apply_changes(conds, changes_for(conds), generation, now)
            # The GitOps-readable conditions follow the run's own (no Events of their own).
            new_conds = st.apply_lifecycle(
                new_conds, *st.run_outcome(new_conds), generation=generation, now=now
            )
            new = new.model_copy(
                update={
                    "conditions": st.condition_models(new_conds),
                    "observed_generation": generation,
                    "phase": st.derive_phase(new_conds),
                    "protocol": spec_protocol(current.get("spec")),
                }
            )
            started = parse_time(st.agent_start_time(pod))
            if started is not None and new.start_time is None:
                new.start_time = started
            if st.is_terminal(new_conds) and new.completion_time is None:
                new.completion_time = parse_time(now)
        wire = st.status_wire(new)
        if wire == st.status_wire(old):
            return None
        transitions[:] = changed
        refs[:] = [current]
        return wire

    if kube.update_status(namespace, name, mutate, initial=run, written=RUNS.saw) is not None and transitions:
        post_events(kube, refs[0], transitions)
    return transitions
