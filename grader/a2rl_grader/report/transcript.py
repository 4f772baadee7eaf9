"""`transcript.html`: the run's driver calls in order, what the model was sent and what it said.

Each step (one driver call, `a2rl.trajectory.transcript`) shows its time in the report's time base
(m:ss since the run's start, `a2rl_grader.report.times.clock`), the messages new since the
conversation's previous call (the stack's tool results, each with the call it answers) and the
model's reply: its text, thinking and tool calls with their arguments. Texts are already redacted
and cut by the builder; everything is HTML-escaped here (agent text is hostile). A self-contained
page: inline CSS, no scripts.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime

from a2rl.records.driver_calls import iter_driver_calls
from a2rl.runs import parse_time
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.trajectory.transcript import TOOL_CALL, TOOL_RESULT, Block, Message, Step, TranscriptBuilder
from a2rl_grader.report.times import clock, seconds_since

TRANSCRIPT_HTML = "transcript.html"

_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
    ".step{border:1px solid #ccc;border-radius:6px;margin:1em 0;padding:0.4em 0.8em}"
    ".step h3{font-size:15px;margin:0.3em 0}.meta{color:#555;font-size:13px;font-weight:normal}"
    ".msg{margin:0.4em 0 0.4em 0.6em;padding-left:0.6em;border-left:3px solid #ddd}"
    ".msg.assistant{border-left-color:#1565c0}.msg.tool{border-left-color:#2e7d32}"
    ".msg.system{border-left-color:#999}.role{font-size:12px;color:#555;text-transform:uppercase}"
    "pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:4px 6px;margin:2px 0;"
    "font-size:13px;max-height:30em;overflow:auto}"
    ".call pre{background:#eef3fb}.result pre{background:#eef7ee}.error pre{background:#fbeeee}"
    ".thinking pre{color:#555;font-style:italic}.label{font-size:13px;font-weight:bold}"
    ".note{color:#8a5a00;font-size:13px}.cut{color:#8a5a00;font-size:12px}"
)


def load_transcript(store: ObjectStore, layout: RunLayout) -> list[Step]:
    builder = TranscriptBuilder()
    steps = (builder.add(r) for r in iter_driver_calls(store, layout))
    return [s for s in steps if s is not None]


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _block_html(block: Block) -> str:
    cut = f"<div class='cut'>[cut: {block.cut} more bytes not kept]</div>" if block.cut else ""
    body = f"<pre>{_e(block.text)}</pre>{cut}"
    ident = f" <span class='meta'>{_e(block.call_id)}</span>" if block.call_id else ""
    if block.kind == TOOL_CALL:
        label = f"tool call: {_e(block.name or '?')}{ident}"
        return f"<div class='call'><span class='label'>{label}</span>{body}</div>"
    if block.kind == TOOL_RESULT:
        css = "result error" if block.error else "result"
        what = "tool result (error)" if block.error else "tool result"
        name = f": {_e(block.name)}" if block.name else ""
        return f"<div class='{css}'><span class='label'>{what}{name}{ident}</span>{body}</div>"
    return f"<div class='{_e(block.kind)}'>{body}</div>"


def _message_html(message: Message) -> str:
    blocks = "".join(_block_html(b) for b in message.blocks)
    role = _e(message.role)
    if message.role == "system":
        return f"<details class='msg system'><summary class='role'>system prompt</summary>{blocks}</details>"
    return f"<div class='msg {role}'><div class='role'>{role}</div>{blocks}</div>"


def step_html(step: Step, start: datetime | None) -> str:
    at = clock(seconds_since(start, parse_time(step.started_at)))
    done = clock(seconds_since(start, parse_time(step.finished_at)))
    meta = f"{at} to {done} · {step.model or '?'} · {step.protocol or '?'}"
    if step.status is not None:
        meta += f" · HTTP {step.status}"
    if not step.continued and step.inputs:
        meta += " · new conversation"
    parts = [f"<div class='step' id='call-{step.index}'>"]
    parts.append(f"<h3>{at} call {step.index} <span class='meta'>{_e(meta)}</span></h3>")
    parts += [_message_html(m) for m in step.inputs]
    parts += [_message_html(m) for m in step.reply]
    if step.note:
        parts.append(f"<p class='note'>{_e(step.note)}</p>")
    parts.append("</div>")
    return "".join(parts)


def render_transcript_html(steps: Sequence[Step], title: str, start: datetime | None) -> str:
    """The page: every step in call order (times m:ss since `start`, the run's time zero)."""
    head = _e(f"Transcript: {title}")
    intro = (
        f"{len(steps)} driver calls. Each shows the messages new since its conversation's previous "
        "call (tool results, user text) and the model's reply. Times are m:ss since the run's start. "
        "Secrets are redacted; long texts are cut."
    )
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{head}</title>",
        f"<style>{_CSS}</style></head><body><h1>{head}</h1>",
        f"<p><a href='report.html'>back to the report</a></p><p class='meta'>{_e(intro)}</p>",
        *(step_html(s, start) for s in steps),
        "" if steps else "<p>No driver calls recorded.</p>",
        "</body></html>\n",
    ]
    return "\n".join(parts)
