"""No held-out content reaches the agent, for every registered task (the registry is iterated,
so a new task is covered as soon as it is registered).

For each task: stage small data (tests/support/task_sources.py), build the agent's workspace with the
runner's own `create_workspace` (data/, description.md, instructions.md, …), and check **by
content** that nothing of the held-out split is in any workspace file:

- every held-out text (string fields of 24+ characters of the held-out JSONL rows, ids
  excepted, whitespace-normalised and case-folded) is absent from all workspace text (JSON and
  JSONL files are searched by their string values, other files as text);
- no held-out row (without its id) equals a workspace row, compared by hash;
- no other held-out file (game files, …) has a twin in the workspace by hash or by text, except
  files the task declares public by design (`shared` in tests/support/task_sources.py).

Then the grading API: an evaluation that stores every held-out row in its details and result
must still answer /submit, /submissions, /time and /health without any of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.evaluate import write_result
from a2rl_recorder.app import serve
from a2rl_tasks import TASKS, get_task
from a2rl_tasks.artifacts import StagedArtifacts, stage_artifacts

from a2rl.errors import A2rlError
from a2rl.records.result import ResultRecord
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore
from a2rl.workspace import Workspace, create_workspace, render_instructions
from tests.support.recorder_support import LAYOUT, make_config, make_model
from tests.support.task_sources import TaskSource, source_for

MIN_CHARS = 24
TASK_NAMES = sorted(TASKS)


def norm(text: str) -> str:
    return " ".join(text.split()).lower()


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def jsonl_rows(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def row_hash(row: Any) -> str:
    if isinstance(row, dict):
        row = {k: v for k, v in row.items() if k != "id"}
    return hashlib.sha256(norm(json.dumps(row, sort_keys=True, ensure_ascii=False)).encode()).hexdigest()


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != "manifest.json")


@dataclass
class Visible:
    """Everything in the agent's workspace, indexed for content checks."""

    text: str
    row_hashes: set[str]
    file_hashes: set[str]


def index_visible(root: Path) -> Visible:
    parts: list[str] = []
    rows: set[str] = set()
    hashes: set[str] = set()
    for path in files(root):
        raw = path.read_bytes()
        hashes.add(hashlib.sha256(raw).hexdigest())
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if path.suffix == ".jsonl":
            for row in jsonl_rows(path):
                rows.add(row_hash(row))
                parts.extend(norm(s) for s in strings(row))
        elif path.suffix == ".json":
            try:
                parts.extend(norm(s) for s in strings(json.loads(text)))
            except ValueError:
                parts.append(norm(text))
        else:
            parts.append(norm(text))
    return Visible("\n".join(parts), rows, hashes)


@dataclass
class Heldout:
    texts: list[str]
    rows: list[Any]
    other_files: list[Path]


def index_heldout(heldout_dir: Path, shared: tuple[str, ...], shared_fields: tuple[str, ...] = ()) -> Heldout:
    texts: list[str] = []
    rows: list[Any] = []
    other: list[Path] = []
    for path in files(heldout_dir):
        rel = path.relative_to(heldout_dir).as_posix()
        if rel in shared:
            continue
        if path.suffix == ".jsonl":
            for row in jsonl_rows(path):
                rows.append(row)
                items = row.items() if isinstance(row, dict) else [("", row)]
                texts.extend(
                    norm(s)
                    for k, v in items
                    if k != "id" and k not in shared_fields
                    for s in strings(v)
                    if len(norm(s)) >= MIN_CHARS
                )
        else:
            other.append(path)
    return Heldout(texts, rows, other)


def leaks(heldout_dir: Path, visible_root: Path, src: TaskSource) -> list[str]:
    """Everything of the held-out split found in `visible_root`, described."""
    held = index_heldout(heldout_dir, src.shared, src.shared_fields)
    vis = index_visible(visible_root)
    found = [f"text {t[:60]!r}" for t in held.texts if t in vis.text]
    found += [
        f"row {r.get('id') if isinstance(r, dict) else r!r}"
        for r in held.rows
        if row_hash(r) in vis.row_hashes
    ]
    for path in held.other_files:
        raw = path.read_bytes()
        if hashlib.sha256(raw).hexdigest() in vis.file_hashes:
            found.append(f"file {path.name} (same bytes)")
            continue
        try:
            text = norm(raw.decode("utf-8"))
        except UnicodeDecodeError:
            continue
        if len(text) >= MIN_CHARS and text in vis.text:
            found.append(f"file {path.name} (same text)")
    return found


def stage_small(task_name: str, root: Path) -> StagedArtifacts:
    source = source_for(task_name).build(root / "src")
    try:
        return stage_artifacts(get_task(task_name), source=source, root=root / "staged")
    except A2rlError as exc:
        pytest.fail(
            f"{task_name}: cannot stage small test data ({exc}); "
            "add a builder to tests/support/task_sources.py"
        )


def make_agent_workspace(task_name: str, staged: StagedArtifacts, root: Path) -> Workspace:
    model = make_model(root / "base-model")
    return create_workspace(
        root / "ws",
        model_src=model,
        base_model_name="tiny/base",
        train_dir=staged.train_dir,
        heldout_dir=staged.heldout_dir,
        description=get_task(task_name).description(),
        instructions=render_instructions(
            task=task_name,
            base_model="tiny/base",
            base_name="base",
            budget_s=3600,
            grace_s=10,
            max_submissions=None,
        ),
        meta={"start_time": 1, "timeout_s": 3600},
    )


