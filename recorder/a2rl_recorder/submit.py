"""Validation of a submit request's `model_path`, and the snapshot of the model it names.

Rules (docs/recorder.md): the path must lie under the workspace's `output/`, no `..`, no symlink on
the way or inside the model directory, nothing but regular files and directories, no file with a
second hard link (it may be a held-out file linked in), no sparse file (more than 1 MiB of holes:
its blob would be stored at its full length; `safe_tree.SPARSE`), a non-empty Hugging Face model
directory (`config.json`), not a LoRA adapter, within the size limit (apparent sizes) and within
the run's cap on stored bytes (`UploadBudget`, at most half the local store's free space). The
directory is opened and walked without following anything (`a2rl.store.safe_tree`) and the
snapshot reads exactly the files that were checked, each through the descriptor it was checked
on, and only before the run's deadline. Each violation is a `SubmitRejectedError` carrying the
HTTP status and one clear line for the agent.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from a2rl.constants import WS_OUTPUT
from a2rl.errors import A2rlError
from a2rl.store.base import ObjectStore
from a2rl.store.cas import (
    BlobLayout,
    DigestCache,
    SnapshotDeadlineError,
    SnapshotStats,
    StoreBudgetError,
    TreeManifest,
    UploadBudget,
    snapshot_tree,
)
from a2rl.store.safe_tree import CHANGED, LINK, MISSING, NOT_DIR, OpenTree, Refusal, TreeRefusedError

#: Paths in error messages are cut to this many characters.
SHOWN_MAX = 200


class SubmitRejectedError(A2rlError):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class ModelCandidate:
    rel_path: str  # relative to the workspace, e.g. "output/v1"
    path: Path  # the directory as the recorder sees it (never reopened by path)
    files: int
    total_bytes: int  # apparent sizes
    #: The model directory, opened without following links and scanned; close it when done.
    tree: OpenTree


def _short(text: str) -> str:
    return text if len(text) <= SHOWN_MAX else text[: SHOWN_MAX - 1] + "…"


def _relative_to_workspace(workspace: Path, raw: str) -> PurePosixPath:
    p = Path(raw)
    if ".." in p.parts:
        raise SubmitRejectedError(400, f"model_path must not contain '..': {_short(raw)}")
    if not p.is_absolute():
        return PurePosixPath(*p.parts) if p.parts else PurePosixPath(".")
    for root in (workspace, workspace.resolve()):
        try:
            return PurePosixPath(p.relative_to(root).as_posix())
        except ValueError:
            continue
    raise SubmitRejectedError(
        400, f"model_path must be inside the workspace's {WS_OUTPUT}/ directory: {_short(raw)}"
    )


def _link_message(workspace: Path, shown: str) -> str:
    """For a symlink at `shown` (relative to the workspace): where it points, for the agent.

    Only the message follows the link (a `realpath`); nothing is read through it.
    """
    try:
        target = os.path.realpath(workspace / shown)
        inside = Path(target).is_relative_to(os.path.realpath(workspace))
    except (OSError, RuntimeError, ValueError):
        inside = False
    if not inside:
        return f"{_short(shown)} is a symlink pointing outside the workspace; submit a real directory"
    return f"{_short(shown)} is a symlink; snapshots store regular files only, so copy the real files there"


def _rejection(workspace: Path, refusal: Refusal) -> SubmitRejectedError:
    if refusal.kind == LINK:
        return SubmitRejectedError(400, _link_message(workspace, refusal.path))
    if refusal.kind == MISSING:
        return SubmitRejectedError(404, f"model directory not found: {_short(refusal.path)}")
    if refusal.kind == NOT_DIR:
        return SubmitRejectedError(400, f"model_path is not a directory: {_short(refusal.path)}")
    if refusal.kind == CHANGED:
        return SubmitRejectedError(409, f"{_short(refusal.path)} {refusal.reason}")
    return SubmitRejectedError(400, f"{_short(refusal.path)} {refusal.reason}")


def validate_model_path(workspace: Path, raw: object, *, max_bytes: int) -> ModelCandidate:
    """Check a submitted `model_path` (relative to the workspace, or absolute inside it).

    Returns the candidate with its directory open (`candidate.tree`, scanned strictly); the
    caller closes it (`with candidate.tree:`).
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise SubmitRejectedError(400, 'Missing model_path (a directory under output/, e.g. "output/v1")')
    if not isinstance(raw, str):
        raise SubmitRejectedError(
            400,
            f"model_path must be a string (a directory under output/, "
            f'e.g. "output/v1"), not {type(raw).__name__}',
        )
    if "\x00" in raw:
        raise SubmitRejectedError(400, "model_path contains a NUL byte")
    workspace = workspace.absolute()
    rel = _relative_to_workspace(workspace, raw.strip())
    if not rel.parts or rel.parts[0] != WS_OUTPUT:
        raise SubmitRejectedError(
            400, f"model_path must be inside the workspace's {WS_OUTPUT}/ directory: {_short(raw)}"
        )
    shown = rel.as_posix()
    try:
        tree = OpenTree.open_under(workspace, shown)
    except TreeRefusedError as exc:
        raise _rejection(workspace, exc.refusal) from None
    except OSError as exc:  # the workspace itself (never the agent's doing)
        raise SubmitRejectedError(400, f"{_short(shown)} cannot be read ({exc.strerror or exc})") from None
    try:
        too_large = SubmitRejectedError(
            413, f"model directory {_short(shown)} is larger than the limit of {_gib(max_bytes)}"
        )
        try:
            tree.scan(
                strict=True,
                allow_hard_links=False,
                max_total_bytes=max_bytes,
                on_too_large=lambda _n: too_large,
            )
        except TreeRefusedError as exc:
            raise _rejection(workspace, exc.refusal) from None
        except OSError as exc:
            raise SubmitRejectedError(
                400, f"{_short(shown)} cannot be read ({exc.strerror or exc})"
            ) from None
        top = {f.rel for f in tree.files}
        if not tree.files:
            raise SubmitRejectedError(400, f"model directory is empty (no regular files): {_short(shown)}")
        if "adapter_config.json" in top:
            raise SubmitRejectedError(
                400,
                f"{_short(shown)} is a LoRA adapter (adapter_config.json): merge it into the base "
                "model (model = peft_model.merge_and_unload(); model.save_pretrained(dir)) and submit "
                "the merged model",
            )
        if "config.json" not in top:
            raise SubmitRejectedError(
                400,
                f"{_short(shown)} is not a model directory (no config.json): save the model and "
                "tokenizer there with save_pretrained(dir)",
            )
    except BaseException:
        tree.close()
        raise
    total = sum(f.size for f in tree.files)
    return ModelCandidate(
        rel_path=shown, path=workspace / shown, files=len(tree.files), total_bytes=total, tree=tree
    )


