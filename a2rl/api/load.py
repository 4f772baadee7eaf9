"""Read and validate BenchRun / BenchSubmission documents the way the API server would.

Every problem is one `path: message` line with the camelCase path the user wrote
(`spec.budget.wallTimeSeconds: must be ≥ 1`). Validation is strict like Kubernetes: unknown
fields (snake_case included), wrong types (`"5"` for an integer) and duplicate keys are errors.

Hostile files are one-line errors too: a file is read only when it is a regular file of at most
`MAX_DOCUMENT_BYTES` (never more than that is read: `/dev/zero` or a FIFO is refused, not
read), YAML nested deeper than `MAX_YAML_DEPTH` is refused before it reaches a recursive parser,
and aliases may not expand a document beyond `MAX_YAML_NODES` nodes ("billion laughs").
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import stat
from collections.abc import Collection, Hashable
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from a2rl.api.benchcampaign import BenchCampaign
from a2rl.api.benchrun import BenchRun
from a2rl.api.benchsubmission import SHA256, BenchSubmission
from a2rl.api.common import DNS_LABEL, DNS_SUBDOMAIN, QUANTITY_PATTERN
from a2rl.api.crdgen import openapi_schema
from a2rl.constants import API_GROUP_VERSION, BENCHCAMPAIGN_KIND, BENCHRUN_KIND, BENCHSUBMISSION_KIND
from a2rl.errors import A2rlError, InvalidDocumentError

Resource = BenchRun | BenchSubmission
MODELS: dict[str, type[BaseModel]] = {BENCHRUN_KIND: BenchRun, BENCHSUBMISSION_KIND: BenchSubmission}
#: Every kind a file may hold: `load_benchcampaign` reads BenchCampaigns (`a2rl campaign run`).
_SCHEMA_MODELS: dict[str, type[BaseModel]] = {**MODELS, BENCHCAMPAIGN_KIND: BenchCampaign}

#: Largest BenchRun/BenchSubmission file read (a real one is a few KiB).
MAX_DOCUMENT_BYTES = 1 << 20
#: Deepest nesting of YAML collections (a BenchRun needs about 6 levels).
MAX_YAML_DEPTH = 100
#: Most nodes a document may have once its aliases are expanded.
MAX_YAML_NODES = 1_000_000


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (Kubernetes' strict decoding does too), nesting
    deeper than `MAX_YAML_DEPTH` and aliases that expand beyond `MAX_YAML_NODES` nodes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # PyYAML composes and constructs recursively: stop long before Python's recursion limit.
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # Scalars PyYAML parses itself (ints past 4300 digits, impossible timestamps) raise plain
        # ValueErrors: make them YAML errors with a position like every other.
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as exc:
            what = str(exc).split(";")[0]
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value ({what})", node.start_mark
            ) from None

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        problem = _expansion_problem(node) if node is not None else None
        if problem and node is not None:
            raise yaml.composer.ComposerError(None, None, problem, node.start_mark)
        return node


def _expansion_problem(root: yaml.Node) -> str | None:
    """Why the node graph under `root` is too large once aliases are expanded (None: it is not).

    Iterative and memoised, so a shared node is counted once per use without being walked again."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the ancestors of what is being walked: a repeat is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, walked = stack.pop()
        key = id(node)
        children = _child_nodes(node)
        if walked:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > MAX_YAML_NODES:
                return f"aliases expand the document beyond {MAX_YAML_NODES} nodes"
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            return "an alias refers to a collection that contains it"
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return None


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a scalar, not a list or mapping", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """The one YAML document in `text`; InvalidDocumentError for bad YAML, no or several documents."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "syntax error"
        raise InvalidDocumentError(source, [f"invalid YAML{where}: {what}"]) from None
    except yaml.YAMLError as exc:
        raise InvalidDocumentError(source, [f"invalid YAML: {exc}"]) from None
    except RecursionError:  # MAX_YAML_DEPTH keeps PyYAML well inside the limit; never a traceback
        raise InvalidDocumentError(source, ["invalid YAML: nested too deeply"]) from None
    if not docs:
        raise InvalidDocumentError(source, ["the file holds no document"])
    if len(docs) > 1:
        raise InvalidDocumentError(
            source, [f"expected one document, found {len(docs)} (one object per file)"]
        )
    return docs[0]


