"""`a2rl data stage|verify`: stage a task's data into two checksummed artifacts (train / held-out)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from a2rl_cli.protocol_arg import add_protocol_arg


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("data", help="stage task data (agent-visible train split + held-out split)")
    dsub = parser.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    dsub.required = True

    s = dsub.add_parser(
        "stage",
        help="stage TASK's data as checksummed train/ and heldout/ artifacts",
        description=(
            "Prepare the agent-visible training data and the held-out evaluation data as two "
            "artifacts with a manifest.json of sha256 checksums each. Default destination: the "
            "local data cache that `a2rl run` uses."
        ),
    )
    s.add_argument("task", help="task id (see `a2rl tasks list`)")
    s.add_argument(
        "--source",
        default=None,
        help="where the data comes from: a local directory or files, s3://bucket/prefix, hf:<dataset> "
        "(only when the hub is reachable), or 'builtin' where the task ships its data",
    )
    s.add_argument("--seed", type=int, default=0, help="staging seed (tasks with generated data)")
    add_protocol_arg(s)
    dest = s.add_mutually_exclusive_group()
    dest.add_argument("--out", type=Path, default=None, help="write <OUT>/train and <OUT>/heldout here")
    dest.add_argument(
        "--store", default=None, help="upload to a store URI under data/<task>/<version>-seed<seed>/"
    )
    s.add_argument("--force", action="store_true", help="re-stage even when a verified staging exists")
    s.add_argument(
        "--heldout-secret-file",
        type=Path,
        default=None,
        help="file with the secret a generated held-out split's seed derives from (default: "
        "$A2RL_HELDOUT_SECRET_FILE, else this machine's key under <cache>/keys/); share it between "
        "the machines that stage one cluster's data",
    )
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=_stage)

    v = dsub.add_parser("verify", help="check a staged artifact (or a staging root) against its manifest(s)")
    v.add_argument("path", type=Path, help="an artifact directory, or a root holding train/ and heldout/")
    v.set_defaults(func=_verify)


def _stage(args: argparse.Namespace) -> int:
    from a2rl.errors import A2rlError

    try:
        return _stage_checked(args)
    except (OSError, ValueError) as exc:
        # A source file that cannot be read or parsed, a destination that cannot be written.
        detail = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise A2rlError(f"staging {args.task} failed: {type(exc).__name__}: {detail}") from exc


def _stage_checked(args: argparse.Namespace) -> int:
    from a2rl_tasks import get_task
    from a2rl_tasks.artifacts import stage_artifacts, stage_to_store

    from a2rl.errors import A2rlError
    from a2rl.local_keys import heldout_secret
    from a2rl.store.open import open_store

    task = get_task(args.task, protocol=args.protocol)
    if args.seed < 0:
        raise A2rlError("--seed must be 0 or more")
    secret = heldout_secret(args.heldout_secret_file) if task.secret_heldout else None
    if args.store is not None:
        store = open_store(args.store)
        result: dict[str, Any] = {
            "task": task.name,
            "store": stage_to_store(task, store, source=args.source, seed=args.seed, secret=secret),
        }
    else:
        staged = stage_artifacts(
            task, source=args.source, seed=args.seed, root=args.out, force=args.force, secret=secret
        )
        result = {"task": task.name, **staged.summary()}
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    splits = result.get("store", result)
    for split in ("train", "heldout"):
        info = splits[split]
        where = info.get("key") or info.get("path")
        print(f"{split:8s} {where}  ({info['files']} file(s), digest {info['digest'][:16]})")
    if result.get("created") is False:
        print("(already staged and verified; pass --force to stage again)")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from a2rl_tasks.artifacts import MANIFEST, SPLITS, verify_artifact

    from a2rl.errors import A2rlError

    path: Path = args.path
    roots = [path] if (path / MANIFEST).is_file() else [path / s for s in SPLITS]
    if not all(r.is_dir() for r in roots):
        raise A2rlError(f"{path} is neither an artifact nor a staging root with train/ and heldout/")
    for root in roots:
        manifest = verify_artifact(root)
        print(f"ok {root}  ({len(manifest.files)} file(s), digest {(manifest.digest or '')[:16]})")
    return 0
