"""`a2rl chart generate|check`: the Helm chart's generated files (values, schema, CRDs, RBAC, the
finalizer policy, the task names of the admission policy) and the value table of docs/install.md."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a2rl.errors import A2rlError

DEFAULT_CHART = Path("charts/a2rl")
DEFAULT_DOCS = Path("docs/install.md")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("chart", help="generate or check the Helm chart's generated files")
    csub = parser.add_subparsers(dest="chart_command", metavar="SUBCOMMAND")
    csub.required = True
    for name, func, text in (
        (
            "generate",
            _generate,
            "write the chart's values, schema, CRDs, RBAC, finalizer policy and the install guide's table",
        ),
        ("check", _check, "exit 1 when any generated file of the chart drifted"),
    ):
        cmd = csub.add_parser(name, help=text)
        cmd.add_argument(
            "--chart", type=Path, default=DEFAULT_CHART, help="chart directory (default: charts/a2rl)"
        )
        cmd.add_argument(
            "--docs", type=Path, default=DEFAULT_DOCS, help="install guide (default: docs/install.md)"
        )
        cmd.set_defaults(func=func)


def expected_files(chart: Path, docs: Path) -> dict[Path, str]:
    """Path -> content of every generated file (the install guide: with its table regenerated)."""
    from a2rl_operator import finalizer_policy
    from a2rl_operator.rbac import chart_template
    from a2rl_tasks import TASKS

    from a2rl.api.chartgen import generated_files, with_table

    if not chart.is_dir():
        raise A2rlError(f"{chart}: no such chart directory (run from the repository root or pass --chart)")
    try:
        guide = with_table(docs.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise A2rlError(f"{docs}: {exc}") from None
    files = generated_files(chart)
    files[chart / "templates" / "rbac.yaml"] = chart_template()
    files[chart / "templates" / "finalizer-policy.yaml"] = finalizer_policy.chart_template()
    # The task names the admission policy knows (`admissionPolicies.knownTasksOnly`).
    files[chart / "files" / "tasks.json"] = json.dumps(sorted(TASKS)) + "\n"
    files[docs] = guide
    return files


def _generate(args: argparse.Namespace) -> int:
    for path, text in expected_files(args.chart, args.docs).items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path}")
        except OSError as exc:
            raise A2rlError(f"cannot write {path}: {exc}") from None
    return 0


def _check(args: argparse.Namespace) -> int:
    stale = [
        path
        for path, text in expected_files(args.chart, args.docs).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    for path in stale:
        print(f"{path}: out of date; run `a2rl chart generate`")
    if not stale:
        print("the chart's generated files are up to date")
    return 1 if stale else 0