def read_document(path: Path) -> Any:
    """The YAML document in the file at `path` (one-line A2rlError when it cannot be read)."""
    return parse_yaml(read_document_text(path), str(path))


_FILE_TYPES = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
}


def read_document_text(path: Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The text of the regular file at `path`, at most `max_bytes` of UTF-8 (one-line A2rlError
    otherwise). Opened non-blocking, so a FIFO cannot hang us, and never read past the cap."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise A2rlError(f"{path}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO nobody writes to
            raise A2rlError(f"{path}: not a regular file; give a YAML file") from None
        raise A2rlError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise A2rlError(f"{path}: is a directory, not a YAML file")
        if not stat.S_ISREG(mode):
            what = _FILE_TYPES.get(stat.S_IFMT(mode), "a special file")
            raise A2rlError(f"{path}: is {what}, not a YAML file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise A2rlError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise A2rlError(
            f"{path}: larger than {_size(max_bytes)}, the limit for a BenchRun or BenchSubmission file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise A2rlError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def _json_default(value: Any) -> str:
    # YAML turns unquoted timestamps into datetimes; on the wire they are RFC 3339 strings.
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"cannot represent {type(value).__name__} in JSON")


def _got(value: Any) -> str:
    if value is None:
        return "null"
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


@cache
def _schema(kind: str) -> dict[str, Any]:

    return openapi_schema(_SCHEMA_MODELS[kind])


def _known_fields(kind: str, loc: tuple[int | str, ...]) -> list[str]:
    node: dict[str, Any] = _schema(kind)
    for part in loc:
        node = node.get("items", {}) if isinstance(part, int) else node.get("properties", {}).get(part, {})
    return list(node.get("properties", {}))


def _unknown_field(kind: str, loc: tuple[int | str, ...]) -> str:
    key = str(loc[-1])
    close = difflib.get_close_matches(key.replace("_", ""), _known_fields(kind, loc[:-1]), n=1, cutoff=0.6)
    return f"unknown field (did you mean {close[0]}?)" if close else "unknown field"


# Patterns users meet, said in words.
_PATTERN_WORDS = {
    QUANTITY_PATTERN: "a Kubernetes quantity such as 2, 500m or 16Gi",
    DNS_LABEL: "a lowercase DNS label (a-z, 0-9, '-'; starts and ends alphanumeric)",
    DNS_SUBDOMAIN: "a lowercase DNS subdomain (a-z, 0-9, '-', '.')",
    SHA256: "a sha256 hex digest (64 lowercase hex digits)",
}

_TYPE_MESSAGES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "datetime_type": "must be an RFC 3339 date-time, e.g. 2025-01-31T12:00:00Z",
    "datetime_parsing": "must be an RFC 3339 date-time, e.g. 2025-01-31T12:00:00Z",
    "datetime_from_date_parsing": "must be an RFC 3339 date-time, e.g. 2025-01-31T12:00:00Z",
}


