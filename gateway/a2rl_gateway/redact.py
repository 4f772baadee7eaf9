"""What the gateway records is scrubbed of credentials. Pure.

Header values of `Authorization`, `x-api-key`, `x-goog-api-key`, `api-key`, cookies and proxy
credentials become `[redacted]`; so does a `key=` query parameter; and every occurrence of a
secret the gateway holds (the upstream key, the run's token) anywhere in a recorded value, keys
of JSON objects included. Before a call record is written (`Meter`'s writer thread, off the
agent's path) its strings are also scrubbed of credential-shaped text (`redact_patterns`:
`a2rl.redaction`, `sk-…`, `tgp_v1_…`, `AKIA…`, bearer credentials, …): a key the agent printed into
a tool result reaches neither the record nor the run's transcript.
"""

from __future__ import annotations

import functools
import json
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter

from a2rl.redaction import MIN_SECRET_LEN, REDACTED, SECRET_PATTERNS, redact_known, redact_secrets

SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie", "set-cookie"}
)


def redact_headers(headers: Iterable[tuple[str, str]], secrets: Sequence[str] = ()) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers:
        out[name] = REDACTED if name.lower() in SECRET_HEADERS else redact_known(value, secrets)
    return out


def redact_query(path: str) -> str:
    """`path?query` with the value of every `key=` parameter redacted."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    shown = [(k, REDACTED if k == "key" else v) for k, v in pairs]
    return f"{base}?{urllib.parse.urlencode(shown, safe='[]')}"


def redact_url(url: str) -> str:
    """A URL without user:password and with its `key=` parameter redacted."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return redact_query(f"{clean}?{parts.query}") if parts.query else clean


def redact_value(value: Any, secrets: Sequence[str]) -> Any:
    """A JSON value with every secret scrubbed from its strings (object keys included)."""
    return _map_strings(value, lambda text: redact_known(text, secrets))


def redact_patterns(value: Any) -> Any:
    """A JSON value with credential-shaped text scrubbed from its strings (object keys included)."""
    return _map_strings(value, redact_secrets)


def _map_strings(value: Any, scrub: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {scrub(str(k)): _map_strings(v, scrub) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_map_strings(v, scrub) for v in value]
    return value


def may_hold_secrets(text: str, secrets: Sequence[str]) -> bool:
    """Whether a record's JSON text may hold a known secret or credential-shaped text: it holds
    one of the secrets (escaped as `json.dumps` or pydantic's `model_dump_json(ensure_ascii=True)`
    escapes them: they differ on DEL) or a prefix of a `SECRET_PATTERNS` pattern.
    When it does not, `scrub_record` would change nothing: most records need no walk."""
    return any(n in text for n in _needles(tuple(secrets)))


@functools.lru_cache(maxsize=8)
def _needles(secrets: tuple[str, ...]) -> tuple[str, ...]:
    """What `may_hold_secrets` looks for (a gateway's secrets are fixed: built once)."""
    kept = [s for s in secrets if s and len(s) >= MIN_SECRET_LEN]
    needles = list(dict.fromkeys([json.dumps(s)[1:-1] for s in kept] + [_pydantic_json(s) for s in kept]))
    needles += [prefix for prefixes, _ in SECRET_PATTERNS for prefix in prefixes]
    return tuple(needles)


_STR = TypeAdapter(str)


def _pydantic_json(text: str) -> str:
    return _STR.dump_json(text, ensure_ascii=True).decode()[1:-1]


def scrub_record(doc: dict[str, Any], secrets: Sequence[str]) -> dict[str, Any]:
    """A record's JSON with every known secret and credential-shaped text scrubbed from its
    strings (object keys included): what `redact_value` and then `redact_patterns` make of it."""
    scrubbed: dict[str, Any] = _map_strings(doc, lambda t: redact_secrets(t, secrets))
    return scrubbed
