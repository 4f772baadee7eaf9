"""The agent's clock in a pod: its start is recorded once in the store, so it survives a restart.

Local mode hands the recorder the start (`A2RL_RUN_START`, written by the runner). A pod's
recorder has no such variable: the first recorder of the run writes `<prefix>/clock.json`
(`RunLayout.run_clock`) with the time it started, and a recorder restarted in the same pod (a
crash, an OOM kill of the native sidecar) reads it back instead of starting the clock again —
otherwise the agent's budget (`GET /time`, `run_meta.json`, the submission deadline) would start
over. The record goes through the recorder's `SpoolingStore`: while the store is unreachable it
waits in the spool (an `emptyDir` of the recorder that outlives the container), and a restarted
recorder reads it from there (read-your-writes). Only the recorder holds store credentials, so
the agent can neither read nor move it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from a2rl.errors import NotFoundError
from a2rl.records.times import iso_utc
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout

log = logging.getLogger(__name__)

#: Reads of the record that fail for another reason than "absent" (the store unreachable, the
#: record not in the spool) are retried this long; then the clock starts now and that is recorded
#: (logged loudly). The startup probe gives the recorder 300 s.
READ_RETRY_S = 120.0


def recorded_run_start(
    store: ObjectStore,
    layout: RunLayout,
    *,
    now: Callable[[], float] = time.time,
    retry_s: float = READ_RETRY_S,
) -> float:
    """The run's start from `<prefix>/clock.json`; written with `now()` when the run has none yet."""
    deadline = time.monotonic() + retry_s
    delay = 0.5
    while True:
        try:
            doc = store.get_json(layout.run_clock)
            start = float(doc["start_time"])
            log.info("agent clock resumed from %s: started %s", layout.run_clock, iso_utc(start))
            return start
        except NotFoundError:
            break
        except (KeyError, TypeError, ValueError) as exc:  # only the recorder writes it: say so, restart
            log.error("unreadable %s (%s): the clock starts now", layout.run_clock, exc)
            break
        except Exception as exc:
            if time.monotonic() >= deadline:
                log.error("cannot read %s (%s): the clock starts now", layout.run_clock, exc)
                break
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
    start = now()
    store.put_json(layout.run_clock, {"start_time": start, "started_at": iso_utc(start)})
    return start