@pytest.fixture(scope="module", params=TASK_NAMES)
def staged_task(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    name: str = request.param
    root = tmp_path_factory.mktemp(f"leak-{name}")
    staged = stage_small(name, root)
    ws = make_agent_workspace(name, staged, root)
    return name, staged, ws


def test_heldout_split_is_not_empty(staged_task: Any) -> None:
    name, staged, _ = staged_task
    held = index_heldout(staged.heldout_dir, source_for(name).shared, source_for(name).shared_fields)
    assert held.rows or held.other_files, f"{name}: nothing held out"
    assert held.texts or held.other_files, f"{name}: no held-out text to check"


def test_workspace_holds_nothing_of_the_heldout_split(staged_task: Any) -> None:
    name, staged, ws = staged_task
    assert any(ws.data_dir.iterdir()), f"{name}: the agent got no training data"
    assert leaks(staged.heldout_dir, ws.root, source_for(name)) == []


def test_the_check_catches_a_copied_heldout_item(staged_task: Any, tmp_path: Path) -> None:
    """Negative control: one held-out item, renamed and reformatted, is found."""
    name, staged, _ = staged_task
    held = index_heldout(staged.heldout_dir, source_for(name).shared, source_for(name).shared_fields)
    visible = tmp_path / "visible"
    visible.mkdir()
    if held.rows:
        # The last row with a text long enough to identify it (a leak of any row is a "row " finding).
        long_enough = [r for r in held.rows if any(len(norm(s)) >= MIN_CHARS for s in strings(r))]
        row = (long_enough or held.rows)[-1]
        (visible / "notes.md").write_text("Remember:\n" + "\n\n".join(strings(row)).upper() + "\n")
        (visible / "copy.jsonl").write_text(json.dumps({**row, "id": "renamed"}, indent=None) + "\n")
        found = leaks(staged.heldout_dir, visible, source_for(name))
        assert any(f.startswith("row ") for f in found)
        if held.texts:
            assert any(f.startswith("text ") for f in found)
    else:
        path = held.other_files[0]
        (visible / "renamed.bin").write_bytes(path.read_bytes())
        assert leaks(staged.heldout_dir, visible, source_for(name))


class LeakyEvaluation:
    """An evaluation that keeps *all* held-out rows in its per-item details and even in extra
    result fields, written with the grader's own `write_result`: the worst an evaluator could
    store. The grading API must still return none of it."""

    def __init__(self, store: ObjectStore, layout: RunLayout, task: str, heldout_dir: Path, src: TaskSource):
        self.store, self.layout, self.task = store, layout, task
        self.held = index_heldout(heldout_dir, src.shared, src.shared_fields)
        self.other_texts = [p.read_text(errors="replace") for p in self.held.other_files]

    def evaluate(self, index: int) -> ResultRecord:
        manifest = self.store.get_json(self.layout.submission_manifest(index))
        details = [{"item": row, "gold": row, "correct": False} for row in self.held.rows]
        details += [{"file": text} for text in self.other_texts]
        result = {
            "index": index, "task": self.task, "score": 12.5, "error": None, "n": len(details), "correct": 0,
            "metrics": {"accuracy": 12.5}, "model_digest": manifest["model_digest"],
            "first_items": details[:3],
        }  # fmt: skip
        record = ResultRecord.from_json(result)
        write_result(self.store, self.layout, index, record, details)
        return record


def _call(url: str, body: dict[str, Any] | None = None) -> str:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if body else "GET",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(resp.read().decode())


def test_grading_api_returns_no_heldout_content(staged_task: Any, tmp_path: Path) -> None:
    name, staged, ws = staged_task
    src = source_for(name)
    store = LocalStore(tmp_path / "store")
    dispatcher = LeakyEvaluation(store, LAYOUT, name, staged.heldout_dir, src)
    make_model(ws.output_dir / "v1", score=1.0)
    config = make_config(ws.root, task=name)
    stop, ready, port = threading.Event(), threading.Event(), [0]

    def on_ready(p: int) -> None:
        port[0] = p
        ready.set()

    thread = threading.Thread(
        target=serve, kwargs={"config": config, "store": store, "dispatcher": dispatcher, "stop": stop,
                              "on_ready": on_ready}, daemon=True,
    )  # fmt: skip
    thread.start()
    try:
        assert ready.wait(15)
        url = f"http://127.0.0.1:{port[0]}"
        answers = [_call(f"{url}/submit", {"model_path": "output/v1"})]
        answers += [_call(f"{url}/{path}") for path in ("submissions", "time", "health")]
    finally:
        stop.set()
        thread.join(30)
    submit = json.loads(answers[0])
    assert submit["score"] == 12.5 and submit["submission_id"] == 1
    # The details really were stored (so the check below is meaningful) …
    stored = jsonl_rows(tmp_path / "store" / LAYOUT.submission_details(1))
    stored_text = "\n".join(norm(x) for x in strings(stored))
    held = dispatcher.held
    assert held.texts or dispatcher.other_texts
    assert all(t in stored_text for t in held.texts)
    # … and no answer carries any of it (compared on the decoded JSON values and on the raw bytes).
    decoded = [json.loads(a) for a in answers]
    replies = "\n".join([*(norm(x) for x in strings(decoded)), norm(" ".join(answers))])
    assert [t[:60] for t in held.texts if t in replies] == []
    for text in dispatcher.other_texts:
        assert norm(text)[:200] not in replies
    assert "gold" not in replies and "first_items" not in replies
    # The workspace still holds nothing held out after a graded submission.
    assert leaks(staged.heldout_dir, ws.root, src) == []
    assert os.access(ws.data_dir, os.R_OK)
