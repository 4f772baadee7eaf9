"""W3C trace context of a run, as plain values (pure functions, no OpenTelemetry import).

A run's trace context travels as a `traceparent` string (`00-<trace id>-<span id>-<flags>`):
in the env var `A2RL_TRACEPARENT` of every process of the run, and in a cluster also in the
BenchRun annotation `opentelemetry.io/trace-context` as a JSON carrier
(`{"traceparent": "00-…"}`, the form agent-sandbox uses) when the user gives one; without it the
run's context is derived from its uid (`run_traceparent`), so nobody has to write it anywhere.
The operator uses `pod_trace_env` for every pod/Job of a run.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from a2rl.constants import ANNOTATION_TRACE_CONTEXT, ENV_TRACEPARENT

TRACEPARENT_KEY = "traceparent"
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_SAMPLED = 0x01


@dataclass(frozen=True)
class TraceParent:
    """One W3C `traceparent`: the trace id and the id of the span that is the parent."""

    trace_id: str  # 32 lower-case hex digits, not all zero
    span_id: str  # 16 lower-case hex digits, not all zero
    flags: int = _SAMPLED

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    @property
    def sampled(self) -> bool:
        return bool(self.flags & _SAMPLED)


def parse_traceparent(value: str | None) -> TraceParent | None:
    """The `traceparent` in `value`, or None when absent or malformed (never raises).

    Follows the W3C rules: version `ff` and all-zero ids are invalid; a version-00 header has
    exactly four fields; a higher version may carry more, which are ignored.
    """
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip())  # W3C: lower-case hex only
    if match is None:
        return None
    version, trace_id, span_id, flags, extra = match.groups()
    if version == "ff" or (version == "00" and extra):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id=trace_id, span_id=span_id, flags=int(flags, 16))


def new_traceparent(*, sampled: bool = True) -> TraceParent:
    """A fresh trace id and span id: the root of a new run's trace."""
    trace_id = secrets.token_hex(16)
    span_id = secrets.token_hex(8)
    # All-zero ids are invalid; the chance is 2**-64, but the rule is the rule.
    while trace_id == "0" * 32:
        trace_id = secrets.token_hex(16)
    while span_id == "0" * 16:
        span_id = secrets.token_hex(8)
    return TraceParent(trace_id=trace_id, span_id=span_id, flags=_SAMPLED if sampled else 0)


def carrier_json(tp: TraceParent) -> str:
    """The annotation value: a JSON W3C carrier."""
    return json.dumps({TRACEPARENT_KEY: str(tp)}, sort_keys=True, separators=(",", ":"))


def traceparent_from_carrier(value: str | None) -> TraceParent | None:
    """Parse an annotation value: a JSON carrier, or (tolerated) a bare `traceparent` string."""
    if not value:
        return None
    text = value.strip()
    if text.startswith("{"):
        try:
            data: Any = json.loads(text)
        except ValueError:
            return None
        return parse_traceparent(data.get(TRACEPARENT_KEY)) if isinstance(data, dict) else None
    return parse_traceparent(text)


def traceparent_from_annotations(annotations: Mapping[str, str] | None) -> TraceParent | None:
    return traceparent_from_carrier((annotations or {}).get(ANNOTATION_TRACE_CONTEXT))


def traceparent_from_env(environ: Mapping[str, str]) -> TraceParent | None:
    return parse_traceparent(environ.get(ENV_TRACEPARENT))


def uid_traceparent(uid: str) -> TraceParent:
    """The trace context a run's uid implies: the trace id is the uid's 32 hex digits (a
    Kubernetes uid is a UUID; anything else is hashed), the root span id the first 16 hex digits
    of the uid's SHA-256. The same for every reader, for ever."""
    digest = hashlib.sha256(uid.encode()).hexdigest()
    trace_id = uid.replace("-", "").lower()
    if not re.fullmatch(r"[0-9a-f]{32}", trace_id) or trace_id == "0" * 32:
        trace_id = digest[16:48]
    span_id = digest[:16] if digest[:16] != "0" * 16 else "1".rjust(16, "0")
    return TraceParent(trace_id=trace_id, span_id=span_id)


def run_traceparent(metadata: Mapping[str, Any]) -> TraceParent | None:
    """A BenchRun's trace context: its annotation's when valid (a user's or a GitOps tool's), else
    the one its uid implies (`uid_traceparent`); None for an object without a uid (not created)."""
    given = traceparent_from_annotations(metadata.get("annotations"))
    if given is not None:
        return given
    uid = metadata.get("uid")
    return uid_traceparent(str(uid)) if uid else None


def trace_env(tp: TraceParent | str | None) -> dict[str, str]:
    """`{"A2RL_TRACEPARENT": …}` for a child process; empty when there is no context."""
    parsed = parse_traceparent(tp) if isinstance(tp, str) else tp
    return {ENV_TRACEPARENT: str(parsed)} if parsed is not None else {}


def pod_trace_env(metadata: Mapping[str, Any]) -> list[dict[str, str]]:
    """Kubernetes `EnvVar`s for a pod of the run: `[{"name": "A2RL_TRACEPARENT", "value": …}]`
    (`run_traceparent` of the BenchRun's metadata), or `[]` for a run without a uid."""
    return [{"name": k, "value": v} for k, v in trace_env(run_traceparent(metadata)).items()]
