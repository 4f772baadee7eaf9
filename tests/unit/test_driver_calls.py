"""The driver's call records in batches (`a2rl.records.driver_calls`): read back in call order
whatever order the calls ended in, runs recorded one object a call still read, a damaged line
costs only itself."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from a2rl.records.driver import DriverCallRecord
from a2rl.records.driver_calls import encode_batch, iter_driver_calls
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore

LAYOUT = RunLayout.from_prefix("default/run-1234")


def call(index: int) -> DriverCallRecord:
    return DriverCallRecord(
        index=index,
        protocol="anthropic-messages",
        method="POST",
        path="/v1/messages",
        status=200,
        response_body={"content": [{"type": "text", "text": f"answer {index}\nsecond line"}]},
    )


def put_batch(store: LocalStore, indexes: list[int]) -> None:
    lines = (json.dumps(call(i).to_json()) for i in indexes)
    store.put_bytes(LAYOUT.driver_call_batch(min(indexes)), encode_batch(lines))


def test_calls_that_ended_out_of_order_are_read_in_call_order(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    # calls end out of order: 5 (a long stream) ends in the first batch, 7 in the second, …
    put_batch(store, [2, 1, 5])
    put_batch(store, [3, 7, 4])
    put_batch(store, [6, 9])
    put_batch(store, [8])
    records = list(iter_driver_calls(store, LAYOUT))
    assert [r.index for r in records] == list(range(1, 10))
    assert records[4].response_body == call(5).response_body  # newlines inside strings survive


def test_a_record_is_yielded_before_later_objects_are_read(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    put_batch(store, [1, 2])
    put_batch(store, [3])
    calls = iter_driver_calls(store, LAYOUT)
    assert next(calls).index == 1
    store.delete(LAYOUT.driver_call_batch(3))  # not read yet: gone without a trace
    assert [r.index for r in calls] == [2]


def test_runs_recorded_one_object_a_call_are_still_read(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for i in (1, 2):
        store.put_json(f"{LAYOUT.driver_calls}/{i:05d}.json", call(i).to_json())
    put_batch(store, [3, 4])
    assert [r.index for r in iter_driver_calls(store, LAYOUT)] == [1, 2, 3, 4]


def test_a_damaged_line_or_object_costs_only_itself(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = LocalStore(tmp_path)
    good = [json.dumps(call(i).to_json()) for i in (1, 3)]
    store.put_bytes(
        LAYOUT.driver_call_batch(1),
        encode_batch([good[0], '{"index": 2, "protocol": ', '{"index": "two"}', "", good[1]]),
    )
    store.put_bytes(f"{LAYOUT.driver_calls}/00004.json", b"\xff\xfe not json")
    store.put_bytes(f"{LAYOUT.driver_calls}/notes.txt", b"not a record")
    with caplog.at_level(logging.WARNING):
        assert [r.index for r in iter_driver_calls(store, LAYOUT)] == [1, 3]
    assert "00001.jsonl line 2 is not valid JSON" in caplog.text
    assert "00001.jsonl line 3 is not a valid DriverCallRecord" in caplog.text
    assert "00004.json is not valid JSON" in caplog.text


def test_no_records_no_calls(tmp_path: Path) -> None:
    assert list(iter_driver_calls(LocalStore(tmp_path), LAYOUT)) == []