def snapshot_model(
    store: ObjectStore,
    layout: BlobLayout,
    candidate: ModelCandidate,
    *,
    known: set[str] | None,
    digests: DigestCache | None,
    read_deadline: float | None,
    clock: Callable[[], float],
    budget: UploadBudget | None,
) -> tuple[TreeManifest, SnapshotStats]:
    """Snapshot the validated model: the files checked, read through their own descriptors.

    Every read must finish before `read_deadline` (the run's deadline), and a file that changed
    after it was hashed is not re-read after it: 409, nothing recorded. Refused or swapped entries
    and unreadable files are 4xx naming the path; storing past the run's byte cap is a 413.
    """
    workspace = candidate.path.parents[len(PurePosixPath(candidate.rel_path).parts) - 1]
    try:
        return snapshot_tree(
            store, layout, candidate.tree, known=known, digests=digests,
            read_deadline=read_deadline, clock=clock, budget=budget,
        )  # fmt: skip
    except TreeRefusedError as exc:
        raise _rejection(workspace, exc.refusal) from None
    except SnapshotDeadlineError as exc:
        raise SubmitRejectedError(
            409,
            f"{_short(exc.path)} could not be read completely before the deadline; submit earlier "
            "(nothing was recorded for this request)",
        ) from None
    except StoreBudgetError as exc:
        raise SubmitRejectedError(413, str(exc)) from None
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else candidate.rel_path
        raise SubmitRejectedError(400, f"{_short(where)} cannot be read ({exc.strerror or exc})") from None


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB" if n >= (1 << 30) else f"{n} bytes"
