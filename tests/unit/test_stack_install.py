"""Installing an agent stack on first use: for real (Claude Code, cached in the shared cache), and
every failure path with a fake npm (one clear line; nothing half-installed left behind)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from a2rl_runner.stacks import install
from a2rl_runner.stacks.install import MARKER, StackInstallError, agents_dir, ensure_stack

from a2rl.stacks import STACKS

CLAUDE_VERSION = STACKS["claude-code"].default_version

FAKE_NPM = r"""#!/bin/sh
# A stand-in for npm: records its call, then does what $FAKE_NPM_MODE says.
echo "$@" >> "$FAKE_NPM_LOG"
prefix=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--prefix" ]; then prefix="$2"; shift; fi
  shift
done
case "$FAKE_NPM_MODE" in
  offline)
    echo "npm error code ENOTFOUND" >&2
    echo "npm error network request to https://registry.npmjs.org/x failed, reason: getaddrinfo ENOTFOUND" >&2
    exit 1 ;;
  missing)
    echo "npm error code E404" >&2
    echo "npm error 404 Not Found - GET https://registry.npmjs.org/@anthropic-ai%2fclaude-code" >&2
    exit 1 ;;
  nobinary)
    mkdir -p "$prefix/node_modules/@anthropic-ai/claude-code"
    exit 0 ;;
  *)
    [ -n "$FAKE_NPM_SLEEP" ] && sleep "$FAKE_NPM_SLEEP"
    mkdir -p "$prefix/node_modules/.bin"
    printf '#!/bin/sh\necho "%s (Claude Code)"\n' "$FAKE_VERSION" > "$prefix/node_modules/.bin/claude"
    chmod +x "$prefix/node_modules/.bin/claude"
    exit 0 ;;
esac
"""


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `npm` first on PATH; returns its call log."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    log = tmp_path / "npm.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NPM_LOG", str(log))
    monkeypatch.setenv("FAKE_VERSION", CLAUDE_VERSION)
    monkeypatch.delenv("FAKE_NPM_MODE", raising=False)
    return log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) if root.exists() else []


def test_claude_code_installs_for_real_once_and_runs(capfd: pytest.CaptureFixture[str]) -> None:
    """The real package from the npm registry, into the shared cache (a no-op once installed)."""
    first = ensure_stack("claude-code")
    assert first.path == agents_dir() / f"claude-code-{CLAUDE_VERSION}"
    assert (first.path / MARKER).is_file() and first.read_only[0] == first.path
    out = subprocess.run(
        [str(first.entry), "--version"], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == f"{CLAUDE_VERSION} (Claude Code)"
    capfd.readouterr()
    again = ensure_stack("claude-code", CLAUDE_VERSION)
    assert again == first and capfd.readouterr().err == ""  # cached: nothing installed, nothing said


def test_fake_install_is_atomic_cached_and_says_what_it_does(
    tmp_path: Path, fake_npm: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "agents"
    got = ensure_stack("claude-code", root=root)
    err = capfd.readouterr().err
    assert f"installing agent stack claude-code {CLAUDE_VERSION}" in err and "installed claude-code" in err
    assert got.entry == root / f"claude-code-{CLAUDE_VERSION}" / "node_modules/.bin/claude"
    (call,) = _calls(fake_npm)
    assert (
        "--no-audit --no-fund --include=optional" in call
        and f"@anthropic-ai/claude-code@{CLAUDE_VERSION}" in call
    )
    assert _leftovers(root) == [f"claude-code-{CLAUDE_VERSION}"]
    assert oct(got.path.stat().st_mode & 0o777) == "0o755"
    assert ensure_stack("claude-code", root=root) == got and len(_calls(fake_npm)) == 1


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("offline", "the package registry is unreachable"),
        ("missing", "a package was not found in the registry: npm error 404 Not Found"),
        ("nobinary", "node_modules/.bin/claude is missing after the install"),
    ],
)
def test_a_failed_install_leaves_nothing_and_says_why_in_one_line(
    tmp_path: Path, fake_npm: Path, monkeypatch: pytest.MonkeyPatch, mode: str, message: str
) -> None:
    monkeypatch.setenv("FAKE_NPM_MODE", mode)
    root = tmp_path / "agents"
    with pytest.raises(StackInstallError) as info:
        ensure_stack("claude-code", root=root)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert _leftovers(root) == []


def test_a_binary_that_does_not_run_is_refused(
    tmp_path: Path, fake_npm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VERSION", "0.0.1")  # installed, but not the version asked for
    root = tmp_path / "agents"
    with pytest.raises(StackInstallError, match=r"does not run .*optional native packages"):
        ensure_stack("claude-code", root=root)
    assert _leftovers(root) == []


def test_no_npm_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(StackInstallError, match=r"npm is not on PATH; install Node\.js >= 20 with npm"):
        ensure_stack("claude-code", root=tmp_path / "agents")


def test_unknown_version_names_the_tested_ones(tmp_path: Path) -> None:
    with pytest.raises(
        StackInstallError, match=rf"claude-code 1\.0\.0 is not a tested version \(tested: {CLAUDE_VERSION}\)"
    ):
        ensure_stack("claude-code", "1.0.0", root=tmp_path)


def test_concurrent_installs_install_once(
    tmp_path: Path, fake_npm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NPM_SLEEP", "1")
    root = tmp_path / "agents"
    results: list[object] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(ensure_stack("claude-code", root=root, progress=lambda _: None))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(set(map(str, results))) == 1
    assert len(_calls(fake_npm)) == 1


def test_interrupted_and_foreign_installs(tmp_path: Path, fake_npm: Path) -> None:
    root = tmp_path / "agents"
    final = root / f"claude-code-{CLAUDE_VERSION}"
    # A temporary directory left by an interrupted install, and a broken install without marker.
    (root / f".tmp-claude-code-{CLAUDE_VERSION}-x1").mkdir(parents=True)
    (final / "node_modules").mkdir(parents=True)
    got = ensure_stack("claude-code", root=root)
    assert (got.path / MARKER).is_file() and _leftovers(root) == [final.name]
    assert len(_calls(fake_npm)) == 1
    # A complete install made by hand (no marker) is kept: its entry prints the version.
    (final / MARKER).unlink()
    assert ensure_stack("claude-code", root=root) == got and len(_calls(fake_npm)) == 1
    assert (final / MARKER).is_file()


def test_pypi_stack_needs_a_new_enough_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "_python_candidates", lambda: iter([sys.executable]))
    if sys.version_info >= (3, 12):
        pytest.skip("the test interpreter is new enough for openhands")
    with pytest.raises(StackInstallError, match=r"openhands stack: it needs Python >= 3\.12"):
        ensure_stack("openhands", root=tmp_path)
