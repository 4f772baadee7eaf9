"""The agent's workspace (docs/agents.md): code/, output/, models/<base>/, data/, docs, run_meta.json.

One builder (`build_workspace`) for the local runner and the cluster set-up container, and one
writer of `run_meta.json` (`write_run_meta`, `update_run_meta`) for the builder, the local runner
and the recorder. Base model and train split are *copies* made read-only, so an agent can
neither corrupt the shared caches nor the baseline. The held-out split is never copied here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl.constants import (
    WS_CODE,
    WS_DATA,
    WS_DESCRIPTION,
    WS_INSTRUCTIONS,
    WS_MODELS,
    WS_OUTPUT,
    WS_RUN_META,
)
from a2rl.errors import A2rlError
from a2rl.protocols import DEFAULT_PROTOCOL, PROTOCOL_REFERENCE, EvalProtocol
from a2rl.reference_instructions import REFERENCE_INSTRUCTIONS

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: What a freshly formatted volume already holds (ext4's `lost+found`): not the agent's files.
MOUNT_ARTIFACTS = frozenset({"lost+found"})


def sanitize_model_name(name: str) -> str:
    """A single safe path segment for `models/<name>/` (`Qwen/Qwen2.5-1.5B` → `Qwen_Qwen2.5-1.5B`)."""
    safe = _UNSAFE.sub("_", name.strip()).strip("._") or "model"
    return safe[:200]


@dataclass(frozen=True)
class Workspace:
    """The paths of a workspace rooted at `root`: a local directory, or the pod's mount path."""

    root: Path
    base_name: str

    @classmethod
    def for_base_model(cls, root: Path, base_model_name: str) -> Workspace:
        """The workspace at `root` holding the base model `base_model_name` (sanitized)."""
        return cls(root=root, base_name=sanitize_model_name(base_model_name))

    @property
    def code_dir(self) -> Path:
        return self.root / WS_CODE

    @property
    def output_dir(self) -> Path:
        return self.root / WS_OUTPUT

    @property
    def model_dir(self) -> Path:
        return self.root / WS_MODELS / self.base_name

    @property
    def data_dir(self) -> Path:
        return self.root / WS_DATA

    @property
    def run_meta(self) -> Path:
        return self.root / WS_RUN_META


# --- run_meta.json: the agent's copy of the clock ---------------------------------------------------
# The agent can write this file, so nothing reads scores or times back from it. Three processes
# write it through the two functions below: the workspace builder (local runner, cluster set-up
# container), the local runner (start and end of the clock) and the recorder (start of the clock,
# `last_submit_time`).
RUN_META_MODE = 0o644


def run_meta(
    start_time: float | None,
    timeout_s: int,
    *,
    last_submit_time: float | None = None,
    end_time: float | None = None,
) -> dict[str, Any]:
    """`run_meta.json` as the reference writes it (integer unix seconds)."""
    return {
        "start_time": _seconds(start_time),
        "timeout_s": int(timeout_s),
        "last_submit_time": _seconds(last_submit_time),
        "end_time": _seconds(end_time),
    }


def _seconds(t: float | None) -> int | None:
    return None if t is None else int(t)


def write_run_meta(workspace: Path, meta: dict[str, Any]) -> None:
    """Replace `<workspace>/run_meta.json` atomically (a temporary file in the same directory, then
    `os.replace`): a reader, the agent included, sees the old file or the new one, never a part.
    A symlink at that name is replaced itself; its target is never written."""
    path = workspace / WS_RUN_META
    fd, tmp = tempfile.mkstemp(prefix=f".{WS_RUN_META}.", dir=workspace)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")
        os.chmod(tmp, RUN_META_MODE)  # mkstemp creates 0o600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


#: `run_meta.json` is read only up to this size (the agent can write it).
RUN_META_MAX_BYTES = 1 << 20


