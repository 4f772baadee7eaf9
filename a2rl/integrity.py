"""Integrity of records the agent could rewrite: keyed MACs (HMAC-SHA256), pure functions only.

A record's MAC covers its JSON values in one canonical form (sorted keys, no whitespace) and a
*context*: what the record is and where it belongs (e.g. `("result", <run prefix>, "3")`), so a
MAC copied with its record to another place does not verify there. Keys are random bytes:
`new_key()` for a run (held in memory by the runner and the recorder only; the recorder gets it
through its stdin, `key_line`/`parse_key_line`, never through its environment), or a
machine-local key (`a2rl.local_keys`). Who holds which key: docs/local-mode.md, "Scores the
runner can trust".
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from typing import Any

ALGORITHM = "hmac-sha256"
KEY_BYTES = 32
_PURPOSE_VERSION = "a2rl-mac-v1"


def new_key() -> bytes:
    """A fresh random key (32 bytes)."""
    return secrets.token_bytes(KEY_BYTES)


def canonical(data: Mapping[str, Any]) -> bytes:
    """`data` as canonical JSON bytes (sorted keys, compact, ASCII)."""
    return json.dumps(dict(data), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _message(context: tuple[str, ...], data: Mapping[str, Any]) -> bytes:
    parts = [_PURPOSE_VERSION, *context]
    for part in parts:
        if "\0" in part:
            raise ValueError("a MAC context part must not contain NUL")
    return "\0".join(parts).encode() + b"\0" + canonical(data)


def sign(key: bytes, context: tuple[str, ...], data: Mapping[str, Any]) -> str:
    """The hex MAC of `data` in `context` under `key`."""
    return hmac.new(key, _message(context, data), hashlib.sha256).hexdigest()


def verify(key: bytes, mac: object, context: tuple[str, ...], data: Mapping[str, Any]) -> bool:
    """True when `mac` is `data`'s MAC in `context` under `key` (constant-time comparison)."""
    if not isinstance(mac, str):
        return False
    return hmac.compare_digest(mac, sign(key, context, data))


def derive(key: bytes, *context: str) -> bytes:
    """A sub-secret of `key` for one purpose (`context`), 32 bytes."""
    return hmac.new(key, "\0".join((_PURPOSE_VERSION, *context)).encode(), hashlib.sha256).digest()


def fingerprint(key: bytes) -> str:
    """A short public name of `key` (reveals nothing of it): which key signed a record."""
    return derive(key, "fingerprint").hex()[:16]


def key_line(key: bytes) -> bytes:
    """`key` as one line to hand to a child process through a pipe."""
    return key.hex().encode() + b"\n"


def parse_key_line(line: bytes) -> bytes:
    """The key of a `key_line` (ValueError when it is not one)."""
    key = bytes.fromhex(line.decode("ascii").strip())
    if len(key) < 16:
        raise ValueError("the run key is too short")
    return key
