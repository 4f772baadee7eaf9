"""Request bodies as the gateway reads them: decompressed (`Content-Encoding`) within a size
limit, and parsed as strict JSON. Pure.

- `decode(raw, encoding, limit)`: gzip (`x-gzip`), deflate (zlib-wrapped or raw) and identity, in
  the order the header lists them; decompressed in steps, so a bomb (a small body that expands to
  gigabytes) costs at most `limit` bytes before it is refused (413); any other coding is a 415, a
  corrupt or truncated one a 400.
- `parse_json(data)`: UTF-8 JSON with no key given twice in one object. The gateway decides on what
  it parsed (is the call streamed? how many tokens may it generate?) and the upstream acts on what
  *it* parses: a body two parsers could read differently (`{"stream": false, "stream": true}`, a
  UTF-16 or BOM-prefixed body) is refused instead.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

BAD_REQUEST = 400
TOO_LARGE = 413
UNSUPPORTED = 415

_STEP = 1 << 16
#: At most this many content codings, one after the other (`gzip, gzip, …` is not a real client).
MAX_CODINGS = 2
#: gzip allows members one after the other; clients send one.
MAX_MEMBERS = 16


class BodyError(ValueError):
    """A body the gateway refuses: `status` (400, 413, 415) and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def codings(header: str) -> list[str]:
    """The content codings of a `Content-Encoding` value, in the order they were applied."""
    return [c.strip().lower() for c in header.split(",") if c.strip() and c.strip().lower() != "identity"]


def decode(raw: bytes, header: str, limit: int) -> bytes:
    """`raw` with the codings in `header` undone; at most `limit` bytes (`BodyError` otherwise)."""
    applied = codings(header)
    if len(applied) > MAX_CODINGS:
        raise BodyError(UNSUPPORTED, f"more than {MAX_CODINGS} content codings ({header[:80]!r})")
    data = raw
    for coding in reversed(applied):
        if coding in ("gzip", "x-gzip"):
            data = _inflate(data, 16 + zlib.MAX_WBITS, limit, coding, members=True)
        elif coding == "deflate":  # zlib-wrapped as the RFC says, or raw as some clients send it
            data = _deflate(data, limit)
        else:
            raise BodyError(
                UNSUPPORTED,
                f"Content-Encoding {coding[:40]!r} is not supported: send the body as is, gzip or deflate",
            )
    return data


def _deflate(data: bytes, limit: int) -> bytes:
    if not _zlib_header(data):
        return _inflate(data, -zlib.MAX_WBITS, limit, "deflate")
    try:
        return _inflate(data, zlib.MAX_WBITS, limit, "deflate")
    except BodyError as exc:
        if exc.status != BAD_REQUEST:
            raise
        try:  # raw deflate whose first bytes happen to look like a zlib header
            return _inflate(data, -zlib.MAX_WBITS, limit, "deflate")
        except BodyError:
            raise exc from None


def _zlib_header(data: bytes) -> bool:
    """Whether `data` begins with a zlib header (RFC 1950: deflate, a header checksum)."""
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def _inflate(data: bytes, wbits: int, limit: int, coding: str, *, members: bool = False) -> bytes:
    out = bytearray()
    start = 0
    for _ in range(MAX_MEMBERS):
        start = _inflate_member(data, start, out, wbits=wbits, limit=limit, coding=coding)
        if data.count(b"\0", start) == len(data) - start:  # the end (or zero padding)
            return bytes(out)
        if not members:
            raise BodyError(BAD_REQUEST, f"bytes after the end of the {coding} request body")
    raise BodyError(BAD_REQUEST, f"the {coding} request body has more than {MAX_MEMBERS} members")


def _inflate_member(data: bytes, start: int, out: bytearray, *, wbits: int, limit: int, coding: str) -> int:
    """Decompress the stream that begins at `data[start]` into `out`, fed and drained in steps (no
    step copies more than `_STEP` bytes); where it ends in `data`."""
    d = zlib.decompressobj(wbits)
    pos, tail = start, b""
    try:
        while not d.eof:
            if tail:
                piece = tail
            elif pos < len(data):
                piece = data[pos : pos + _STEP]
                pos += len(piece)
            else:
                raise BodyError(BAD_REQUEST, f"the {coding} request body is truncated")
            chunk = d.decompress(piece, _STEP)
            tail = d.unconsumed_tail
            if not chunk and tail == piece:
                raise BodyError(BAD_REQUEST, f"the {coding} request body is corrupt")
            out += chunk
            if len(out) > limit:
                raise BodyError(TOO_LARGE, f"request body over {limit >> 20} MiB once decompressed")
    except zlib.error as exc:
        raise BodyError(BAD_REQUEST, f"the {coding} request body is corrupt: {exc}") from None
    return pos - len(d.unused_data)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BodyError(BAD_REQUEST, f"the request body names {key[:80]!r} twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise BodyError(BAD_REQUEST, f"the request body holds {name}, which is not JSON")


def parse_json(data: bytes) -> Any:
    """`data` as strict JSON (see the module doc); `BodyError` (400) when it is not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError(BAD_REQUEST, "the request body is not UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise BodyError(BAD_REQUEST, "the request body is nested too deeply") from None
    except ValueError as exc:
        if isinstance(exc, BodyError):
            raise
        raise BodyError(BAD_REQUEST, f"the request body is not JSON: {str(exc)[:200]}") from None
