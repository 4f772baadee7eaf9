"""`a2rl models build-tiny|resolve|push|list`: the tiny base model, base-model resolution, and
base models kept in the object store (`store:<name>`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("models", help="build the tiny base model; resolve base-model sources")
    msub = parser.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    msub.required = True

    build = msub.add_parser("build-tiny", help="build the tiny random-initialised Llama model (seconds)")
    build.add_argument("--dest", type=Path, default=None, help="output dir (default: <cache>/models/tiny)")
    build.add_argument("--seed", type=int, default=0, help="weight/tokenizer seed (default 0)")
    build.add_argument("--force", action="store_true", help="rebuild even when already built")
    build.set_defaults(func=_build_tiny)

    resolve = msub.add_parser("resolve", help="print the local directory for a baseModel.source")
    resolve.add_argument(
        "source", help="builtin:tiny, builtin:smollm2-135m, a local directory, a file:// URI or store:<name>"
    )
    resolve.add_argument("--no-build", action="store_true", help="do not build builtin models")
    resolve.add_argument("--store", default=None, help="store of store:<name> sources (default: local)")
    resolve.set_defaults(func=_resolve)

    push = msub.add_parser("push", help="upload a model directory to the store as store:<name>")
    push.add_argument("model_dir", type=Path, help="a Hugging Face model directory (config.json, weights)")
    push.add_argument("--name", required=True, help="the name runs use: baseModel.source: store:<name>")
    push.add_argument("--store", default=None, help="store URI (default: the local store)")
    push.set_defaults(func=_push)

    lst = msub.add_parser("list", help="list the models pushed to the store")
    lst.add_argument("--store", default=None, help="store URI (default: the local store)")
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.set_defaults(func=_list)


def _build_tiny(args: argparse.Namespace) -> int:
    from a2rl.models.resolve import builtin_dir
    from a2rl.models.tiny import build_tiny_model, is_built, read_marker

    dest: Path = args.dest if args.dest is not None else builtin_dir("tiny")
    if not args.force and is_built(dest, args.seed):
        print(f"tiny model already built at {dest}")
        return 0
    started = time.monotonic()
    build_tiny_model(dest, args.seed, force=args.force)
    marker = read_marker(dest) or {}
    print(
        f"built tiny model at {dest} ({marker.get('n_parameters', '?')} parameters, "
        f"{time.monotonic() - started:.1f}s)"
    )
    return 0


def _resolve(args: argparse.Namespace) -> int:
    from a2rl.models.library import STORE_PREFIX
    from a2rl.models.resolve import resolve_base_model
    from a2rl.store.open import open_store

    store = open_store(args.store) if args.source.strip().startswith(STORE_PREFIX) else None
    path = resolve_base_model(args.source, build=not args.no_build, store=store)
    print(json.dumps({"source": args.source, "path": str(path)}))
    return 0


def _push(args: argparse.Namespace) -> int:
    from a2rl.errors import A2rlError
    from a2rl.models.library import check_model_name, push_model
    from a2rl.store.open import open_store

    check_model_name(args.name)
    if not args.model_dir.is_dir():
        raise A2rlError(f"model directory not found: {args.model_dir}")
    store = open_store(args.store)
    print(f"pushing {args.model_dir} to {store.uri} as store:{args.name}", flush=True)
    doc = push_model(store, args.name, args.model_dir)
    print(f"store:{args.name} = {doc.digest} ({doc.bytes} bytes)")
    return 0


def _list(args: argparse.Namespace) -> int:
    from a2rl.models.library import list_models
    from a2rl.store.open import open_store

    models = list_models(open_store(args.store))
    if args.json:
        print(json.dumps([m.summary() for m in models], indent=2))
        return 0
    if not models:
        print("no models pushed")
    for m in models:
        print(f"store:{m.name}  {(m.digest or '')[:12]}  {m.bytes} bytes  pushed {m.pushed_at}")
    return 0
