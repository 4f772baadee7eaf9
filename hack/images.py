#!/usr/bin/env python3
"""Build every image under images/ with podman, cached by the hashes of their inputs (`make images`).

    python3 hack/images.py [--registry R] [--push] [--only NAME ...] [--no-gpu] [--plan] [--keys]

The plan (`plan()`) is pure: which images, in which order, from which Dockerfile, target and build
arguments, under which tag. Each image's cache key is the SHA-256 of its Dockerfile, of every file
its `COPY` lines send from the build context (the lock among them), of its build arguments, of
.dockerignore, and of the keys of the images it is built on, so a change anywhere below an image
rebuilds it and everything above it, and nothing else. The keys and what each build gave are kept
under <cache>/images/ (A2RL_CACHE_DIR, default ~/.cache/a2rl): a second run with nothing changed
only checks that the images are still in podman's store, in seconds.

Base images: no container registry may be reachable (as on our development machines), so the
bottom of the stack, a Debian bookworm root file system, is made here with mmdebstrap from Debian's
packages and imported into podman (`debian` in the plan); elsewhere `docker build` uses the public
`debian:bookworm-slim` (the Dockerfiles' default DEBIAN). After each build the image's entrypoint
runs (`--help` or `--version`) as user 1000 with a read-only root file system and no network; a
failure there fails the build. Errors are one line (`[images] error: …`), exit status 1.
Standard library only: it runs before .venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REGISTRY = "ghcr.io/a2rl"
#: Bumped when the way images are built changes in a way the hashed inputs do not show.
SCHEME = "1"

#: The project's own Debian root (where no registry can be reached): suite and what it holds.
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_INCLUDE = ("python3", "python3-venv", "ca-certificates", "passwd")
#: The public base of images/base/Dockerfile elsewhere (its default DEBIAN).
PUBLIC_DEBIAN = "docker.io/library/debian:bookworm-slim"
#: What mmdebstrap's customize hook runs in the new root to record the resolved package list.
DPKG_LIST = 'chroot "$1" dpkg-query -W -f="${Package}=${Version}\\n"'
#: Where RUN steps see the host's uv cache (images/runtime/Dockerfile's UV_CACHE_DIR).
UV_CACHE_MOUNT = "/var/cache/a2rl-uv"

#: The agent stacks' entries and version checks (a2rl.stacks.STACKS; tests/unit/test_images.py
#: checks that the two agree).
STACK_CHECKS: dict[str, tuple[str, ...]] = {
    "claude-code": ("node_modules/.bin/claude", "--version"),
    "codex": ("node_modules/.bin/codex", "--version"),
    "gemini-cli": ("node_modules/.bin/gemini", "--version"),
    "opencode": ("node_modules/.bin/opencode", "--version"),
    "openhands": (
        "bin/python",
        "-c",
        "from importlib.metadata import version; import openhands.sdk; print(version('openhands-sdk'))",
    ),
}


class BuildError(Exception):
    """A failure reported as one line."""


@dataclass(frozen=True)
class Image:
    """One image of the plan."""

    name: str  # the repository name under the registry (`operator`, `agent-codex`, …)
    tag: str
    dockerfile: str  # relative to the repository root; "" for the mmdebstrap'd Debian root
    target: str | None = None
    #: Build arguments; a value `@name` stands for the reference of the plan's image `name`.
    args: tuple[tuple[str, str], ...] = ()
    #: How the image's entrypoint is run by the check: (entrypoint override or None, arguments).
    check: tuple[str | None, tuple[str, ...]] = (None, ())
    #: Whether RUN steps get the host's uv cache (--volume) and the CA bundle secret.
    uv_cache: bool = False
    #: Directories the check mounts writable (tmpfs), as the pod's volumes are: an agent's /workspace.
    writable: tuple[str, ...] = ()
    variant: str = ""  # "gpu" for the GPU variants
    local_only: bool = False  # the Debian root: never tagged for a registry or pushed

    @property
    def key_name(self) -> str:
        return f"{self.name}:{self.tag}"

    @property
    def deps(self) -> tuple[str, ...]:
        return tuple(v[1:] for _, v in self.args if v.startswith("@"))

    def ref(self, registry: str = DEFAULT_REGISTRY) -> str:
        if self.local_only:
            return f"localhost/a2rl/{self.name}:{self.tag}"
        return f"{registry.rstrip('/')}/{self.name}:{self.tag}"


@dataclass
class Inputs:
    """What the plan is made from: read once from the checkout."""

    root: Path
    version: str
    node_version: str
    stack_versions: dict[str, str]
    lock_pins: dict[str, str]
    dockerignore: list[str] = field(default_factory=list)


def read_inputs(root: Path = ROOT) -> Inputs:
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    node = _arg_default(root / "images/node/Dockerfile", "NODE_VERSION")
    stacks = {
        p.parent.name.removeprefix("agent-"): _arg_default(p, "VERSION")
        for p in sorted(root.glob("images/agent-*/Dockerfile"))
        if p.parent.name != "agent-baselines"
    }
    return Inputs(
        root=root,
        version=version,
        node_version=node,
        stack_versions=stacks,
        lock_pins=lock_pins((root / "requirements/lock.txt").read_text()),
        dockerignore=dockerignore_patterns(root),
    )


def _arg_default(dockerfile: Path, name: str) -> str:
    found = re.search(rf"^ARG {name}=(\S+)$", dockerfile.read_text(), re.MULTILINE)
    if not found:
        raise BuildError(f"{dockerfile.relative_to(ROOT)} has no `ARG {name}=…`")
    return found.group(1)


def lock_pins(text: str) -> dict[str, str]:
    """`name==version` lines of a uv/pip lock file, names normalised."""
    pins = {}
    for line in text.splitlines():
        found = re.match(r"^([A-Za-z0-9._-]+)(\[[^\]]*\])?==(\S+)", line)
        if found:
            pins[re.sub(r"[-_.]+", "-", found.group(1)).lower()] = found.group(3)
    return pins


def plan(inputs: Inputs, *, gpu: bool = True) -> list[Image]:
    """Every image in build order (each after the images it is built on)."""
    v = inputs.version
    images = [
        Image("debian", f"{DEBIAN_SUITE}", "", check=(None, ("python3", "--version")), local_only=True),
        Image(
            "base",
            v,
            "images/base/Dockerfile",
            args=(("DEBIAN", "@debian"),),
            check=(None, ("python3", "-c", "import ssl, venv, sys; print(sys.version)")),
        ),
        Image(
            "runtime",
            v,
            "images/runtime/Dockerfile",
            target="runtime",
            args=(("BASE", "@base"),),
            check=(None, ("a2rl", "--help")),
            uv_cache=True,
        ),
        Image(
            "operator",
            v,
            "images/operator/Dockerfile",
            args=(("RUNTIME", "@runtime"),),
            check=(None, ("operator", "--help")),
        ),
        Image(
            "recorder",
            v,
            "images/recorder/Dockerfile",
            args=(("RUNTIME", "@runtime"),),
            check=(None, ("recorder", "serve", "--help")),
        ),
        Image(
            "node",
            inputs.node_version,
            "images/node/Dockerfile",
            args=(("BASE", "@base"),),
            check=(None, ("--version",)),
        ),
    ]
    variants = [("", "")]
    if gpu and "vllm" in inputs.lock_pins:
        variants.append(("gpu", "gpu"))
    for variant, extras in variants:
        suffix = f"-{variant}" if variant else ""
        images += [
            Image(
                "ml",
                v + suffix,
                "images/runtime/Dockerfile",
                target="ml",
                args=(("BASE", "@base"), ("EXTRAS", extras)),
                # The GPU variant's check imports vLLM (it imports on CPU; an engine needs a GPU).
                check=(None, ("python", "-c", "import vllm, a2rl_grader; print('vllm', vllm.__version__)"))
                if variant
                else (None, ("a2rl", "eval", "--help")),
                uv_cache=True,
                variant=variant,
            ),
            Image(
                "grader",
                v + suffix,
                "images/grader/Dockerfile",
                args=(("ML", f"@ml:{v}{suffix}"),),
                check=(None, ("a2rl", "report", "--help")),
                variant=variant,
            ),
            Image(
                "agent-baselines",
                v + suffix,
                "images/agent-baselines/Dockerfile",
                args=(("ML", f"@ml:{v}{suffix}"),),
                check=(
                    None,
                    ("python", "-c", "import a2rl_agents.sft_baseline, a2rl_agents.grpo_baseline, torch"),
                ),
                writable=("/workspace",),
                variant=variant,
            ),
        ]
    for stack, version in inputs.stack_versions.items():
        entry, *check = STACK_CHECKS[stack]
        args: tuple[tuple[str, str], ...] = (("BASE", f"@agent-baselines:{v}"),)
        args += (("DEBIAN_BASE", "@base"),) if stack == "openhands" else (("NODE", "@node"),)
        images.append(
            Image(
                f"agent-{stack}",
                version,
                f"images/agent-{stack}/Dockerfile",
                args=args,
                check=(f"/opt/a2rl-cache/agents/{stack}-{version}/{entry}", tuple(check)),
                writable=("/workspace",),
            )
        )
    return _ordered(images)


def _ordered(images: list[Image]) -> list[Image]:
    by_key = {im.key_name: im for im in images}
    names = {im.name: im for im in images if not im.variant}
    resolved: list[Image] = []
    seen: set[str] = set()

    def visit(im: Image, stack: tuple[str, ...] = ()) -> None:
        if im.key_name in seen:
            return
        if im.key_name in stack:
            raise BuildError(f"images depend on each other: {' → '.join((*stack, im.key_name))}")
        for dep in im.deps:
            visit(_lookup(dep, by_key, names), (*stack, im.key_name))
        seen.add(im.key_name)
        resolved.append(im)

    for im in images:
        visit(im)
    return resolved


def _lookup(dep: str, by_key: dict[str, Image], names: dict[str, Image]) -> Image:
    found = by_key.get(dep) or names.get(dep)
    if found is None:
        raise BuildError(f"no image {dep!r} in the plan")
    return found


def resolve_args(im: Image, images: list[Image], registry: str = DEFAULT_REGISTRY) -> list[tuple[str, str]]:
    """The image's build arguments with `@name` replaced by that image's reference."""
    by_key = {i.key_name: i for i in images}
    names = {i.name: i for i in images if not i.variant}
    return [(k, _lookup(v[1:], by_key, names).ref(registry) if v.startswith("@") else v) for k, v in im.args]


# --- cache keys -------------------------------------------------------------------------------


def dockerignore_patterns(root: Path) -> list[str]:
    path = root / ".dockerignore"
    if not path.exists():
        return []
    lines = (ln.strip() for ln in path.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def ignored(rel: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns exclude `rel` (a path relative to the context)."""
    out = False
    for raw in patterns:
        negate = raw.startswith("!")
        pat = raw.removeprefix("!").strip("/")
        plain = pat.removeprefix("**/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(fnmatch.fnmatchcase(p, pat) for p in prefixes)
        if pat.startswith("**/"):
            hit = hit or any(fnmatch.fnmatchcase(part, plain) for part in parts)
        if hit:
            out = not negate
    return out


def copy_sources(dockerfile_text: str) -> list[str]:
    """The build-context paths a Dockerfile's COPY/ADD lines send (not `--from` copies)."""
    text = re.sub(r"\\\n", " ", dockerfile_text)
    sources: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        flags = [w for w in words[1:] if w.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        paths = [w for w in words[1:] if not w.startswith("--")]
        sources += paths[:-1]
    return sources


def context_files(root: Path, sources: list[str], patterns: list[str]) -> list[Path]:
    files: set[Path] = set()
    for src in sources:
        for path in sorted(root.glob(src)) if any(c in src for c in "*?[") else [root / src]:
            if not path.exists():
                raise BuildError(f"COPY source {src} does not exist")
            candidates = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            files.update(p for p in candidates if not ignored(p.relative_to(root).as_posix(), patterns))
    return sorted(files)


def cache_key(im: Image, images: list[Image], inputs: Inputs, dep_keys: dict[str, str]) -> str:
    """SHA-256 of everything that goes into `im` (see the module's docstring)."""
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    add("scheme", SCHEME.encode())
    add("image", json.dumps([im.name, im.tag, im.dockerfile, im.target, im.args, im.uv_cache]).encode())
    if not im.dockerfile:  # the Debian root: what mmdebstrap is asked for
        add("debian", json.dumps([DEBIAN_SUITE, DEBIAN_MIRROR, DEBIAN_INCLUDE]).encode())
        return h.hexdigest()
    text = (inputs.root / im.dockerfile).read_text()
    add("dockerfile", text.encode())
    add(".dockerignore", "\n".join(inputs.dockerignore).encode())
    for path in context_files(inputs.root, copy_sources(text), inputs.dockerignore):
        add(path.relative_to(inputs.root).as_posix(), path.read_bytes())
    by_key = {i.key_name: i for i in images}
    names = {i.name: i for i in images if not i.variant}
    for dep in im.deps:
        add("dep", dep_keys[_lookup(dep, by_key, names).key_name].encode())
    return h.hexdigest()


def all_keys(images: list[Image], inputs: Inputs) -> dict[str, str]:
    keys: dict[str, str] = {}
    for im in images:  # in build order: every dependency's key is known
        keys[im.key_name] = cache_key(im, images, inputs, keys)
    return keys


# --- commands ---------------------------------------------------------------------------------


def build_argv(im: Image, images: list[Image], *, uv_cache: Path, ca_bundle: Path | None) -> list[str]:
    argv = ["podman", "build", "--layers", "-f", im.dockerfile, "-t", im.ref()]
    if im.target:
        argv += ["--target", im.target]
    for k, v in resolve_args(im, images):
        argv += ["--build-arg", f"{k}={v}"]
    if ca_bundle is not None:
        argv += ["--secret", f"id=ca-bundle,src={ca_bundle}"]
    if im.uv_cache:
        argv += ["--build-arg", f"UV_CACHE_DIR={UV_CACHE_MOUNT}", "--volume", f"{uv_cache}:{UV_CACHE_MOUNT}"]
    # No label with the key: a label changes the image id, and so would miss podman's layer cache of
    # every image built on it even when nothing in it changed (the key is in the state file).
    argv.append(".")
    return argv


def check_argv(im: Image, volumes: dict[str, Path] | None = None) -> list[str]:
    """Run the image's entrypoint as the pods do: user 1000, read-only root file system, no network;
    an agent's /workspace is writable (in the pod it is the workspace volume)."""
    entry, args = im.check
    argv = ["podman", "run", "--rm", "--read-only", "--user", "1000:1000", "--network", "none"]
    # A directory of user 1000's, as the pod's volume is (a --tmpfs takes the mode of the image's own
    # root-owned /workspace).
    for path in im.writable:
        argv += ["--volume", f"{(volumes or {})[path]}:{path}"]
    if entry is not None:
        argv += ["--entrypoint", entry]
    return [*argv, im.ref(), *args]


def check_label(im: Image) -> str:
    entry, args = im.check
    words = [Path(entry).name] if entry else []
    return " ".join(w if len(w) < 60 else w[:57] + "…" for w in [*words, *args])


@contextlib.contextmanager
def check_volumes(im: Image, cache: Path) -> Iterator[dict[str, Path]]:
    """An empty directory owned by user 1000 for each of the check's writable paths."""
    made = {}
    try:
        for path in im.writable:
            (cache / "check").mkdir(parents=True, exist_ok=True)
            made[path] = Path(tempfile.mkdtemp(prefix=f"{im.name}-", dir=cache / "check"))
            if os.geteuid() == 0:
                os.chown(made[path], 1000, 1000)
            else:
                made[path].chmod(0o777)
        yield made
    finally:
        for directory in made.values():
            shutil.rmtree(directory, ignore_errors=True)


def push_argv(im: Image, registry: str, digest_file: Path) -> list[str]:
    return ["podman", "push", "--digestfile", str(digest_file), im.ref(registry)]


def buildx_argv(
    im: Image, images: list[Image], *, registry: str, platforms: str, digests: dict[str, str], metadata: Path
) -> list[str]:
    """`docker buildx build` of `im` for publishing (.github/workflows/images.yml): multi-arch, pushed,
    with an SBOM and provenance attestation; public bases (no Debian root of our own), and each image
    it is built on named by the digest just pushed, so a tag moving meanwhile changes nothing."""
    argv = ["docker", "buildx", "build", "--platform", platforms, "-f", im.dockerfile, "-t", im.ref(registry)]
    if im.target:
        argv += ["--target", im.target]
    by_key = {i.key_name: i for i in images}
    names = {i.name: i for i in images if not i.variant}
    for k, value in im.args:
        v = value
        if value.startswith("@"):
            dep = _lookup(value[1:], by_key, names)
            if dep.local_only:
                continue  # the Dockerfile's public default (debian:bookworm-slim)
            v = (
                f"{dep.ref(registry)}@{digests[dep.key_name]}"
                if dep.key_name in digests
                else dep.ref(registry)
            )
        argv += ["--build-arg", f"{k}={v}"]
    return [*argv, "--sbom=true", "--provenance=mode=max", "--push", "--metadata-file", str(metadata), "."]


def publish(images: list[Image], *, registry: str, platforms: str, out: Path) -> None:
    """Build and push every image with docker buildx (CI); digests to <out>/digests.txt."""
    if shutil.which("docker") is None:
        raise BuildError("docker is not installed: --buildx is for CI (.github/workflows/images.yml)")
    out.mkdir(parents=True, exist_ok=True)
    digests: dict[str, str] = {}
    lines = []
    for im in images:
        if im.local_only:
            continue
        metadata = out / f"{im.name}_{im.tag}.json"
        say(f"{im.ref(registry)}: docker buildx build --platform {platforms}")
        argv = buildx_argv(
            im, images, registry=registry, platforms=platforms, digests=digests, metadata=metadata
        )
        if subprocess.run(argv, cwd=ROOT, check=False).returncode != 0:
            raise BuildError(f"{im.ref(registry)}: docker buildx build failed")
        digests[im.key_name] = json.loads(metadata.read_text())["containerimage.digest"]
        lines.append(f"{im.ref(registry)}@{digests[im.key_name]}")
        say(lines[-1])
    (out / "digests.txt").write_text("\n".join(lines) + "\n")


# --- running ----------------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("A2RL_CACHE_DIR") or Path.home() / ".cache/a2rl") / "images"


def podman_env() -> dict[str, str]:
    """The environment of every podman call: its image store under `<cache>/images/storage` (with
    the other cached builds, so a machine that keeps `~/.cache/a2rl` keeps its images), unless
    CONTAINERS_STORAGE_CONF names another. The real node's import (tests/testenv/node_images.py)
    reads the images from there through this function."""
    env = dict(os.environ)
    if not env.get("CONTAINERS_STORAGE_CONF"):
        store = cache_dir() / "storage"
        conf = cache_dir() / "storage.conf"
        text = (
            "# Written by a2rl hack/images.py: the images' own store, kept with the other cached builds.\n"
            f'[storage]\ndriver = "overlay"\ngraphroot = "{store}"\nrunroot = "/run/a2rl-containers"\n'
        )
        if not conf.exists() or conf.read_text() != text:
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(text)
        env["CONTAINERS_STORAGE_CONF"] = str(conf)
    return env


def say(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def run_logged(argv: list[str], log: Path, what: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=podman_env(), check=False
        )
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}): {last_error(log)}; log: {log}")


def last_error(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    # podman's own summary repeats the step; the tool's message above it says why.
    lines = [ln for ln in lines if not ln.startswith(("$ ", "Error: building at STEP", "STEP ", "[", "-->"))]
    errors = [
        ln
        for ln in lines
        if re.search(r"error|failed|not found|denied|read-only file system|no such file", ln, re.IGNORECASE)
    ]
    line = (errors or lines or ["no output"])[-1]
    return line if len(line) <= 300 else line[:297] + "…"


def podman(*args: str) -> str:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(), check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def image_size(ref: str) -> int:
    out = podman("image", "inspect", "--format", "{{.Size}}", ref)
    return int(out) if out.isdigit() else 0


def make_debian(im: Image, key: str, cache: Path, log: Path) -> None:
    """The Debian root with mmdebstrap, imported as `im`; its package list kept beside it."""
    if shutil.which("mmdebstrap") is None:
        raise BuildError("mmdebstrap is not installed: run hack/image-deps (or apt-get install mmdebstrap)")
    out = cache / "debian" / f"{DEBIAN_SUITE}-{key[:16]}"
    out.mkdir(parents=True, exist_ok=True)
    tar = out / "rootfs.tar"
    if not tar.exists():
        partial = out / "rootfs.tar.partial"
        run_logged(
            [
                "mmdebstrap",
                "--variant=minbase",
                f"--include={','.join(DEBIAN_INCLUDE)}",
                "--format=tar",
                # The resolved package list: snapshot.debian.org may be unreachable, so the suite is
                # pinned and what it gave is recorded.
                "--customize-hook=" + DPKG_LIST + f" > {out}/packages.txt",
                DEBIAN_SUITE,
                str(partial),
                DEBIAN_MIRROR,
            ],
            log,
            "mmdebstrap",
        )
        partial.rename(tar)
    run_logged(
        [
            "podman",
            "import",
            "--change",
            'CMD ["/bin/bash"]',
            "--message",
            f"a2rl debian {key}",
            str(tar),
            im.ref(),
        ],
        log,
        "podman import",
    )


def human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "kB", "MB") else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"


def duration(s: float) -> str:
    return f"{int(s // 60)} min {int(s % 60)} s" if s >= 60 else f"{s:.1f} s"


def select(images: list[Image], only: list[str]) -> list[Image]:
    """`only`'s images and everything they are built on, in build order."""
    if not only:
        return images
    by_key = {im.key_name: im for im in images}
    names = {im.name: im for im in images if not im.variant}
    wanted: set[str] = set()

    def add(im: Image) -> None:
        if im.key_name not in wanted:
            wanted.add(im.key_name)
            for dep in im.deps:
                add(_lookup(dep, by_key, names))

    for name in only:
        matches = [im for im in images if name in (im.name, im.key_name)]
        if not matches:
            raise BuildError(f"no image {name!r} (known: {', '.join(sorted({im.name for im in images}))})")
        for im in matches:
            add(im)
    return [im for im in images if im.key_name in wanted]


def build_all(images: list[Image], inputs: Inputs, *, registry: str, push: bool) -> None:
    if shutil.which("podman") is None:
        raise BuildError(
            "podman is not installed: run hack/image-deps (apt-get install podman buildah mmdebstrap)"
        )
    cache = cache_dir()
    state_dir, logs = cache / "state", cache / "logs"
    state_dir.mkdir(parents=True, exist_ok=True)
    uv_cache = Path(os.environ.get("A2RL_CACHE_DIR") or Path.home() / ".cache/a2rl") / "uv"
    uv_cache.mkdir(parents=True, exist_ok=True)
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    ca_bundle = bundle if bundle.exists() else None
    keys = all_keys(images, inputs)
    total = time.monotonic()
    built = 0
    for i, im in enumerate(images, 1):
        key = keys[im.key_name]
        state_file = state_dir / f"{im.name}_{im.tag}.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        ref = im.ref()
        head = f"{i}/{len(images)} {ref}"
        image_id = podman("image", "inspect", "--format", "{{.Id}}", ref)
        if (
            state.get("key") == key
            and image_id
            and state.get("image_id") == image_id
            and state.get("checked")
        ):
            say(f"{head}: up to date ({key[:12]}, {human(state.get('size', 0))})")
        else:
            log = logs / f"{im.name}_{im.tag}.log"
            log.unlink(missing_ok=True)
            say(f"{head}: building ({key[:12]}; log {log})")
            start = time.monotonic()
            if im.dockerfile:
                run_logged(
                    build_argv(im, images, uv_cache=uv_cache, ca_bundle=ca_bundle),
                    log,
                    f"{ref}: podman build",
                )
            else:
                make_debian(im, key, cache, log)
            seconds = time.monotonic() - start
            with check_volumes(im, cache) as volumes:
                check = check_argv(im, volumes)
                run_logged(check, log, f"{ref}: the entrypoint check ({' '.join(check[2:])})")
            image_id = podman("image", "inspect", "--format", "{{.Id}}", ref)
            size = image_size(ref)
            state = {
                "key": key,
                "image_id": image_id,
                "ref": ref,
                "seconds": round(seconds, 1),
                "size": size,
                "checked": True,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            state_file.write_text(json.dumps(state, indent=2) + "\n")
            built += 1
            say(
                f"{head}: built in {duration(seconds)}, {human(size)}; as uid 1000, read-only: "
                f"`{check_label(im)}` ok"
            )
        if registry != DEFAULT_REGISTRY and not im.local_only:
            run_logged(
                ["podman", "tag", ref, im.ref(registry)], logs / "push.log", f"podman tag {im.ref(registry)}"
            )
        if push and not im.local_only:
            digest = state_dir / f"{im.name}_{im.tag}.digest"
            run_logged(push_argv(im, registry, digest), logs / "push.log", f"podman push {im.ref(registry)}")
            say(f"{head}: pushed {im.ref(registry)}@{digest.read_text().strip()}")
    say(f"{len(images)} images, {built} built, in {duration(time.monotonic() - total)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/images.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", default=os.environ.get("REGISTRY") or DEFAULT_REGISTRY)
    parser.add_argument("--push", action="store_true", default=os.environ.get("PUSH", "") not in ("", "0"))
    parser.add_argument("--only", nargs="*", default=(os.environ.get("IMAGES") or "").split())
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU variants")
    parser.add_argument("--plan", action="store_true", help="print the plan (refs, keys) and stop")
    parser.add_argument(
        "--buildx", metavar="OUT", help="CI: build and push with docker buildx (public bases)"
    )
    parser.add_argument("--platforms", default="linux/amd64,linux/arm64", help="with --buildx")
    args = parser.parse_args(argv)
    try:
        if args.push and args.registry == DEFAULT_REGISTRY and not os.environ.get("REGISTRY"):
            raise BuildError(
                "PUSH=1 needs REGISTRY=<registry/prefix> (e.g. REGISTRY=registry.example:5000/a2rl)"
            )
        inputs = read_inputs()
        full = plan(inputs, gpu=not args.no_gpu)
        if not args.no_gpu and "vllm" not in inputs.lock_pins:
            say("GPU variants skipped: requirements/lock.txt pins no vllm (pyproject's `gpu` extra)")
        images = select(full, args.only)
        if args.plan:
            keys = all_keys(full, inputs)
            for im in images:
                print(
                    f"{im.ref(args.registry)}\t{keys[im.key_name][:16]}\t{im.dockerfile or 'mmdebstrap'}"
                    f"{' --target ' + im.target if im.target else ''}"
                )
            return 0
        if args.buildx:
            publish(images, registry=args.registry, platforms=args.platforms, out=Path(args.buildx))
            return 0
        build_all(images, inputs, registry=args.registry, push=args.push)
    except BuildError as e:
        say(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        say("error: interrupted")
        return 130
    except OSError as e:
        say(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
