"""The code watcher: a revision after a change (debounced), none without one, a final flush.

The debounce runs on an injected clock (no waiting); one test keeps the real polling thread.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from a2rl_recorder.snapshots import CodeSnapshotter, CodeWatcher, Debounce

from a2rl.store.cas import hash_tree
from a2rl.store.local import LocalStore
from tests.support.recorder_support import LAYOUT

QUIET_S = 30.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _watcher(tmp_path: Path, clock: FakeClock | None = None) -> tuple[CodeWatcher, LocalStore, Path]:
    code = tmp_path / "code"
    code.mkdir()
    store = LocalStore(tmp_path / "store")
    snap = CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1 << 20)
    if clock is None:
        return CodeWatcher(snap, poll_s=0.05, debounce_s=0.3), store, code
    return CodeWatcher(snap, poll_s=1.0, debounce_s=QUIET_S, clock=clock), store, code


def _revisions(store: LocalStore) -> list[dict[str, object]]:
    return [store.get_json(k) for k in store.list(LAYOUT.revisions)]


A, B = (("a.py", 1, 1),), (("a.py", 2, 2),)


@pytest.mark.parametrize(
    ("observations", "due_at"),
    [
        # (seconds after the previous observation, signature) -> the steps at which a snapshot is due
        ([(0, A), (10, A), (20, A)], [2]),  # quiet for 30 s after the first sight
        ([(0, A), (29, A)], []),  # not quiet long enough
        ([(0, A), (20, B), (20, B), (20, B)], [3]),  # a change restarts the quiet period
        ([(0, A), (5, B), (5, A), (5, B), (5, A), (30, A)], [5]),  # a burst gives one snapshot
    ],
    ids=["quiet", "too-soon", "change-restarts", "burst"],
)
def test_debounce(observations: list[tuple[float, object]], due_at: list[int]) -> None:
    debounce, now, due = Debounce(QUIET_S), 0.0, []
    for step, (dt, sig) in enumerate(observations):
        now += dt
        if debounce.due(sig, now):  # type: ignore[arg-type]
            due.append(step)
            debounce.recorded(sig)  # type: ignore[arg-type]
    assert due == due_at


def test_a_recorded_tree_is_not_due_again_until_it_changes() -> None:
    debounce = Debounce(QUIET_S)
    assert not debounce.due(A, 0.0)
    assert debounce.due(A, 30.0)
    debounce.recorded(A)
    assert not debounce.due(A, 300.0)
    assert not debounce.due(B, 301.0)
    assert debounce.due(B, 331.0)


def test_rapid_edits_make_one_revision_after_the_debounce(tmp_path: Path) -> None:
    clock = FakeClock()
    watcher, store, code = _watcher(tmp_path, clock)
    for i in range(10):  # a burst of edits, each shorter apart than the debounce
        (code / "train.py").write_text(f"step = {i}\n")
        (code / f"f{i % 3}.py").write_text(str(i))
        assert watcher.poll() is None
        clock.advance(QUIET_S / 10)
    assert _revisions(store) == []  # still inside the burst
    clock.advance(QUIET_S)
    assert watcher.poll() is not None
    clock.advance(QUIET_S * 3)
    assert watcher.poll() is None
    revisions = _revisions(store)
    assert len(revisions) == 1
    assert revisions[0]["reason"] == "change" and revisions[0]["index"] == 1
    assert revisions[0]["digest"] == hash_tree(code).digest

    (code / "train.py").write_text("step = 'final'\n")
    assert watcher.poll() is None  # the change is seen ...
    clock.advance(QUIET_S)
    assert watcher.poll() is not None  # ... and recorded after the quiet period
    assert _revisions(store)[1]["digest"] == hash_tree(code).digest


def test_no_revision_without_a_change(tmp_path: Path) -> None:
    clock = FakeClock()
    watcher, store, code = _watcher(tmp_path, clock)
    (code / "a.py").write_text("a = 1\n")
    watcher.snapshotter.snapshot("submit")
    for _ in range(3):
        watcher.poll()
        clock.advance(QUIET_S)
    # Touching a file without changing its content changes mtimes but not the digest.
    (code / "a.py").write_text("a = 1\n")
    for _ in range(3):
        watcher.poll()
        clock.advance(QUIET_S)
    assert watcher.stop(final=True) is not None
    assert len(_revisions(store)) == 1


def test_empty_code_dir_records_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    watcher, store, _ = _watcher(tmp_path, clock)
    for _ in range(3):
        assert watcher.poll() is None
        clock.advance(QUIET_S)
    assert watcher.stop(final=True) is None
    assert _revisions(store) == []


def test_the_polling_thread_records_a_change_and_flushes_at_stop(tmp_path: Path) -> None:
    watcher, store, code = _watcher(tmp_path)
    watcher.start()
    try:
        (code / "train.py").write_text("x = 1\n")
        end = time.monotonic() + 10
        while not _revisions(store) and time.monotonic() < end:
            time.sleep(0.05)
        assert [r["reason"] for r in _revisions(store)] == ["change"]
        (code / "late.py").write_text("y = 2\n")  # inside the debounce: only the final flush sees it
    finally:
        revision = watcher.stop(final=True)
    assert revision is not None
    assert [r["reason"] for r in _revisions(store)] == ["change", "final"]
