"""Install an LLM agent stack on first local use (docs/agents.md, "Agent stacks").

`ensure_stack(stack, version)` returns the stack installed in `<cache>/agents/<stack>-<version>`
(`a2rl.paths.cache_dir()`), installing it first when it is not there: npm packages with `npm
install --prefix` (optional dependencies, where the native binaries are, included), PyPI ones
into a virtualenv made there (uv from the project's tool cache when there is one, else `python
-m venv` + pip). An install is built in a temporary directory next to the final one, checked
(the entry prints its version) and renamed into place, under a lock: a failed or interrupted
install leaves nothing half-installed, and concurrent runs install once. What goes wrong is one
line naming what is missing (`StackInstallError`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from a2rl.errors import A2rlError
from a2rl.paths import cache_dir
from a2rl.stacks import NODE_MIN_MAJOR, StackDef, resolve_version, stack_def

#: Written last into a complete install: what was installed, when, and what its entry printed.
MARKER = ".a2rl-install.json"
#: Longest an install may take (a cold openhands install downloads ~200 MB of wheels).
INSTALL_TIMEOUT_S = 1800
CHECK_TIMEOUT_S = 120
#: Prefixes every sandbox already shows read-only (the toolchain): nothing to add for them.
SYSTEM_PREFIXES = (Path("/usr"), Path("/bin"), Path("/lib"), Path("/lib64"))

Progress = Callable[[str], None]


class StackInstallError(A2rlError):
    """A stack could not be installed; the message is one line saying what is missing."""


@dataclass(frozen=True)
class InstalledStack:
    """A stack ready to run."""

    stack: str
    version: str
    #: The install directory (`<cache>/agents/<stack>-<version>`).
    path: Path
    #: The program to start (`invocation(..., install_dir=path)` puts it in argv[0]).
    entry: Path
    #: What the sandbox must show read-only: the install directory, and the prefixes of the
    #: interpreter it needs (node, the virtualenv's base Python) when they are outside /usr.
    read_only: tuple[Path, ...]
    #: Directories to put first on the agent's PATH (node's, for stacks whose entry is a script).
    path_dirs: tuple[Path, ...]


def agents_dir() -> Path:
    return cache_dir() / "agents"


def _say(line: str) -> None:
    print(f"[a2rl] {line}", file=sys.stderr, flush=True)


def ensure_stack(
    stack: str,
    version: str | None = None,
    *,
    root: Path | None = None,
    progress: Progress = _say,
) -> InstalledStack:
    """`stack` at `version` (default: its newest tested), installed under `root` (default
    `<cache>/agents`) on first use. StackInstallError (one line) when it cannot be installed."""
    try:
        sdef = stack_def(stack)
        version = resolve_version(stack, version)
    except ValueError as exc:
        raise StackInstallError(str(exc)) from None
    root = root or agents_dir()
    final = root / f"{stack}-{version}"
    if _complete(final, sdef, version):
        return _installed(sdef, version, final)
    _check_tools(sdef)  # before the lock: a missing tool is said at once
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{stack}-{version}.lock", progress, f"{stack} {version}"):
        if _complete(final, sdef, version):  # another process installed it while we waited
            return _installed(sdef, version, final)
        for stale in root.glob(f".tmp-{stack}-{version}-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by an interrupted install
        if final.exists() and _adopt(final, sdef, version):
            progress(f"{stack} {version}: found a complete install in {final}")
            return _installed(sdef, version, final)
        _install(sdef, version, root, final, progress)
    return _installed(sdef, version, final)


def _complete(path: Path, sdef: StackDef, version: str) -> bool:
    try:
        marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(marker, dict)
        and marker.get("stack") == sdef.name
        and marker.get("version") == version
        and os.access(path / sdef.entry, os.X_OK)
    )


def _adopt(path: Path, sdef: StackDef, version: str) -> bool:
    """An install without our marker (made by hand, or by an older a2rl) whose entry prints the
    expected version is kept: the marker is added. Anything else is moved aside and replaced."""
    try:
        printed = _check_entry(path, sdef, version)
    except StackInstallError:
        return False
    _write_marker(path, sdef, version, printed)
    return True


def _install(sdef: StackDef, version: str, root: Path, final: Path, progress: Progress) -> None:
    what = " ".join(f"{p}@{version}" if sdef.install == "npm" else f"{p}=={version}" for p in sdef.packages)
    progress(f"installing agent stack {sdef.name} {version} ({what}) into {final} (first use; once)")
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{sdef.name}-{version}-", dir=root))
    try:
        if sdef.install == "npm":
            _npm_install(sdef, version, tmp, progress)
        else:
            _pypi_install(sdef, version, tmp, progress)
        printed = _check_entry(tmp, sdef, version)
        _write_marker(tmp, sdef, version, printed)
        tmp.chmod(0o755)  # mkdtemp made it private; the agent (another user in a pod) reads it
        if final.exists() or final.is_symlink():
            aside = Path(tempfile.mkdtemp(prefix=f".tmp-{sdef.name}-{version}-old-", dir=root))
            final.rename(aside / "old")
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        for stale in root.glob(f".tmp-{sdef.name}-{version}-old-*"):
            shutil.rmtree(stale, ignore_errors=True)
    progress(f"installed {sdef.name} {version} in {time.monotonic() - start:.0f} s: {final / sdef.entry}")


# --- tools ------------------------------------------------------------------------------------


def _check_tools(sdef: StackDef) -> None:
    if sdef.install == "npm":
        if shutil.which("npm") is None:
            raise StackInstallError(
                f"cannot install the {sdef.name} stack: npm is not on PATH; install Node.js "
                f">= {NODE_MIN_MAJOR} with npm (e.g. `apt-get install nodejs npm`, or https://nodejs.org)"
            )
        if sdef.needs_node:
            _node()
    else:
        _python_for(sdef)


def _node() -> Path:
    """The `node` on PATH, when it is recent enough (StackInstallError otherwise)."""
    found = shutil.which("node")
    if found is None:
        raise StackInstallError(
            f"node is not on PATH; install Node.js >= {NODE_MIN_MAJOR} (e.g. `apt-get install nodejs`, "
            "or https://nodejs.org)"
        )
    node = Path(found).resolve()
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30, check=True)
        major = int(re.match(r"v(\d+)", out.stdout.strip()).group(1))  # type: ignore[union-attr]
    except (OSError, subprocess.SubprocessError, AttributeError, ValueError):
        raise StackInstallError(f"{node} --version failed; install Node.js >= {NODE_MIN_MAJOR}") from None
    if major < NODE_MIN_MAJOR:
        raise StackInstallError(
            f"{node} is Node.js {out.stdout.strip()}; the agent stacks need >= {NODE_MIN_MAJOR}"
        )
    return node


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        major, minor = out.stdout.split()
        return int(major), int(minor)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _python_candidates() -> Iterator[str]:
    yield sys.executable
    for name in ("python3.14", "python3.13", "python3.12", "python3"):
        found = shutil.which(name)
        if found:
            yield found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    yield from sorted((str(p) for p in pyenv.glob("3.*/bin/python3")), reverse=True)


def _python_for(sdef: StackDef) -> str:
    """An interpreter new enough for `sdef`'s distributions (StackInstallError when none is)."""
    want = sdef.python_min or (3, 11)
    for python in _python_candidates():
        got = _python_version(python)
        if got is not None and got >= want:
            return python
    need = ".".join(map(str, want))
    raise StackInstallError(
        f"cannot install the {sdef.name} stack: it needs Python >= {need} and none was found on PATH "
        f"(or in ~/.pyenv); install one (e.g. `uv python install {need}`, or python{need} from your "
        "package manager)"
    )


