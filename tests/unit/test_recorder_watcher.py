"""The code watcher: a revision after a change (debounced), none without one, a final flush."""

from __future__ import annotations

import time
from pathlib import Path

from a2rl_recorder.snapshots import CodeSnapshotter, CodeWatcher

from a2rl.store.cas import hash_tree
from a2rl.store.local import LocalStore
from tests.support.recorder_support import LAYOUT


def _wait_for(predicate, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _watcher(tmp_path: Path) -> tuple[CodeWatcher, LocalStore, Path]:
    code = tmp_path / "code"
    code.mkdir()
    store = LocalStore(tmp_path / "store")
    snap = CodeSnapshotter(store, LAYOUT, code, max_file_bytes=1 << 20)
    return CodeWatcher(snap, poll_s=0.05, debounce_s=0.4), store, code


def _revisions(store: LocalStore) -> list[dict[str, object]]:
    return [store.get_json(k) for k in store.list(LAYOUT.revisions)]


def test_rapid_edits_make_one_revision_after_the_debounce(tmp_path: Path) -> None:
    watcher, store, code = _watcher(tmp_path)
    watcher.start()
    try:
        for i in range(10):  # a burst of edits, each shorter apart than the debounce
            (code / "train.py").write_text(f"step = {i}\n")
            (code / f"f{i % 3}.py").write_text(str(i))
            time.sleep(0.06)
        assert _revisions(store) == []  # still inside the burst
        assert _wait_for(lambda: len(_revisions(store)) == 1)
        time.sleep(0.6)
        revisions = _revisions(store)
        assert len(revisions) == 1
        assert revisions[0]["reason"] == "change" and revisions[0]["index"] == 1
        assert revisions[0]["digest"] == hash_tree(code).digest

        (code / "train.py").write_text("step = 'final'\n")
        assert _wait_for(lambda: len(_revisions(store)) == 2)
        assert _revisions(store)[1]["digest"] == hash_tree(code).digest
    finally:
        watcher.stop(final=False)


def test_no_revision_without_a_change(tmp_path: Path) -> None:
    watcher, store, code = _watcher(tmp_path)
    (code / "a.py").write_text("a = 1\n")
    watcher.snapshotter.snapshot("submit")
    watcher.start()
    time.sleep(1.0)
    # Touching a file without changing its content changes mtimes but not the digest.
    (code / "a.py").write_text("a = 1\n")
    time.sleep(0.8)
    assert watcher.stop(final=True) is not None
    assert len(_revisions(store)) == 1


def test_empty_code_dir_records_nothing(tmp_path: Path) -> None:
    watcher, store, _ = _watcher(tmp_path)
    watcher.start()
    time.sleep(0.6)
    assert watcher.stop(final=True) is None
    assert _revisions(store) == []


def test_final_flush_records_an_edit_made_inside_the_debounce(tmp_path: Path) -> None:
    watcher, store, code = _watcher(tmp_path)
    watcher.start()
    (code / "late.py").write_text("x = 1\n")
    revision = watcher.stop(final=True)
    assert revision is not None
    assert [r["reason"] for r in _revisions(store)] == ["final"]
