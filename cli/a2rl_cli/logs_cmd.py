"""`a2rl logs [RUN] [-f] [--component …]`: print a run's logs, or follow a live local run's.

A finished run's logs are in the store (`<run>/logs/<component>.log`, docs/local-mode.md). While a
local run is going, the runner writes the agent's, the recorder's, the baseline's and the
gateway's logs under `$A2RL_HOME/logs/<name>-<uid>/` and uploads them at the end; the recorder
uploads each evaluation's log (`eval-NNNNN`) as soon as it is done. Both are read, the local file
first. `-f` polls them until run.json has `ended_at`; Ctrl-C ends it quietly.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.errors import A2rlError
from a2rl_cli.run_arg import add_run_args, chosen_run

if TYPE_CHECKING:
    from a2rl.store.base import ObjectStore
    from a2rl.store.layout import RunLayout

#: Components `--component` picks; `eval` is the baseline and every submission's evaluation.
COMPONENTS = ("agent", "recorder", "eval", "gateway")
FOLLOW_POLL_S = 1.0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "logs",
        help="print a run's logs (agent, recorder, evaluations, gateway); -f follows a live run",
        description=(
            "Print the logs of a run: RUN is a store prefix (local/name-uid), name-uid, a uid or a run "
            "name (the newest run with that name); without RUN (or with --latest), the newest run. "
            "With -f, keep printing what a live local run writes until it ends (Ctrl-C stops)."
        ),
    )
    add_run_args(parser)
    parser.add_argument(
        "--component",
        "-c",
        action="append",
        choices=COMPONENTS,
        default=None,
        help="only this component's log (repeatable; default: all). eval: the baseline and each "
        "submission's evaluation",
    )
    parser.add_argument(
        "--follow", "-f", action="store_true", help="follow a live run until its run.json says it ended"
    )
    parser.set_defaults(func=_logs)


def _logs(args: argparse.Namespace) -> int:
    store, layout = chosen_run(args, "a2rl logs")
    tail = _Tail(store, layout, tuple(args.component or COMPONENTS))
    try:
        if not args.follow:
            if not tail.poll():
                print(f"a2rl: no logs of {layout.prefix} yet", file=sys.stderr)
            return 0
        while True:
            ended = _ended(store, layout)  # read before the last poll: nothing written before is lost
            tail.poll()
            if ended:
                return 0
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # `a2rl logs … | head`
        return 0


def _ended(store: ObjectStore, layout: RunLayout) -> bool:
    from a2rl.runs import read_run_info

    try:
        return read_run_info(store, layout).ended_at is not None
    except (A2rlError, ValueError):
        return False


@dataclass
class _Tail:
    """What of each log was printed already; `poll` prints what is new."""

    store: ObjectStore
    layout: RunLayout
    components: tuple[str, ...]
    printed: dict[str, int] = field(default_factory=dict)
    last: str | None = None

    def poll(self) -> bool:
        """Print what is new in every log; True when anything was ever printed."""
        for name, local in self._sources():
            done = self.printed.get(name, 0)
            data = _read_local(local, done) if local is not None else self._read_store(name, done)
            if not data:
                continue
            if self.last != name:
                sys.stdout.write(f"==> {name} <==\n")
                self.last = name
            sys.stdout.write(data.decode("utf-8", errors="replace"))
            sys.stdout.flush()
            self.printed[name] = done + len(data)
        return bool(self.printed)

    def _sources(self) -> Iterator[tuple[str, Path | None]]:
        """(log name, the local file when there is one) in the order they are printed."""
        from a2rl import paths

        local_dir = paths.run_logs_dir(f"{self.layout.name}-{self.layout.uid}")
        names: list[str] = []
        for component in self.components:
            if component == "eval":
                names.append("baseline")
                names += sorted(self._stored_eval_logs())
            else:
                names.append(component)
        for name in names:
            local = local_dir / f"{name}.log"
            yield name, local if local.is_file() else None

    def _stored_eval_logs(self) -> set[str]:
        base = f"{self.layout.prefix}/logs/"
        found = set()
        for key in self.store.list(base.rstrip("/")):
            name = key[len(base) :] if key.startswith(base) else ""
            if name.startswith("eval-") and name.endswith(".log"):
                found.add(name.removesuffix(".log"))
        return found

    def _read_store(self, name: str, offset: int) -> bytes:
        from a2rl.errors import NotFoundError

        key = self.layout.log(name)
        try:
            if not self.store.exists(key):
                return b""
            data = self.store.get_bytes(key)
        except (NotFoundError, OSError):
            return b""
        return data[offset:]


def _read_local(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return b""
