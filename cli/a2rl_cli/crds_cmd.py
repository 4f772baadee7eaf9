"""`a2rl crds generate|check|docs`: the CRDs in crds/ and docs/api.md, generated from a2rl/api."""

from __future__ import annotations

import argparse
from pathlib import Path

from a2rl.errors import A2rlError

DEFAULT_CRDS = Path("crds")
DEFAULT_DOCS = Path("docs/api.md")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("crds", help="generate or check the CRDs and the API reference")
    csub = parser.add_subparsers(dest="crds_command", metavar="SUBCOMMAND")
    csub.required = True

    gen = csub.add_parser("generate", help="write the CRD YAML files generated from the API models")
    gen.add_argument("--out", type=Path, default=DEFAULT_CRDS, help="output directory (default: crds/)")
    gen.set_defaults(func=_generate)

    check = csub.add_parser("check", help="exit 1 when the committed CRDs or API reference drifted")
    check.add_argument("--dir", type=Path, default=DEFAULT_CRDS, help="CRD directory (default: crds/)")
    check.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="API reference (default: docs/api.md)")
    check.set_defaults(func=_check)

    docs = csub.add_parser("docs", help="write the API field reference generated from the models")
    docs.add_argument("--out", type=Path, default=DEFAULT_DOCS, help="output file (default: docs/api.md)")
    docs.set_defaults(func=_docs)


def _generate(args: argparse.Namespace) -> int:
    from a2rl.api.crdgen import write_crds

    try:
        for path in write_crds(args.out):
            print(f"wrote {path}")
    except OSError as exc:
        raise A2rlError(f"cannot write {args.out}: {exc}") from None
    return 0


def _docs(args: argparse.Namespace) -> int:
    from a2rl.api.docgen import api_reference

    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(api_reference(), encoding="utf-8")
    except OSError as exc:
        raise A2rlError(f"cannot write {args.out}: {exc}") from None
    print(f"wrote {args.out}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from a2rl.api.crdgen import drifted
    from a2rl.api.docgen import api_reference

    if not args.dir.is_dir():
        raise A2rlError(f"{args.dir}: no such directory (run from the repository root or pass --dir)")
    stale = drifted(args.dir)
    if not args.docs.is_file() or args.docs.read_text(encoding="utf-8") != api_reference():
        stale.append(str(args.docs))
    for path in stale:
        print(f"{path}: out of date; run `a2rl crds generate` and `a2rl crds docs`")
    if not stale:
        print("crds and API reference are up to date")
    return 1 if stale else 0