def _uv() -> Path | None:
    """uv from the project's tool cache (`hack/venv` installs it there), else on PATH."""
    tools = sorted(cache_dir().glob("tools/uv-*/bin/uv"), reverse=True)
    for candidate in tools:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("uv")
    return Path(found) if found else None


# --- installers -------------------------------------------------------------------------------

_OFFLINE = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network|"
    r"dns error|failed to lookup address|Connection refused|Temporary failure in name resolution|"
    r"Name or service not known|Max retries exceeded|Could not fetch|Failed to fetch|timed out",
    re.IGNORECASE,
)


def _run(argv: list[str], *, what: str, env: dict[str, str] | None = None) -> str:
    """Run one install step; StackInstallError with the tool's last line when it fails."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise StackInstallError(f"{what}: {argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise StackInstallError(f"{what}: gave up after {INSTALL_TIMEOUT_S} s") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise StackInstallError(f"{what} failed: {_reason(output, argv[0])}")
    return output


def _reason(output: str, tool: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and "Unknown user config" not in ln]
    if _OFFLINE.search(output):
        return f"the package registry is unreachable (no network, or a proxy/registry setting of {tool})"
    for pattern in (
        r"E404|404 Not Found|is not in this registry",
        r"No solution found|not found in the package registry",
    ):
        hit = next((ln for ln in reversed(lines) if re.search(pattern, ln)), None)
        if hit:
            return f"a package was not found in the registry: {hit[:300]}"
    errors = [ln for ln in lines if re.search(r"\berr(or)?\b", ln, re.IGNORECASE)]
    last = (errors or lines or [f"{tool} exited with an error and printed nothing"])[-1]
    return last[:400]


def _npm_install(sdef: StackDef, version: str, tmp: Path, progress: Progress) -> None:
    specs = [f"{p}@{version}" for p in sdef.packages]
    progress(f"npm install {' '.join(specs)}")
    _run(
        # Optional dependencies hold the native binaries: included even where a config omits them.
        ["npm", "install", "--prefix", str(tmp), "--no-audit", "--no-fund", "--include=optional", *specs],
        what=f"npm install {' '.join(specs)}",
    )


def _pypi_install(sdef: StackDef, version: str, tmp: Path, progress: Progress) -> None:
    python = _python_for(sdef)
    reqs = [f"{p}=={version}" for p in sdef.packages]
    uv = _uv()
    if uv is not None:
        env = dict(os.environ)
        env.setdefault("UV_CACHE_DIR", str(cache_dir() / "uv"))
        env.setdefault("UV_PYTHON_DOWNLOADS", "never")
        progress(f"uv venv + uv pip install {' '.join(reqs)} (Python {python})")
        _run(
            [str(uv), "venv", "-q", "--relocatable", "--python", python, str(tmp), "--allow-existing"],
            what="uv venv",
            env=env,
        )
        _run(
            [str(uv), "pip", "install", "-q", "--python", str(tmp / "bin" / "python"), *reqs],
            what=f"uv pip install {' '.join(reqs)}",
            env=env,
        )
        return
    progress(f"python -m venv + pip install {' '.join(reqs)} (Python {python}; no uv found)")
    _run([python, "-m", "venv", str(tmp)], what="python -m venv")
    _run(
        [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *reqs],
        what=f"pip install {' '.join(reqs)}",
    )


def _check_entry(path: Path, sdef: StackDef, version: str) -> str:
    """Run the entry's version check; its output (StackInstallError unless it names `version`)."""
    entry = path / sdef.entry
    if not os.access(entry, os.X_OK):
        raise StackInstallError(f"{sdef.name} {version}: {entry} is missing after the install")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2RL_", "AWS_"))}
    env.update(OPENHANDS_SUPPRESS_BANNER="1", LITELLM_LOCAL_MODEL_COST_MAP="True", NO_COLOR="1")
    if sdef.needs_node:
        env["PATH"] = f"{_node().parent}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="a2rl-stack-check-") as home:
        env["HOME"] = home  # the CLIs write settings at start: not into the user's home
        try:
            proc = subprocess.run(
                [str(entry), *sdef.check],
                capture_output=True,
                text=True,
                timeout=CHECK_TIMEOUT_S,
                check=False,
                env=env,
                cwd=home,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StackInstallError(
                f"{sdef.name} {version}: {entry} {' '.join(sdef.check)} failed: {exc}"
            ) from None
    printed = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or version not in proc.stdout:
        last = printed.splitlines()[-1][:300] if printed else "no output"
        raise StackInstallError(
            f"{sdef.name} {version}: the installed {sdef.entry} does not run (exit {proc.returncode}: "
            f"{last}); were its optional native packages or install scripts skipped?"
        )
    return proc.stdout.strip()


def _write_marker(path: Path, sdef: StackDef, version: str, printed: str) -> None:
    doc = {
        "stack": sdef.name,
        "version": version,
        "install": sdef.install,
        "packages": list(sdef.packages),
        "entry": sdef.entry,
        "entry_version": printed[-200:],
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = path / f"{MARKER}.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.rename(path / MARKER)


@contextmanager
def _locked(lock: Path, progress: Progress, what: str) -> Iterator[None]:
    with open(lock, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another process installing {what}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- what the sandbox needs -------------------------------------------------------------------


def _outside_system(path: Path) -> bool:
    return not any(path == p or path.is_relative_to(p) for p in SYSTEM_PREFIXES)


def _venv_base_prefix(venv: Path) -> Path | None:
    """The prefix of the interpreter a virtualenv runs (from `home` in its pyvenv.cfg)."""
    try:
        cfg = (venv / "pyvenv.cfg").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in cfg.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).resolve().parent
    return None


def _installed(sdef: StackDef, version: str, path: Path) -> InstalledStack:
    read_only: list[Path] = [path]
    path_dirs: list[Path] = []
    if sdef.install == "npm":
        node = shutil.which("node")
        if node is not None:
            node_bin = Path(node).resolve().parent
            if sdef.needs_node:
                path_dirs.append(node_bin)
            if sdef.needs_node and _outside_system(node_bin.parent):
                read_only.append(node_bin.parent)
    else:
        base = _venv_base_prefix(path)
        if base is not None and _outside_system(base):
            read_only.append(base)
        path_dirs.append(path / "bin")
    return InstalledStack(
        stack=sdef.name,
        version=version,
        path=path,
        entry=path / sdef.entry,
        read_only=tuple(read_only),
        path_dirs=tuple(path_dirs),
    )
