"""kopf's routine success lines, dropped from the operator's log unless `--verbose`.

kopf logs one INFO line per handler call ("Handler 'on_pod' succeeded.", "Timer 'resync'
succeeded.", "Creation is processed: 2 succeeded; 0 failed.") for every watch event of every
object: most of a busy operator's log and a measurable share of its CPU. Failures, retries and the
operator's own INFO lines (children created, runs deleted) stay.
"""

from __future__ import annotations

import logging
import re

ROUTINE = re.compile(
    r"^(Handler|Timer|Daemon) '[^']+' succeeded\.$|^[A-Z][a-z]+ is processed: \d+ succeeded; 0 failed\.$"
)
KOPF_OBJECTS_LOGGER = "kopf.objects"


class RoutineSuccessFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and ROUTINE.match(record.getMessage()))


def quiet_routine_successes() -> None:
    logging.getLogger(KOPF_OBJECTS_LOGGER).addFilter(RoutineSuccessFilter())
