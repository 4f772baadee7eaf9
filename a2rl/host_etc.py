"""Which of the host's `/etc` a sandboxed process sees: an allow-list, shared by the agent's
sandbox (`a2rl_runner.sandbox`) and the eval box (`a2rl.eval_sandbox`).

Both may run as host root by uid (a root launcher's eval process) or hold files a root runner
staged for them, so neither gets the host's `/etc` whole: no `shadow`, `sudoers`, ssh host keys,
TLS private keys (`ssl/private`), pip or npm credentials.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable

#: The `/etc` entries shown (read-only, where present): what programs need to start, find shared
#: libraries, read locales, time zones and CA certificates, and run login shells (`bash -lc`).
#: A trailing `*` matches by prefix.
ETC_ALLOWED = (
    "alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version",
    "fonts", "gai.conf", "host.conf", "inputrc", "java-*", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "locale.alias", "localtime", "magic", "magic.mime", "mime.types",
    "nsswitch.conf", "os-release", "profile", "profile.d", "protocols", "python3*", "services",
    "shells", "ssl/certs", "ssl/openssl.cnf", "terminfo", "timezone", "OpenCL", "vulkan",
    "nvidia*", "glvnd",
)  # fmt: skip
#: … and what only the eval box takes of the host's own: the world-readable account and name
#: files (an evaluation that calls a judge or a store resolves names; the agent gets its own).
ETC_EVAL_HOST = ("passwd", "group", "hosts", "resolv.conf")


def etc_entries(patterns: Iterable[str] = ETC_ALLOWED, etc: str = "/etc") -> tuple[str, ...]:
    """The host's `/etc` entries that `patterns` let through (those present)."""
    return tuple(sorted({p for pattern in patterns for p in glob.glob(f"{etc}/{pattern}")}))
