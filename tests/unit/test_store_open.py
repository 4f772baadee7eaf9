"""`open_store`: URI → store, with one-line errors for every user mistake."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from a2rl.errors import A2rlError
from a2rl.paths import default_store_uri
from a2rl.store.local import LocalStore
from a2rl.store.open import open_store, parse_endpoint


def test_default_is_the_local_store_under_a2rl_home() -> None:
    store = open_store(None)
    assert isinstance(store, LocalStore)
    assert store.uri == default_store_uri()
    assert str(store.root).startswith(os.environ["A2RL_HOME"])


def test_plain_path_and_file_uri(tmp_path: Path) -> None:
    a = open_store(str(tmp_path / "a"))
    b = open_store((tmp_path / "b with space").as_uri())
    assert isinstance(a, LocalStore) and a.root == tmp_path / "a"
    assert isinstance(b, LocalStore) and b.root == tmp_path / "b with space"
    a.put_bytes("k", b"v")
    assert open_store(a.uri).get_bytes("k") == b"v"


def test_unknown_scheme_is_one_clear_line() -> None:
    with pytest.raises(A2rlError, match="unsupported store URI 'gs://b/p'") as exc:
        open_store("gs://b/p")
    assert "\n" not in str(exc.value)


def test_unusable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(A2rlError, match="cannot create store directory"):
        open_store(str(blocker / "store"))
    with pytest.raises(A2rlError, match="not a directory"):
        open_store(str(blocker))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_directory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(A2rlError, match="not writable"):
        open_store(str(ro))


def test_s3_without_credentials_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "someone")
    with pytest.raises(A2rlError, match="needs AWS_ENDPOINT_URL, AWS_SECRET_ACCESS_KEY"):
        open_store("s3://bucket/prefix")
    with pytest.raises(A2rlError, match="names no bucket"):
        open_store("s3:///prefix")


def test_s3_unreachable_endpoint_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: refused at once
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    with pytest.raises(A2rlError, match="unreachable"):
        open_store("s3://bucket/prefix")


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://minio:9000", ("minio:9000", False)),
        ("https://s3.example.com", ("s3.example.com", True)),
        ("127.0.0.1:9000", ("127.0.0.1:9000", False)),
    ],
)
def test_parse_endpoint(endpoint: str, expected: tuple[str, bool]) -> None:
    assert parse_endpoint(endpoint) == expected


def test_parse_endpoint_rejects_paths_and_schemes() -> None:
    for bad in ("ftp://h:1", "http://h:1/some/path"):
        with pytest.raises(A2rlError):
            parse_endpoint(bad)
