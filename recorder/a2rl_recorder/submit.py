"""Validation of a submit request's `model_path`, before anything is recorded or evaluated.

Rules (docs/recorder.md): the path must lie under the workspace's `output/`, no `..`, no symlink on
the way or inside the model directory (snapshots store regular files only, and a link out of
the workspace would leak files), a non-empty Hugging Face model directory (`config.json`), not
a LoRA adapter, and within the size limit. Each violation is a `SubmitRejectedError` carrying
the HTTP status and one clear line for the agent.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from a2rl.constants import WS_OUTPUT
from a2rl.errors import A2rlError


class SubmitRejectedError(A2rlError):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class ModelCandidate:
    rel_path: str  # relative to the workspace, e.g. "output/v1"
    path: Path  # the resolved directory
    files: int
    total_bytes: int


def _is_under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _relative_to_workspace(workspace: Path, raw: str) -> PurePosixPath:
    p = Path(raw)
    if ".." in p.parts:
        raise SubmitRejectedError(400, f"model_path must not contain '..': {raw}")
    if not p.is_absolute():
        return PurePosixPath(*p.parts) if p.parts else PurePosixPath(".")
    for root in (workspace, workspace.resolve()):
        try:
            return PurePosixPath(p.relative_to(root).as_posix())
        except ValueError:
            continue
    raise SubmitRejectedError(400, f"model_path must be inside the workspace's {WS_OUTPUT}/ directory: {raw}")


def _link_message(workspace_real: Path, link: Path, shown: str) -> str:
    target = link.resolve()
    if not _is_under(target, workspace_real):
        return f"{shown} is a symlink pointing outside the workspace; submit a real directory"
    return f"{shown} is a symlink; snapshots store regular files only, so copy the real files there"


def validate_model_path(workspace: Path, raw: object, *, max_bytes: int) -> ModelCandidate:
    """Check a submitted `model_path` (relative to the workspace, or absolute inside it)."""
    if not isinstance(raw, str) or not raw.strip():
        raise SubmitRejectedError(400, 'Missing model_path (a directory under output/, e.g. "output/v1")')
    if "\x00" in raw:
        raise SubmitRejectedError(400, "model_path contains a NUL byte")
    workspace = workspace.absolute()
    workspace_real = workspace.resolve()
    output_real = (workspace / WS_OUTPUT).resolve()
    rel = _relative_to_workspace(workspace, raw.strip())
    if not rel.parts or rel.parts[0] != WS_OUTPUT:
        raise SubmitRejectedError(
            400, f"model_path must be inside the workspace's {WS_OUTPUT}/ directory: {raw}"
        )

    # Every component from the workspace down must be a real directory, not a link.
    current = workspace
    for i, part in enumerate(rel.parts):
        current = current / part
        if current.is_symlink():
            shown = PurePosixPath(*rel.parts[: i + 1]).as_posix()
            raise SubmitRejectedError(400, _link_message(workspace_real, current, shown))
    shown = rel.as_posix()
    if not current.exists():
        raise SubmitRejectedError(404, f"model directory not found: {shown}")
    if not current.is_dir():
        raise SubmitRejectedError(400, f"model_path is not a directory: {shown}")
    resolved = current.resolve()
    if not _is_under(resolved, output_real):
        raise SubmitRejectedError(400, f"model_path must resolve inside {WS_OUTPUT}/: {shown}")

    files, total = _scan(resolved, workspace_real, shown, max_bytes)
    if files == 0:
        raise SubmitRejectedError(400, f"model directory is empty (no regular files): {shown}")
    if (resolved / "adapter_config.json").exists():
        raise SubmitRejectedError(
            400,
            f"{shown} is a LoRA adapter (adapter_config.json): merge it into the base model "
            "(model = peft_model.merge_and_unload(); model.save_pretrained(dir)) and submit the merged model",
        )
    if not (resolved / "config.json").is_file():
        raise SubmitRejectedError(
            400,
            f"{shown} is not a model directory (no config.json): save the model and tokenizer there "
            "with save_pretrained(dir)",
        )
    return ModelCandidate(rel_path=shown, path=resolved, files=files, total_bytes=total)


def _scan(root: Path, workspace_real: Path, shown: str, max_bytes: int) -> tuple[int, int]:
    """(regular files, bytes) under `root`; rejects symlinks and directories over `max_bytes`."""
    files = total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in (*dirnames, *filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            inner = f"{shown}/{path.relative_to(root).as_posix()}"
            if stat.S_ISLNK(st.st_mode):
                raise SubmitRejectedError(400, _link_message(workspace_real, path, inner))
            if stat.S_ISREG(st.st_mode):
                files += 1
                total += st.st_size
                if total > max_bytes:
                    raise SubmitRejectedError(
                        413, f"model directory {shown} is larger than the limit of {_gib(max_bytes)}"
                    )
    return files, total


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB" if n >= (1 << 30) else f"{n} bytes"
