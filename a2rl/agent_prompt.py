"""The one prompt every LLM agent stack gets (docs/agents.md, "Agent stacks").

Built from the workspace only — `description.md`, `instructions.md`, a listing, the first lines
of the training data files, `run_meta.json` — plus the run's budget and operating mode, so it says
nothing the agent could not read itself and holds nothing it must not see (the held-out data is
never in the workspace). `render_prompt` is pure; `workspace_prompt` reads the workspace
(never following a link) and calls it. Only the invocation differs per stack (`a2rl.stacks`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from a2rl.constants import (
    ENV_GRADING_SERVER_URL,
    WS_CODE,
    WS_DATA,
    WS_DESCRIPTION,
    WS_INSTRUCTIONS,
    WS_OUTPUT,
    WS_RUN_META,
)
from a2rl.stacks import AGENT_MODES, MAX_PROMPT_CHARS

#: How much of the workspace the prompt shows.
MAX_LISTING_ENTRIES = 80
LISTING_DEPTH = 3
MAX_DATA_FILES = 6
HEAD_LINES = 5
MAX_HEAD_LINE_CHARS = 400
#: Caps on the documents copied in (description.md is a few KiB for every task).
MAX_DOC_CHARS = 30_000
MAX_READ_BYTES = 1 << 20

MODE_TEXT: dict[str, str] = {
    "free": (
        "Any post-training method is allowed: supervised fine-tuning, reinforcement learning (GRPO, "
        "PPO, REINFORCE, …), preference optimisation, or a combination, in any order. Choose what "
        "you expect to work best for this task, model and budget."
    ),
    "sft-only": (
        "This run is **SFT-only**: improve the model with supervised fine-tuning only — a "
        "likelihood loss on (prompt, completion) pairs, full fine-tuning or adapters merged "
        "before submitting. Do not use reinforcement learning or any optimisation driven by a "
        "reward on the model's own samples (no GRPO, PPO, REINFORCE, DPO, rejection sampling "
        "with a reward). This overrides the list of allowed methods in instructions.md."
    ),
    "rl-only": (
        "This run is **RL-only**: improve the model with reinforcement learning only — optimise "
        "it against a reward computed on its own sampled completions (GRPO, PPO, REINFORCE, …; "
        "you may write the reward from the scoring rule in description.md). Do not train on the "
        "reference answers with a supervised (likelihood) loss, not even as a warm-up. This "
        "overrides the list of allowed methods in instructions.md."
    ),
}
assert tuple(MODE_TEXT) == AGENT_MODES


@dataclass(frozen=True)
class PromptInputs:
    """Everything the prompt is made of (what `workspace_prompt` reads from a workspace)."""

    description: str
    instructions: str
    #: Workspace-relative paths, one per line (directories end in `/`), with sizes for files.
    listing: list[str]
    #: Workspace-relative data file → its first lines.
    data_heads: dict[str, list[str]]
    budget_s: int
    max_submissions: int | None = None
    mode: str = "free"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[… {len(text) - limit} more characters]"


def _duration(seconds: int) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return (
        " ".join(p for p in (f"{h} h" if h else "", f"{m} min" if m else "", f"{s} s" if s else "") if p)
        or "0 s"
    )


def render_prompt(inputs: PromptInputs) -> str:
    """The prompt (pure). ValueError for an unknown mode."""
    if inputs.mode not in MODE_TEXT:
        raise ValueError(f"unknown agent mode {inputs.mode!r} (known: {', '.join(MODE_TEXT)})")
    url = f"${ENV_GRADING_SERVER_URL}"
    cap = (
        f"at most {inputs.max_submissions} submissions are accepted"
        if inputs.max_submissions
        else "there is no cap on submissions, but every evaluation runs on your clock"
    )
    heads = []
    for path, lines in inputs.data_heads.items():
        body = "\n".join(line[:MAX_HEAD_LINE_CHARS] for line in lines) or "(empty)"
        heads.append(f"`{path}` (first {len(lines)} lines):\n```\n{body}\n```")
    listing = "\n".join(inputs.listing) or "(empty)"
    text = f"""You are an autonomous post-training agent working alone in a terminal: nobody will answer
questions or confirm anything, so decide and act yourself. Your job is to make the base model in
`models/` score as high as possible on the task described below, within a fixed wall-clock budget,
by writing and running your own training code in this workspace (your current directory).

## Mode
{MODE_TEXT[inputs.mode]}

## Budget and clock
- You have {inputs.budget_s} seconds ({_duration(inputs.budget_s)}) of wall-clock time in total;
  {cap}.
- The clock runs from `start_time` in `{WS_RUN_META}` (unix seconds; `end_time` is the deadline).
  Ask for the time left with `curl -s {url}/time` (JSON: `remaining` and `elapsed` in seconds,
  `deadline`). Check it regularly, before every long step.
