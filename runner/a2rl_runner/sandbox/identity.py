"""Who the agent is on the host: never root.

Run by an ordinary user, bubblewrap maps the agent to that user (unprivileged already). Run by
root, `a2rl run` starts bubblewrap as a dedicated unprivileged uid instead: one of its own per
run (`SANDBOX_UID_BASE` + a number from the run's uid), so the agent's files, its processes and a
per-uid process limit (`RLIMIT_NPROC`) are the run's alone; `A2RL_SANDBOX_UID` fixes one. Without
this the agent would be host root inside its user namespace: `/proc/sys` (`kernel.core_pattern`)
writable, root-only files under `/etc` readable, even with every capability dropped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from a2rl.constants import ENV_SANDBOX_UID
from a2rl.errors import A2rlError

#: First uid of the per-run range: above the ranges distributions give users (1000-59999),
#: systemd's dynamic users (61184-65519) and the usual subordinate ranges (from 100000).
SANDBOX_UID_BASE = 1_600_000_000
SANDBOX_UID_SPAN = 1 << 24


@dataclass(frozen=True)
class Identity:
    """The host uid and gid the sandbox runs as (supplementary groups: none)."""

    uid: int
    gid: int


def sandbox_identity(
    run_uid: str, *, euid: int | None = None, environ: Mapping[str, str] | None = None
) -> Identity | None:
    """The identity a root runner gives the run `run_uid` (hex); None when the runner is not root
    (bubblewrap then maps the agent to the runner's own, unprivileged, user)."""
    if (os.geteuid() if euid is None else euid) != 0:
        return None
    fixed = (os.environ if environ is None else environ).get(ENV_SANDBOX_UID, "").strip()
    if fixed:
        if not fixed.isdigit() or int(fixed) in (0, 0xFFFFFFFF) or int(fixed) >= 1 << 32:
            raise A2rlError(f"{ENV_SANDBOX_UID}={fixed}: must be a non-zero uid")
        return Identity(int(fixed), int(fixed))
    n = SANDBOX_UID_BASE + int(run_uid, 16) % SANDBOX_UID_SPAN
    return Identity(n, n)


def hand_over(identity: Identity | None, paths: Iterable[Path], *, recursive: bool = False) -> None:
    """Make `paths` (and with `recursive` everything under them, links not followed) the sandbox
    identity's, where the agent must write: its workspace, /tmp and home, its sockets."""
    if identity is None:
        return
    for path in paths:
        os.chown(path, identity.uid, identity.gid, follow_symlinks=False)
        if recursive and path.is_dir() and not path.is_symlink():
            for root, dirs, files in os.walk(path):
                for name in (*dirs, *files):
                    os.chown(Path(root) / name, identity.uid, identity.gid, follow_symlinks=False)
