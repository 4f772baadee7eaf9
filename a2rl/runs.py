"""Find runs in an object store: every `<namespace>/<name>-<uid>/run.json` (a `RunRecord`) is one run."""

from __future__ import annotations

import difflib
import glob
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from a2rl import paths
from a2rl.errors import A2rlError, NotFoundError
from a2rl.records.base import RecordError, load_record
from a2rl.records.report import REPORT_SCHEMA_VERSION, ReportRecord
from a2rl.records.run import RunRecord
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout

_RUN_JSON_KEY = re.compile(r"^[^/]+/[^/]+/run\.json$")


def parse_time(value: object) -> datetime | None:
    """An ISO-8601 string (or epoch seconds) as an aware UTC datetime; None when absent or unparseable.

    Naive timestamps are taken as UTC (every component writes UTC).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


@dataclass(frozen=True)
class RunInfo:
    """What `run.json` says about one run (the fields reports and the CLI need, plus the record)."""

    layout: RunLayout
    task: str | None
    started_at: datetime | None
    ended_at: datetime | None
    end_reason: str | None
    record: RunRecord

    @property
    def prefix(self) -> str:
        return self.layout.prefix

    @property
    def ref(self) -> str:
        """`<name>-<uid>`: what users type to name this run."""
        return f"{self.layout.name}-{self.layout.uid}"

    @classmethod
    def from_record(cls, prefix: str, record: RunRecord) -> RunInfo:
        return cls(
            layout=RunLayout.from_prefix(prefix),
            task=record.task,
            started_at=parse_time(record.started_at),
            ended_at=parse_time(record.ended_at),
            end_reason=record.end_reason,
            record=record,
        )

    @classmethod
    def from_json(cls, prefix: str, data: Mapping[str, Any]) -> RunInfo:
        """From run.json's JSON values (`pydantic.ValidationError` when they do not fit `RunRecord`)."""
        return cls.from_record(prefix, RunRecord.from_json(data))


def read_run_info(store: ObjectStore, layout: RunLayout) -> RunInfo:
    try:
        record = load_record(store, layout.run_json, RunRecord)
    except NotFoundError as exc:
        raise A2rlError(f"no run at {store.url_for(layout.prefix)} (run.json missing)") from exc
    return RunInfo.from_record(layout.prefix, record)


def current_report(store: ObjectStore, info: RunInfo) -> ReportRecord | None:
    """The run's `report/report.json` when it describes the run as it ended (None: no report, an
    unreadable one, another schema, a run still going, or a report written before the end
    run.json records)."""
    if info.ended_at is None:
        return None
    try:
        report = load_record(store, f"{info.layout.report_dir}/report.json", ReportRecord)
    except (NotFoundError, RecordError):
        return None
    if report.schema_version != REPORT_SCHEMA_VERSION or parse_time(report.run.ended_at) != info.ended_at:
        return None
    return report


def _run_json_keys(store: ObjectStore, namespace: str | None = None) -> list[str]:
    root = getattr(store, "root", None)
    if isinstance(root, Path):
        # A directory store: glob two levels instead of walking every blob of every run.
        pattern = f"{glob.escape(namespace)}/*/run.json" if namespace else "*/*/run.json"
        return sorted(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
    return [key for key in store.list(namespace or "") if _RUN_JSON_KEY.match(key)]


def list_runs(store: ObjectStore, namespace: str | None = None) -> list[RunInfo]:
    """Every run in the store (or in one namespace of it: only that folder is listed), oldest
    first (runs not started yet first, then by prefix).

    A `run.json` that cannot be read or parsed is skipped (it may be mid-write on a store without
    atomic writes, or not a run at all).
    """
    runs = []
    for key in _run_json_keys(store, namespace):
        prefix = key.rsplit("/", 1)[0]
        try:
            layout = RunLayout.from_prefix(prefix)
            runs.append(read_run_info(store, layout))
        except (A2rlError, ValueError):
            continue
    return sorted(runs, key=_age_key)


def _age_key(run: RunInfo) -> tuple[datetime, str]:
    return (run.started_at or datetime.min.replace(tzinfo=UTC), run.prefix)


def remember_store(uri: str) -> None:
    """Note `uri` as the store the last `a2rl run` used (best effort: a read-only home is fine)."""
    path = paths.last_store_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(uri + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def last_store() -> str | None:
    """The store the last `a2rl run` used, or None."""
    try:
        text = paths.last_store_file().read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def no_runs_message(store: ObjectStore, command: str = "a2rl report", *, latest: bool = True) -> str:
    """'no runs in store A', plus where the last `a2rl run` put its run when that was elsewhere
    (the hint is `<command> --store B`, then ` --latest` when `latest`)."""
    message = f"no runs in store {store.uri}"
    other = last_store()
    if other is not None and other.rstrip("/") != store.uri.rstrip("/"):
        message += f"; the last run used --store {other}: {command} --store {other}"
        message += " --latest" if latest else ""
    return message


def latest_run(store: ObjectStore, *, command: str = "a2rl report") -> RunLayout:
    """The run with the newest `started_at` (ties broken by prefix)."""
    runs = list_runs(store)
    if not runs:
        raise A2rlError(no_runs_message(store, command))
    return runs[-1].layout


def find_run(store: ObjectStore, ref: str, *, command: str = "a2rl report") -> RunLayout:
    """Resolve `ref` to one run.

    `ref` is a store prefix (`local/name-uid`), a `name-uid`, a uid, or a run name (the newest run
    with that name). Raises `A2rlError` naming close matches when nothing fits.
    """
    ref = ref.strip().strip("/")
    if not ref:
        raise A2rlError("empty run reference")
    if "/" in ref:
        try:
            layout = RunLayout.from_prefix(ref)
        except ValueError as exc:
            raise A2rlError(f"not a run prefix (expected <namespace>/<name>-<uid>): {ref!r}") from exc
        if store.exists(layout.run_json):
            return layout
    runs = list_runs(store)
    if not runs:
        raise A2rlError(no_runs_message(store, command))
    for matches in (
        [r for r in runs if r.prefix == ref],
        [r for r in runs if r.ref == ref],
        [r for r in runs if r.layout.uid == ref],
        [r for r in runs if r.layout.name == ref],
    ):
        if matches:
            return matches[-1].layout  # sorted oldest first: the newest wins
    candidates = sorted({r.ref for r in runs} | {r.layout.name for r in runs} | {r.prefix for r in runs})
    close = difflib.get_close_matches(ref, candidates, n=5, cutoff=0.5)
    hint = (
        f"; did you mean: {', '.join(close)}"
        if close
        else f"; {len(runs)} run(s) there, see `a2rl report --latest`"
    )
    raise A2rlError(f"no run {ref!r} in store {store.uri}{hint}")
