"""`driver/calls/<n>.jsonl`: the driver gateway's call records, written in batches, and reading
them back in call order.

The gateway's writer stores what it gathered in one batch as one object, one compact JSON
record (`DriverCallRecord`) a line, named after the lowest call number in it: one store write per
batch instead of one per call (a local file's create-write-rename cost more CPU than the rest of
the record; against MinIO it is one signed PUT per batch). A batch holds the calls that *ended*
within it, so numbers interleave across batches (a long stream ends after calls started later),
but every call in a batch has a number ≥ the batch's name. Runs recorded before batching hold one
`driver/calls/<n>.json` per call; both are read.
"""

from __future__ import annotations

import heapq
import json
import logging
import re
from collections.abc import Iterable, Iterator

from a2rl.errors import NotFoundError
from a2rl.records.base import RecordError, parse_record
from a2rl.records.driver import DriverCallRecord
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout

log = logging.getLogger(__name__)

#: A call-record object's key: `<n>.jsonl` (a batch, n = its lowest call) or `<n>.json` (one call).
CALL_OBJECT_KEY = re.compile(r"/driver/calls/(\d+)\.json(l?)$")


def encode_batch(lines: Iterable[str]) -> bytes:
    """A batch object's bytes from its records' compact JSON (one line each, no newline inside:
    `json.dumps` escapes newlines in strings)."""
    return "".join(f"{line}\n" for line in lines).encode()


def _objects(store: ObjectStore, layout: RunLayout) -> list[tuple[int, str, bool]]:
    """(lowest call number, key, is a batch) of every call-record object, by number."""
    found = []
    for key in store.list(layout.driver_calls):
        m = CALL_OBJECT_KEY.search(key)
        if m:
            found.append((int(m.group(1)), key, bool(m.group(2))))
    found.sort()
    return found


def _read_object(store: ObjectStore, key: str, batch: bool) -> list[DriverCallRecord]:
    """The readable records of one object (unreadable lines logged and skipped)."""
    try:
        raw = store.get_bytes(key)
    except NotFoundError:
        return []
    where = store.url_for(key)
    lines = raw.splitlines() if batch else [raw]
    records = []
    for n, line in enumerate(lines, 1):
        if batch and not line.strip():
            continue
        at = f"{where} line {n}" if batch else where
        try:
            records.append(parse_record(DriverCallRecord, json.loads(line), at))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            log.warning("%s is not valid JSON: %s", at, exc)
        except RecordError as exc:
            log.warning("%s", exc)
    return records


def iter_driver_calls(store: ObjectStore, layout: RunLayout) -> Iterator[DriverCallRecord]:
    """The run's readable call records in call-number order, one object read at a time.

    Objects are read by their names; a record is yielded once the next object's name is above
    its number (no later object can hold a lower one), so only the records of calls that ended
    out of order wait in memory.
    """
    objects = _objects(store, layout)
    pending: list[tuple[int, int, DriverCallRecord]] = []  # (number, read order, record)
    seq = 0
    for i, (_, key, batch) in enumerate(objects):
        for record in _read_object(store, key, batch):
            heapq.heappush(pending, (record.index, seq, record))
            seq += 1
        bound = objects[i + 1][0] if i + 1 < len(objects) else None
        while pending and (bound is None or pending[0][0] < bound):
            yield heapq.heappop(pending)[2]
