"""Build the pinned test-environment binaries from source with the Go toolchain.

Stdlib only: used by `hack/testenv build` and by the pytest fixtures on a cold machine.
Each component lives in a wrapper Go module under `hack/testenv.d/<module>/` whose go.mod and
go.sum pin it; binaries land in `<cache>/testenv/<versions-key>/bin` with one stamp per binary.

Tools the tests use beside the control plane (helm, for the chart tests; kstatus and kubectl, for
the GitOps status tests) are built the same way
into a folder of their own, `<cache>/tools/<name>-<version>_<module digest>/bin`: adding or
re-pinning a tool never changes the control plane's versions key (a rebuild of that costs ~17 min).
Kueue, for the `kueue` tests, is one of them, with its module's CRDs and webhook manifests copied
beside its `bin/` (`Component.module_dirs`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULES_DIR = REPO_ROOT / "hack" / "testenv.d"

K8S_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.8"
KWOK_VERSION = "v0.8.0"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"

_K8S_LDFLAGS = " ".join(
    [
        f"-X k8s.io/component-base/version.gitVersion={K8S_VERSION}",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=" + K8S_VERSION.split(".")[1],
        "-X k8s.io/component-base/version.gitTreeState=clean",
        f"-X k8s.io/client-go/pkg/version.gitVersion={K8S_VERSION}",
        "-X k8s.io/client-go/pkg/version.gitMajor=1",
        "-X k8s.io/client-go/pkg/version.gitMinor=" + K8S_VERSION.split(".")[1],
    ]
)


@dataclass(frozen=True)
class Component:
    name: str  # binary name
    module: str  # wrapper module folder under hack/testenv.d
    package: str  # Go main package
    version: str
    ldflags: str = ""
    #: Folders of the package's Go module copied beside `bin/` (`module_files_dir`) after the build:
    #: manifests that must match the binary's version (Kueue's CRDs and webhooks).
    module_dirs: tuple[str, ...] = ()


COMPONENTS: tuple[Component, ...] = (
    Component("etcd", "etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION),
    Component("kube-apiserver", "k8s", "k8s.io/kubernetes/cmd/kube-apiserver", K8S_VERSION, _K8S_LDFLAGS),
    Component(
        "kube-controller-manager",
        "k8s",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        K8S_VERSION,
        _K8S_LDFLAGS,
    ),
    Component("kube-scheduler", "k8s", "k8s.io/kubernetes/cmd/kube-scheduler", K8S_VERSION, _K8S_LDFLAGS),
    Component("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION),
    Component("minio", "minio", "github.com/minio/minio", MINIO_VERSION),
)
NAMES = tuple(c.name for c in COMPONENTS)

HELM_VERSION = "v3.22.0"
# helm's own release build sets the default Kubernetes version of `helm template`/`helm lint`
# (Capabilities.KubeVersion) from its client-go (v0.37 -> 1.37); a plain `go build` leaves it at
# 1.20, which fails the chart's `kubeVersion`. `helm install` asks the API server instead.
_HELM_KUBE_MAJOR, _HELM_KUBE_MINOR = "1", "37"
_HELM_LDFLAGS = " ".join(
    [
        f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        *(
            f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
            for pkg in ("chartutil", "lint/rules")
            for part, value in (("Major", _HELM_KUBE_MAJOR), ("Minor", _HELM_KUBE_MINOR))
        ),
    ]
)
#: sigs.k8s.io/cli-utils, whose kstatus (`status.Compute`) the GitOps status tests ask; the tool
#: is the wrapper module's own main package (hack/testenv.d/kstatus/main.go).
CLI_UTILS_VERSION = "v0.37.2"
#: Kueue, the job queueing system the `kueue` tests run beside the control plane (a process
#: against the API server: tests/testenv/kueue.py), with its CRDs and webhook manifests.
KUEUE_VERSION = "v0.17.1"
KUEUE = Component(
    "kueue",
    "kueue",
    "sigs.k8s.io/kueue/cmd/kueue",
    KUEUE_VERSION,
    f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE_VERSION}",
    module_dirs=("config/components/crd/bases", "config/components/webhook"),
)
#: Built into `tool_dir(tool)`, not into `bin_dir()`: not part of the versions key.
TOOLS: tuple[Component, ...] = (
    KUEUE,
    Component("helm", "helm", "helm.sh/helm/v3/cmd/helm", HELM_VERSION, _HELM_LDFLAGS),
    Component("kstatus", "kstatus", "a2rl.dev/testenv/kstatus", CLI_UTILS_VERSION),
    # kubectl at the control plane's version, from a wrapper module of its own (hack/testenv.d/kubectl:
    # ../k8s's pins plus kubectl's own dependencies), so the control plane's versions key stays.
    Component("kubectl", "kubectl", "k8s.io/kubernetes/cmd/kubectl", K8S_VERSION, _K8S_LDFLAGS),
    # The real node (tests/testenv/node.py): kubelet and kube-proxy at the control plane's version from
    # a wrapper module of their own (../k8s's pins plus theirs), and the pod sandbox ("pause") program.
    Component("kubelet", "node", "k8s.io/kubernetes/cmd/kubelet", K8S_VERSION, _K8S_LDFLAGS),
    Component("kube-proxy", "node", "k8s.io/kubernetes/cmd/kube-proxy", K8S_VERSION, _K8S_LDFLAGS),
    Component("pause", "pause", "a2rl.dev/testenv/pause", "1"),
)
# Binaries that may come from an envtest install (KUBEBUILDER_ASSETS).
ENVTEST_NAMES = ("etcd", "kube-apiserver")


class BuildError(RuntimeError):
    pass


def cache_base() -> Path:
    return Path(os.environ.get("A2RL_CACHE_DIR") or Path.home() / ".cache" / "a2rl")


def go_binary() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists():
        raise BuildError("the Go toolchain is needed to build the test environment: no `go` on PATH")
    return found


def versions_key() -> str:
    """Readable pins plus a digest of the wrapper modules, so any pin change rebuilds."""
    digest = hashlib.sha256()
    for comp_dir in sorted({c.module for c in COMPONENTS}):
        for fname in ("go.mod", "go.sum"):
            digest.update((MODULES_DIR / comp_dir / fname).read_bytes())
    short = MINIO_VERSION.rsplit("-", 2)[1][:8]
    return f"k8s-{K8S_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}_minio-{short}_{digest.hexdigest()[:8]}"


def bin_dir() -> Path:
    return cache_base() / "testenv" / versions_key() / "bin"


def tool_dir(tool: Component) -> Path:
    """`<cache>/tools/<name>-<version>_<digest of its wrapper module>/bin` (go.mod, go.sum and the
    module's own Go sources, where it has any: a tool of ours, like kstatus)."""
    digest = hashlib.sha256()
    module = MODULES_DIR / tool.module
    for path in [module / "go.mod", module / "go.sum", *sorted(module.glob("*.go"))]:
        digest.update(path.read_bytes())
    return cache_base() / "tools" / f"{tool.name}-{tool.version}_{digest.hexdigest()[:8]}" / "bin"


def _out_dir(comp: Component) -> Path:
    return tool_dir(comp) if comp in TOOLS else bin_dir()


def module_files_dir(comp: Component) -> Path:
    """Where `comp.module_dirs` are copied to (each under its path in the module)."""
    return _out_dir(comp).parent


def _copy_module_dirs(comp: Component) -> None:
    proc = subprocess.run(
        [go_binary(), "list", "-f", "{{.Module.Dir}}", comp.package],
        cwd=MODULES_DIR / comp.module, env=go_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise BuildError(f"locating the module of {comp.package} failed:\n{proc.stderr[-2000:]}")
    source = Path(proc.stdout.strip())
    for folder in comp.module_dirs:
        dest = module_files_dir(comp) / folder
        shutil.rmtree(dest, ignore_errors=True)
        # copyfile, not copy2: the module cache's files are read-only.
        shutil.copytree(source / folder, dest, copy_function=shutil.copyfile)


def go_env() -> dict[str, str]:
    base = cache_base() / "go"
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(base / "mod"),
        GOCACHE=str(base / "build"),
        GOFLAGS="-trimpath -mod=readonly",
        CGO_ENABLED="0",
        GOTOOLCHAIN="local",
    )
    return env


def _stamp(comp: Component) -> Path:
    return _out_dir(comp) / f".{comp.name}.stamp"


def is_built(comp: Component) -> bool:
    stamp = _stamp(comp)
    return (
        stamp.exists()
        and (_out_dir(comp) / comp.name).exists()
        and stamp.read_text().strip() == comp.version
        and all((module_files_dir(comp) / d).is_dir() for d in comp.module_dirs)
    )


def _envtest_dir() -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and all((Path(assets) / n).is_file() for n in ENVTEST_NAMES):
        return Path(assets)
    return None


def binary_paths() -> dict[str, Path]:
    """Where each binary is taken from: KUBEBUILDER_ASSETS for etcd/apiserver when usable."""
    paths = {n: bin_dir() / n for n in NAMES}
    envtest = _envtest_dir()
    if envtest:
        paths.update({n: envtest / n for n in ENVTEST_NAMES})
    return paths


def missing() -> list[Component]:
    from_envtest = set(ENVTEST_NAMES) if _envtest_dir() else set()
    return [c for c in COMPONENTS if c.name not in from_envtest and not is_built(c)]


def build_one(comp: Component, log: Callable[[str], None]) -> float:
    out = _out_dir(comp)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{comp.name}.tmp"
    cmd = [go_binary(), "build", "-o", str(tmp), "-ldflags", f"-s -w {comp.ldflags}".strip(), comp.package]
    start = time.monotonic()
    log(f"[testenv] building {comp.name} {comp.version} ...")
    proc = subprocess.run(
        cmd, cwd=MODULES_DIR / comp.module, env=go_env(), capture_output=True, text=True, check=False
    )
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise BuildError(f"building {comp.name} failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    if comp.module_dirs:
        _copy_module_dirs(comp)
    tmp.replace(out / comp.name)
    _stamp(comp).write_text(comp.version + "\n")
    size_mb = (out / comp.name).stat().st_size / 2**20
    log(f"[testenv] built {comp.name} in {elapsed:.1f}s ({size_mb:.0f} MiB)")
    return elapsed


def ensure_built(log: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Build whatever is missing (sequentially: go build already uses every core) and return paths."""
    emit = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    todo = missing()
    if todo:
        total = time.monotonic()
        for comp in todo:
            build_one(comp, emit)
        emit(f"[testenv] all binaries built in {time.monotonic() - total:.1f}s into {bin_dir()}")
    return binary_paths()


def ensure_tools(
    log: Callable[[str], None] | None = None, names: Collection[str] | None = None
) -> dict[str, Path]:
    """Build the missing tools (helm, kstatus, kubectl; only `names` where given) into their own folders and
    return their paths."""
    emit = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    tools = [t for t in TOOLS if names is None or t.name in names]
    for tool in tools:
        if not is_built(tool):
            build_one(tool, emit)
    return {t.name: tool_dir(t) / t.name for t in tools}
