"""Images on the real node: the pod sandbox image made here, and the project's images copied from
podman's store into containerd's (no registry is reachable, none is needed).

containerd's root is kept between runs (`node.containerd_root`), so an image is imported once per
build: `imported.json` beside it maps each reference to the podman image id it was imported from.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import io
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

PAUSE_REF = "localhost/a2rl/pause:1"
K8S_NAMESPACE = "k8s.io"  # containerd's namespace of the CRI plugin
IMAGES_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "images.py"


@functools.cache
def podman_env() -> dict[str, str]:
    """`make images`'s podman environment (its image store): hack/images.py's `podman_env`."""
    spec = importlib.util.spec_from_file_location("a2rl_hack_images", IMAGES_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    env: dict[str, str] = module.podman_env()
    return env


class ImageError(RuntimeError):
    pass


def _blob(tar: tarfile.TarFile, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def pause_archive(binary: Path, out: Path, ref: str = PAUSE_REF) -> Path:
    """An OCI image archive of one layer holding `binary` as `/pause`, its entrypoint, named `ref`
    for containerd's importer (built byte-for-byte the same for the same binary)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        info = tarfile.TarInfo("pause")
        data = binary.read_bytes()
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        t.addfile(info, io.BytesIO(data))
    diff = layer.getvalue()
    compressed = gzip.compress(diff, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(diff).hexdigest()}"]},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        layer_desc = _blob(tar, compressed, "application/vnd.oci.image.layer.v1.tar+gzip")
        config_desc = _blob(tar, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        }
        manifest_desc = _blob(
            tar, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json"
        )
        manifest_desc["annotations"] = {
            "io.containerd.image.name": ref,
            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
        }
        for name, doc in (
            ("oci-layout", {"imageLayoutVersion": "1.0.0"}),
            ("index.json", {"schemaVersion": 2, "manifests": [manifest_desc]}),
        ):
            raw = json.dumps(doc).encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return out


class NodeImages:
    """containerd's image store of the real node, reached with `ctr` on its socket."""

    def __init__(self, socket: Path, root: Path) -> None:
        self.socket = socket
        self.stamps = root.parent / "imported.json"

    def ctr(self, *args: str, stdin: int | None = None, timeout: float = 120) -> str:
        argv = ["ctr", "--address", str(self.socket), "-n", K8S_NAMESPACE, *args]
        proc = subprocess.run(argv, stdin=stdin, capture_output=True, text=True, check=False, timeout=timeout)
        if proc.returncode != 0:
            raise ImageError(f"{' '.join(argv)}: {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def refs(self) -> set[str]:
        return set(self.ctr("images", "ls", "-q").split())

    def _stamps(self) -> dict[str, str]:
        try:
            return dict(json.loads(self.stamps.read_text()))
        except (OSError, ValueError):
            return {}

    def import_archive(self, archive: Path, ref: str, source_id: str) -> bool:
        """Import `archive` unless `ref` is there from the same source; whether it imported."""
        stamps = self._stamps()
        if stamps.get(ref) == source_id and ref in self.refs():
            return False
        with archive.open("rb") as f:
            self.ctr("images", "import", "-", stdin=f.fileno(), timeout=600)
        stamps[ref] = source_id
        self.stamps.write_text(json.dumps(stamps, indent=1))
        return True

    def import_from_podman(self, refs: list[str], log: Callable[[str], None]) -> None:
        """Copy the podman images `refs` into containerd, but those there already from the same podman
        image id: one docker-archive stream of them all (`podman save -m` writes a layer the images
        share once: the ML layers of the grader and agent-baselines images)."""
        stamps = self._stamps()
        present = self.refs()
        ids: dict[str, str] = {}
        for ref in refs:
            proc = subprocess.run(
                ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
                capture_output=True, text=True, env=podman_env(), check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                raise ImageError(f"image {ref} is not built: run `make images` ({proc.stderr.strip()})")
            ids[ref] = proc.stdout.strip()
        todo = [ref for ref in refs if not (stamps.get(ref) == ids[ref] and ref in present)]
        if not todo:
            return
        started = time.monotonic()
        save = subprocess.Popen(
            ["podman", "save", "-m", "--format", "docker-archive", *todo],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=podman_env(),
        )  # fmt: skip
        assert save.stdout is not None
        try:
            self.ctr("images", "import", "-", stdin=save.stdout.fileno(), timeout=1800)
        finally:
            save.stdout.close()
            _, err = save.communicate()
        if save.returncode != 0:
            raise ImageError(f"podman save {' '.join(todo)}: {err.decode(errors='replace').strip()[-2000:]}")
        stamps.update({ref: ids[ref] for ref in todo})
        self.stamps.write_text(json.dumps(stamps, indent=1))
        log(f"[node] imported {', '.join(todo)} into containerd in {time.monotonic() - started:.0f}s")