def _message(kind: str, err: ErrorDetails) -> str:
    etype, ctx = err["type"], err.get("ctx", {})
    if etype == "missing":
        return "required field is missing"
    if etype == "extra_forbidden":
        return _unknown_field(kind, tuple(err["loc"]))
    if etype in _TYPE_MESSAGES:
        return f"{_TYPE_MESSAGES[etype]} (got {_got(err.get('input'))})"
    bounds = {"greater_than_equal": ("≥", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("≤", "le"), "less_than": ("<", "lt")}  # fmt: skip
    if etype in bounds:
        sign, key = bounds[etype]
        return f"must be {sign} {ctx[key]} (got {_got(err.get('input'))})"
    if etype == "string_too_short":
        n = ctx["min_length"]
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if etype == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if etype == "too_short":
        n = ctx["min_length"]
        return "must not be empty" if n == 1 else f"must have at least {n} items"
    if etype == "too_long":
        return f"must have at most {ctx['max_length']} items"
    if etype == "string_pattern_mismatch":
        pattern = ctx["pattern"]
        rule = f"be {_PATTERN_WORDS[pattern]}" if pattern in _PATTERN_WORDS else f"match {pattern}"
        return f"must {rule} (got {_got(err.get('input'))})"
    if etype in ("literal_error", "enum"):
        return f"must be one of {ctx['expected']} (got {_got(err.get('input'))})"
    if etype == "a2rl_rule":
        return str(ctx["message"])
    return err["msg"]


def _path(err: ErrorDetails) -> str:
    out = ""
    for part in err["loc"]:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    subpath = str(err.get("ctx", {}).get("subpath", ""))
    if subpath:
        out += subpath if subpath.startswith("[") else f".{subpath}"
    return out or "<document>"


def _check(data: Any, known_tasks: Collection[str] | None) -> tuple[Resource | None, list[str]]:
    if not isinstance(data, dict):
        got = "null" if data is None else type(data).__name__
        return None, [f"<document>: must be a mapping with apiVersion, kind, metadata and spec (got {got})"]
    problems: list[str] = []
    kind = data.get("kind")
    if kind is None:
        problems.append(f"kind: required field is missing (expected one of {', '.join(MODELS)})")
    elif kind not in MODELS:
        problems.append(f"kind: must be one of {', '.join(MODELS)} (got {_got(kind)})")
    api_version = data.get("apiVersion")
    if api_version is None:
        problems.append(f"apiVersion: required field is missing (expected {API_GROUP_VERSION})")
    elif api_version != API_GROUP_VERSION:
        problems.append(f"apiVersion: must be {API_GROUP_VERSION} (got {_got(api_version)})")
    if kind not in MODELS:
        return None, problems
    model = MODELS[kind]
    try:
        wire = json.dumps({**data, "apiVersion": API_GROUP_VERSION}, default=_json_default)
    except (TypeError, ValueError) as exc:
        return None, [*problems, f"<document>: {exc}"]
    try:
        obj = model.model_validate_json(wire, strict=True, by_alias=True, by_name=False)
    except ValidationError as exc:
        problems += [f"{_path(e)}: {_message(kind, e)}" for e in exc.errors(include_url=False)]
        obj = None
    problems += _semantic_problems(data, known_tasks)
    if problems:
        return None, problems
    assert isinstance(obj, BenchRun | BenchSubmission)
    return obj, []


def _semantic_problems(data: dict[str, Any], known_tasks: Collection[str] | None) -> list[str]:
    """Rules that need more than the schema: the task must be one of `known_tasks` (the task
    registry lives a layer above the API; callers that have it pass its names)."""
    spec = data.get("spec")
    if known_tasks is None or data.get("kind") != BENCHRUN_KIND or not isinstance(spec, dict):
        return []
    task = spec.get("task")
    if not isinstance(task, str) or not task or task in known_tasks:
        return []
    return [f"spec.task: unknown task {task!r} (known: {', '.join(sorted(known_tasks))})"]


def validate_document(data: Any, source: str, known_tasks: Collection[str] | None = None) -> list[str]:
    """Every problem of a parsed BenchRun/BenchSubmission document, as `path: message` lines."""
    del source  # the caller prefixes problems with it (InvalidDocumentError does)
    return _check(data, known_tasks)[1]


def parse_resource(data: Any, source: str, known_tasks: Collection[str] | None = None) -> Resource:
    """The validated BenchRun or BenchSubmission; InvalidDocumentError listing every problem."""
    obj, problems = _check(data, known_tasks)
    if obj is None:
        raise InvalidDocumentError(source, problems)
    return obj


def load_resource(path: Path, known_tasks: Collection[str] | None = None) -> Resource:
    """Read, parse and validate the BenchRun or BenchSubmission in the YAML file at `path`."""
    return parse_resource(read_document(path), str(path), known_tasks)


def parse_benchrun(data: Any, source: str, known_tasks: Collection[str] | None = None) -> BenchRun:
    """The validated BenchRun in `data`; InvalidDocumentError listing every problem."""
    if (
        isinstance(data, dict)
        and data.get("kind") not in (None, BENCHRUN_KIND)
        and data.get("kind") in MODELS
    ):
        raise InvalidDocumentError(source, [f"kind: must be {BENCHRUN_KIND} (got {_got(data.get('kind'))})"])
    obj = parse_resource(data, source, known_tasks)
    assert isinstance(obj, BenchRun)
    return obj


def load_benchrun(path: Path, known_tasks: Collection[str] | None = None) -> BenchRun:
    """Read, parse and validate the BenchRun in the YAML file at `path`."""
    return parse_benchrun(read_document(path), str(path), known_tasks)


def parse_benchcampaign(data: Any, source: str, known_tasks: Collection[str] | None = None) -> BenchCampaign:
    """The validated BenchCampaign in `data`; InvalidDocumentError listing every problem (the
    template's task and the `matrix.tasks` must be among `known_tasks` when given)."""
    if not isinstance(data, dict):
        got = "null" if data is None else type(data).__name__
        raise InvalidDocumentError(
            source, [f"<document>: must be a mapping with apiVersion, kind, metadata and spec (got {got})"]
        )
    problems: list[str] = []
    kind, api_version = data.get("kind"), data.get("apiVersion")
    if kind != BENCHCAMPAIGN_KIND:
        problems.append(
            f"kind: required field is missing (expected {BENCHCAMPAIGN_KIND})"
            if kind is None
            else f"kind: must be {BENCHCAMPAIGN_KIND} (got {_got(kind)})"
        )
    if api_version != API_GROUP_VERSION:
        problems.append(
            f"apiVersion: required field is missing (expected {API_GROUP_VERSION})"
            if api_version is None
            else f"apiVersion: must be {API_GROUP_VERSION} (got {_got(api_version)})"
        )
    if problems:
        raise InvalidDocumentError(source, problems)
    try:
        wire = json.dumps(data, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise InvalidDocumentError(source, [f"<document>: {exc}"]) from None
    obj: BenchCampaign | None = None
    try:
        obj = BenchCampaign.model_validate_json(wire, strict=True, by_alias=True, by_name=False)
    except ValidationError as exc:
        problems += [f"{_path(e)}: {_message(BENCHCAMPAIGN_KIND, e)}" for e in exc.errors(include_url=False)]
    problems += _campaign_task_problems(data, known_tasks)
    if problems or obj is None:
        raise InvalidDocumentError(source, problems)
    return obj


def _campaign_task_problems(data: dict[str, Any], known_tasks: Collection[str] | None) -> list[str]:
    spec = data.get("spec")
    if known_tasks is None or not isinstance(spec, dict):
        return []
    found: list[tuple[str, Any]] = []
    template, matrix = spec.get("template"), spec.get("matrix")
    if isinstance(template, dict):
        found.append(("spec.template.task", template.get("task")))
    if isinstance(matrix, dict) and isinstance(matrix.get("tasks"), list):
        found += [(f"spec.matrix.tasks[{i}]", task) for i, task in enumerate(matrix["tasks"])]
    known = ", ".join(sorted(known_tasks))
    return [
        f"{where}: unknown task {task!r} (known: {known})"
        for where, task in found
        if isinstance(task, str) and task and task not in known_tasks
    ]


def load_benchcampaign(path: Path, known_tasks: Collection[str] | None = None) -> BenchCampaign:
    """Read, parse and validate the BenchCampaign in the YAML file at `path`."""
    return parse_benchcampaign(read_document(path), str(path), known_tasks)