- At the deadline every process of yours gets SIGTERM, then SIGKILL: whatever is not submitted by
  then does not count. Evaluations take time from your budget too.
- Keep working until the budget is nearly used up: do not stop after a first submission while
  time remains; use it to try to beat your best score.

## How to submit
1. Save a complete Hugging Face model directory (config, `*.safetensors` weights, tokenizer) under
   `{WS_OUTPUT}/`, e.g. `{WS_OUTPUT}/v1` (merge adapters first; no symbolic links).
2. Submit it:
   `curl -s -X POST {url}/submit -H 'Content-Type: application/json' -d '{{"model_path": "{WS_OUTPUT}/v1"}}'`
   The call returns when the evaluation is done (it can take minutes: use no short timeout) with
   your `score`, the `baseline_score` and your `best` so far.
3. Your result is the best score of all your submissions: submit a first working model early,
   then keep improving and submit each model that might be better (`{WS_OUTPUT}/v2`, …).

Keep your training code in `{WS_CODE}/`: it is recorded with every submission. The data in
`{WS_DATA}/` and the base model are read-only; the held-out evaluation data is not available to you.

## The workspace
```
{listing}
```

## The training data
{chr(10).join(heads) if heads else "(no data files)"}

## description.md (the task, its data and exactly how it is scored)
{_clip(inputs.description.strip(), MAX_DOC_CHARS)}

## instructions.md (the rules of the run)
{_clip(inputs.instructions.strip(), MAX_DOC_CHARS)}

Start by reading the data format and the scoring in description.md, get a simple pipeline working
end to end, submit it, then iterate while watching the time left.
"""
    return _clip(text, MAX_PROMPT_CHARS - 100)


# --- reading a workspace (never following a link) -------------------------------------------------


def _read_text(path: Path, limit: int = MAX_READ_BYTES) -> str:
    """The start of the regular file at `path` (empty when it is missing or not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    unit = "KiB"
    for unit in ("KiB", "MiB", "GiB"):  # noqa: B007 (the unit reached is the answer)
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"


def workspace_listing(
    root: Path, *, depth: int = LISTING_DEPTH, limit: int = MAX_LISTING_ENTRIES
) -> list[str]:
    """Workspace-relative entries, directories first at each level (`dir/`, `file  (size)`)."""
    out: list[str] = []

    def walk(rel: Path, level: int) -> None:
        try:
            entries = sorted(
                os.scandir(root / rel), key=lambda e: (not e.is_dir(follow_symlinks=False), e.name)
            )
        except OSError:
            return
        for entry in entries:
            if len(out) >= limit:
                return
            path = rel / entry.name
            indent = "  " * level
            if entry.is_symlink():
                out.append(f"{indent}{entry.name} -> (link)")
            elif entry.is_dir(follow_symlinks=False):
                out.append(f"{indent}{entry.name}/")
                if level + 1 < depth and entry.name != "__pycache__":
                    walk(path, level + 1)
            else:
                try:
                    size = entry.stat(follow_symlinks=False).st_size
                except OSError:
                    size = 0
                out.append(f"{indent}{entry.name}  ({_size(size)})")

    walk(Path("."), 0)
    if len(out) >= limit:
        out.append(f"… (first {limit} entries; run `ls -R` for the rest)")
    return out


def data_heads(root: Path, *, files: int = MAX_DATA_FILES, lines: int = HEAD_LINES) -> dict[str, list[str]]:
    """The first `lines` lines of the first `files` regular files under `data/`."""
    heads: dict[str, list[str]] = {}
    data = root / WS_DATA
    for dirpath, dirnames, filenames in os.walk(data, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            if len(heads) >= files:
                return heads
            path = Path(dirpath) / name
            text = _read_text(path, limit=64 * 1024)
            heads[str(path.relative_to(root))] = text.splitlines()[:lines]
    return heads


def workspace_prompt(
    root: Path, *, mode: str = "free", budget_s: int | None = None, max_submissions: int | None = None
) -> str:
    """The prompt for the workspace at `root`; the budget defaults to `timeout_s` of run_meta.json."""
    if budget_s is None:
        try:
            meta = json.loads(_read_text(root / WS_RUN_META) or "{}")
            budget_s = int(meta.get("timeout_s") or 0)
        except (ValueError, TypeError, AttributeError):
            budget_s = 0
    return render_prompt(
        PromptInputs(
            description=_read_text(root / WS_DESCRIPTION),
            instructions=_read_text(root / WS_INSTRUCTIONS),
            listing=workspace_listing(root),
            data_heads=data_heads(root),
            budget_s=budget_s,
            max_submissions=max_submissions,
            mode=mode,
        )
    )
