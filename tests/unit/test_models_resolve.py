"""Resolution of `baseModel.source` to a local directory (no hub access)."""

from __future__ import annotations

from pathlib import Path

import pytest
from a2rl_cli import main as cli_main

from a2rl.errors import A2rlError, NotFoundError
from a2rl.models.resolve import resolve_base_model


def _fake_model(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_local_dir_and_file_uri(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "my model")
    assert resolve_base_model(str(model)) == model.resolve()
    assert resolve_base_model(model.as_uri()) == model.resolve()


def test_missing_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="base model not found"):
        resolve_base_model(str(tmp_path / "nope"))
    with pytest.raises(NotFoundError, match="base model not found"):
        resolve_base_model((tmp_path / "nope").as_uri())


def test_dir_without_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match=r"base model not found: .*config\.json"):
        resolve_base_model(str(tmp_path / "empty"))


@pytest.mark.parametrize("source", ["hf:Qwen/Qwen2.5-0.5B", "hf://Qwen/Qwen2.5-0.5B", "s3://bucket/model"])
def test_remote_schemes_are_refused(source: str) -> None:
    with pytest.raises(A2rlError, match="not supported at run time"):
        resolve_base_model(source)


def test_unknown_builtin() -> None:
    with pytest.raises(A2rlError, match="unknown builtin model"):
        resolve_base_model("builtin:huge")


def test_builtin_tiny_builds_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(NotFoundError, match="not built yet"):
        resolve_base_model("builtin:tiny", build=False)
    path = resolve_base_model("builtin:tiny")
    assert path == tmp_path / "cache" / "models" / "tiny"
    assert (path / "config.json").is_file()
    assert resolve_base_model("builtin:tiny", build=False) == path


def test_cli_reports_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["models", "resolve", "hf:org/model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("a2rl: error: ") and "\n" not in err