def read_run_meta_bytes(workspace: Path) -> bytes:
    """The bytes of `<workspace>/run_meta.json`, never through a link: opened with `O_NOFOLLOW |
    O_NONBLOCK`, it must be a regular file of at most `RUN_META_MAX_BYTES` (else `OSError` or
    `ValueError`). A symlink the agent put there (say, to a baseline-cache entry) is not read."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(workspace / WS_RUN_META, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{WS_RUN_META} is not a regular file")
        if st.st_size > RUN_META_MAX_BYTES:
            raise ValueError(f"{WS_RUN_META} is larger than {RUN_META_MAX_BYTES} bytes")
        data = os.pread(fd, RUN_META_MAX_BYTES + 1, 0)
        if len(data) > RUN_META_MAX_BYTES:
            raise ValueError(f"{WS_RUN_META} is larger than {RUN_META_MAX_BYTES} bytes")
        return data
    finally:
        os.close(fd)


def update_run_meta(workspace: Path, **times: float | None) -> None:
    """Merge `times` (as integer seconds) into `<workspace>/run_meta.json`, keeping every other field
    (what another process wrote, e.g. the recorder's `last_submit_time`). A missing or unreadable
    file (the agent may overwrite it; a symlink, a FIFO, an oversized or too deeply nested file
    counts as unreadable: `read_run_meta_bytes`) is started afresh."""
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError, RecursionError):
        loaded = json.loads(read_run_meta_bytes(workspace))
        if isinstance(loaded, dict):
            meta = loaded
    meta.update({k: _seconds(v) for k, v in times.items()})
    write_run_meta(workspace, meta)


def make_read_only(path: Path) -> None:
    """chmod a-w,a+rX on `path` and everything below it (directories last, so the walk can
    finish): read-only for everyone, readable by everyone — the sandboxed agent of a root runner
    is another uid (`a2rl_runner.sandbox.identity`) and must read the base model and the data."""
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            _drop_write(Path(dirpath) / name)
        for name in dirnames:
            _drop_write(Path(dirpath) / name)
    _drop_write(path)


def _drop_write(p: Path) -> None:
    if p.is_symlink():
        return
    mode = p.stat().st_mode
    readable = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
    if p.is_dir() or mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
        readable |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
    p.chmod((mode | readable) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(path: Path) -> None:
    """Undo `make_read_only` (for deleting a workspace)."""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
    if path.exists():
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def remove_workspace(root: Path) -> None:
    if root.exists():
        make_writable(root)
        shutil.rmtree(root)


def _inside(child: Path, parent: Path) -> bool:
    child, parent = child.resolve(), parent.resolve()
    return child == parent or parent in child.parents


def create_workspace(
    root: Path,
    *,
    model_src: Path,
    base_model_name: str,
    train_dir: Path,
    heldout_dir: Path | None,
    description: str,
    instructions: str,
    meta: dict[str, Any],
    into_empty_mount: bool = False,
) -> Workspace:
    """Create the workspace at `root`, which must not exist yet — or, with `into_empty_mount`
    (a volume mounted there in a pod), must be an empty directory."""
    if heldout_dir is not None and (_inside(heldout_dir, train_dir) or _inside(train_dir, heldout_dir)):
        raise A2rlError(f"refusing to stage data: held-out {heldout_dir} overlaps train split {train_dir}")
    if into_empty_mount:
        if not root.is_dir():
            raise A2rlError(f"workspace volume not mounted: {root} is not a directory")
        if leftovers := sorted(p.name for p in root.iterdir() if p.name not in MOUNT_ARTIFACTS):
            raise A2rlError(
                f"workspace {root} is not empty ({', '.join(leftovers[:5])}): "
                "a workspace is set up once, before the agent starts"
            )
    elif root.exists():
        raise A2rlError(f"workspace already exists: {root}")
    ws = Workspace.for_base_model(root, base_model_name)
    root.mkdir(parents=True, exist_ok=into_empty_mount)
    ws.code_dir.mkdir()
    ws.output_dir.mkdir()
    ws.model_dir.parent.mkdir()
    # symlinks=False copies the files behind links (HF cache snapshots are links into blobs/).
    shutil.copytree(model_src, ws.model_dir, symlinks=False)
    shutil.copytree(train_dir, ws.data_dir, symlinks=False)
    make_read_only(ws.model_dir)
    make_read_only(ws.model_dir.parent)
    make_read_only(ws.data_dir)
    (root / WS_DESCRIPTION).write_text(description)
    (root / WS_INSTRUCTIONS).write_text(instructions)
    write_run_meta(root, meta)
    return ws


@dataclass(frozen=True)
class WorkspaceRules:
    """What `instructions.md` and `run_meta.json` tell the agent (the same in local and cluster
    mode): the task, the base model, the budget and the submission cap; `protocol` picks the
    instructions (`instructions_for`)."""

    task: str
    base_model: str
    budget_s: int
    grace_s: int
    max_submissions: int | None
    protocol: EvalProtocol = DEFAULT_PROTOCOL


def instructions_for(rules: WorkspaceRules) -> str:
    """`instructions.md`: under `reference` the reference's own text, verbatim
    (`a2rl.reference_instructions`), plus one line when the run caps submissions (the reference
    had no cap and so says nothing of one); under `a2rl` ours (`render_instructions`)."""
    if rules.protocol == PROTOCOL_REFERENCE:
        if rules.max_submissions:
            cap = f"You may submit at most {rules.max_submissions} times; further submissions are refused."
            return f"{REFERENCE_INSTRUCTIONS}\n## Submission limit (this run)\n- {cap}\n"
        return REFERENCE_INSTRUCTIONS
    return render_instructions(
        task=rules.task,
        base_model=rules.base_model,
        base_name=sanitize_model_name(rules.base_model),
        budget_s=rules.budget_s,
        grace_s=rules.grace_s,
        max_submissions=rules.max_submissions,
    )


def build_workspace(
    root: Path,
    rules: WorkspaceRules,
    *,
    description: str,
    model_dir: Path,
    train_dir: Path,
    heldout_dir: Path | None = None,
    into_empty_mount: bool = False,
) -> Workspace:
    """The one workspace builder, used by the local runner and the cluster set-up container.

    From a resolved base model directory and the train split: the workspace tree (read-only
    copies of both), `description.md`, `instructions.md` rendered from `rules`, and
    `run_meta.json` with the budget but no clock yet (whoever starts the agent's clock sets
    `start_time`). `heldout_dir`, when the caller has one, is only checked not to overlap the
    train split; `into_empty_mount` as in `create_workspace`."""
    return create_workspace(
        root,
        model_src=model_dir,
        base_model_name=rules.base_model,
        train_dir=train_dir,
        heldout_dir=heldout_dir,
        description=description,
        instructions=instructions_for(rules),
        meta=run_meta(None, rules.budget_s),
        into_empty_mount=into_empty_mount,
    )


def _duration(seconds: int) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    parts = [f"{h} h" if h else "", f"{m} min" if m else "", f"{s} s" if s else ""]
    return " ".join(p for p in parts if p) or "0 s"


def render_instructions(
    *,
    task: str,
    base_model: str,
    base_name: str,
    budget_s: int,
    grace_s: int,
    max_submissions: int | None,
) -> str:
    """The `a2rl` protocol's general rules (task details are in description.md); route-neutral:
    any post-training method, none suggested first."""
    cap = (
        f"You may submit at most **{max_submissions}** times; further submissions are refused."
        if max_submissions
        else "There is no limit on the number of submissions, but every evaluation takes time "
        "from your budget."
    )
    return f"""# Instructions

You are a post-training agent. Your goal is to make the base model **`{base_model}`** as good as
possible on the task **`{task}`**, within a fixed time budget, by writing and running your own
training pipeline (SFT, GRPO, PPO, DPO, … — any method is allowed). The task, its data and exactly
how submissions are scored are described in `description.md`: read it first.

## Your workspace
Your current directory is the workspace (`$WORKSPACE`). Use relative paths and stay inside it.

- `description.md`: the task: goal, data format, evaluation protocol, hints.
- `instructions.md`: these rules.
- `models/{base_name}/` (`$MODEL_PATH`): the base model, read-only. Copy it if you need a
  writable version.
- `data/` (`$DATA_PATH`): the training data, read-only. The held-out evaluation data is not
  available to you.
- `code/`: put your code here.
- `output/` (`$OUTPUT_DIR`): save the models you want to submit here, one directory each
  (`output/v1`, `output/v2`, …).
- `run_meta.json`: timing: `start_time` and `end_time` (unix seconds), `timeout_s`,
  `last_submit_time`.

Environment variables: `TASK`, `BASE_MODEL`, `WORKSPACE`, `MODEL_PATH`, `DATA_PATH`, `OUTPUT_DIR`,
`GRADING_SERVER_URL`, and `SEED` (a seed you may use for reproducibility).

## Time budget
You have **{budget_s} seconds ({_duration(budget_s)})** of wall-clock time, counted from
`start_time` in `run_meta.json`. Check the time left with `GET $GRADING_SERVER_URL/time`
(`remaining`, in seconds). When the budget is over, your processes receive SIGTERM and, {grace_s}
seconds later, SIGKILL — including any process you started in the background. Evaluations run
while your clock is running, so leave time for your last submission to be scored.

## Grading API
The grading server is at `$GRADING_SERVER_URL` (on localhost).

- `POST /submit` with JSON `{{"model_path": "output/v1"}}` evaluates the model directory on the
  held-out set and answers `{{"submission_id", "score", "baseline_score", "improvement", "best",
  "total_submissions", "elapsed_seconds"}}` (plus `"error"` when the model could not be evaluated).
  The request returns when the evaluation is finished.
- `GET /time` returns `start_time`, `timeout_s`, `elapsed`, `remaining` and `deadline`.
- `GET /submissions` lists your submissions with their scores.
- `GET /health` tells whether the server is up.

Example:

```sh
curl -s -X POST "$GRADING_SERVER_URL/submit" -H 'Content-Type: application/json' \\
     -d '{{"model_path": "output/v1"}}'
```

## Rules for submissions
- Submit only directories under `output/`. Paths elsewhere, or symbolic links leading out of the
  workspace, are refused.
- A submission is a complete Hugging Face model directory: `config.json`, the weights
  (`*.safetensors`), and the tokenizer files. Merge LoRA adapters into the model before saving
  (`merge_and_unload()`). Models are loaded with `trust_remote_code=False`.
- Do not submit a copy of the base model: it is detected and gains nothing.
- {cap}
- **Best of budget**: your result is the best score among all your submissions, so submit an
  early working model, then keep improving.
- Only the score comes back: the held-out questions, answers and per-item results are never
  shown to you.

## What is recorded
Everything needed to audit the run is recorded outside your workspace: every submitted model and
the exact contents of `code/` at the time of each submission, snapshots of `code/` whenever it
changes, every score, and your program's output. Keep the code that produced each submission in
`code/`. A report (scores over time, the post-training route you took, the code timeline) is
written when the run ends.

## Suggested approach
Read `description.md` and a few lines of the training data, get a simple pipeline working end to
end, submit a first model early to check the format, then iterate on data, method and
hyper-parameters while watching the time left.
"""
