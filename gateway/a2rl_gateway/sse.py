"""Server-sent events (the WHATWG event-stream format) parsed incrementally. Pure.

parser = SSEParser()
for chunk in chunks:                 # bytes as they arrive, split anywhere
    for event in parser.feed(chunk):
        ...                          # SSEEvent(event="message_start", data="{…}")
for event in parser.close(): ...     # an unterminated last event
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SSEEvent:
    event: str | None
    data: str

    def json(self) -> Any:
        """The data as JSON, or None when it is not JSON (`[DONE]`, a keep-alive)."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None


class SSEParser:
    """Lines end in LF, CRLF or CR; an event ends at a blank line; `:` lines are comments;
    several `data:` lines join with LF; fields other than `event` and `data` are ignored."""

    def __init__(self) -> None:
        self._buf = b""
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buf += chunk
        events: list[SSEEvent] = []
        while True:
            cut = _line_end(self._buf)
            if cut is None:
                return events
            end, width = cut
            if self._buf[end : end + 1] == b"\r" and width == 1 and end + 1 == len(self._buf):
                return events  # a lone CR at the end may be the first half of CRLF
            line, self._buf = self._buf[:end], self._buf[end + width :]
            ev = self._line(line.decode("utf-8", errors="replace"))
            if ev is not None:
                events.append(ev)

    def close(self) -> list[SSEEvent]:
        events = self.feed(b"\n") if self._buf else []
        if self._data:
            events.append(SSEEvent(self._event, "\n".join(self._data)))
        self._event, self._data = None, []
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            if not self._data and self._event is None:
                return None
            ev = SSEEvent(self._event, "\n".join(self._data))
            self._event, self._data = None, []
            return ev if ev.data or ev.event else None
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None


def _line_end(buf: bytes) -> tuple[int, int] | None:
    lf, cr = buf.find(b"\n"), buf.find(b"\r")
    if cr != -1 and (lf == -1 or cr < lf):
        return (cr, 2) if buf[cr + 1 : cr + 2] == b"\n" else (cr, 1)
    if lf != -1:
        return lf, 1
    return None


def parse_events(body: bytes) -> list[SSEEvent]:
    """Every event of a complete stream."""
    parser = SSEParser()
    return parser.feed(body) + parser.close()
