#!/usr/bin/env python3
"""Snapshot costs against a real MinIO: re-snapshot of an unchanged workspace, and a ~500 MB model
snapshot compared with a plain `minio` client upload of the same files in the same run.

    eval "$(hack/testenv env)"            # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
    .venv/bin/python bench/snapshot.py --model-mb 500

Without those variables the script starts a throw-away MinIO from the testenv binary (built by
`hack/testenv build`) on a loopback port. It prints figures; it asserts nothing.

What is measured (each the median of `--repeat` runs, files in the page cache for every contender):
- `fput`: `Minio.fput_object` of every model file, one after the other, into a fresh prefix —
  what a user would write without a2rl.
- `snapshot (cold)`: `a2rl.store.cas.snapshot_tree` of the model directory into a fresh run
  prefix (hash every file, upload each blob once, verify the bytes while uploading).
- `re-snapshot`: the same tree again — unchanged, so nothing is uploaded; with the in-process
  cache of known blobs (the recorder's case) and without it (a fresh process: one HEAD per blob).
  With the digest cache as well (the recorder keeps one per run), unchanged files are not even
  read again: only their stat is compared.
- `workspace re-snapshot`: the recorder's `CodeSnapshotter` on an unchanged `code/` (many small
  files) and a whole workspace (code + model) snapshot repeated, both with the digest cache.
- `new run from store:<name>`: the cluster set-up container's snapshot of a base model pushed to
  the model library (`a2rl models push`) into a fresh run: blobs copied inside the store
  (CopyObject), nothing uploaded from the pod.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from a2rl_recorder.snapshots import CodeSnapshotter  # noqa: E402

from a2rl.store.cas import DigestCache, SnapshotStats, forget_known_blobs, snapshot_tree  # noqa: E402
from a2rl.store.layout import RunLayout  # noqa: E402
from a2rl.store.open import parse_endpoint  # noqa: E402
from a2rl.store.s3 import S3Store  # noqa: E402

MB = 1 << 20
T = TypeVar("T")
BUCKET = "a2rl-bench"


@contextmanager
def minio_endpoint() -> Iterator[tuple[str, str, str]]:
    """(endpoint, access key, secret key) from the environment, else a throw-away MinIO."""
    env = os.environ
    if env.get("AWS_ENDPOINT_URL") and env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        yield env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        return
    from tests.testenv import build
    from tests.testenv.controlplane import MinioServer

    binary = build.binary_paths()["minio"]
    if not binary.exists():
        sys.exit("snapshot: no AWS_* variables and no MinIO binary: run `hack/testenv build` first")
    with tempfile.TemporaryDirectory(prefix="a2rl-bench-minio-") as tmp:
        server = MinioServer(state_dir=Path(tmp), binary=binary)
        server.start()
        try:
            yield server.endpoint, server.access_key, server.secret_key
        finally:
            server.stop()


def make_model(root: Path, total_mb: int) -> Path:
    """A Hugging Face-shaped directory: two safetensors shards (random, incompressible) + small files."""
    root.mkdir(parents=True, exist_ok=True)
    shard = total_mb * MB // 2
    for i in (1, 2):
        with (root / f"model-0000{i}-of-00002.safetensors").open("wb") as f:
            left = shard
            while left:
                n = min(left, 16 * MB)
                f.write(os.urandom(n))
                left -= n
    (root / "model.safetensors.index.json").write_text('{"weight_map": {}}\n')
    (root / "config.json").write_text('{"model_type": "llama", "hidden_size": 896}\n')
    (root / "generation_config.json").write_text('{"do_sample": false}\n')
    (root / "tokenizer.json").write_bytes(os.urandom(7 * MB))
    (root / "tokenizer_config.json").write_text('{"model_max_length": 4096}\n')
    return root


def make_code(root: Path, files: int) -> Path:
    for i in range(files):
        path = root / f"pkg{i % 10}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# module {i}\n" + "x = 1\n" * (200 + i))
    return root


def warm(root: Path) -> int:
    total = 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                while chunk := f.read(16 * MB):
                    total += len(chunk)
    return total


def median_time(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    times: list[float] = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        last = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), last


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-mb", type=int, default=500, help="model directory size in MiB (default 500)")
    parser.add_argument("--code-files", type=int, default=300, help="files in the workspace's code/")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="a2rl-bench-snap-") as tmp, minio_endpoint() as (ep, ak, sk):
        host, secure = parse_endpoint(ep)
        ws = Path(tmp) / "ws"
        model = make_model(ws / "output" / "v1", args.model_mb)
        code = make_code(ws / "code", args.code_files)
        model_bytes = warm(model)
        code_bytes = warm(code)
        files = sorted(p for p in model.rglob("*") if p.is_file())
        print(f"endpoint {ep}; model {model_bytes / MB:.0f} MiB in {len(files)} files; code/ "
              f"{code_bytes / MB:.1f} MiB in {args.code_files} files; median of {args.repeat}")  # fmt: skip

        def fresh_store() -> tuple[S3Store, RunLayout]:
            store = S3Store(host, ak, sk, BUCKET, f"bench/{uuid.uuid4().hex[:10]}", secure=secure)
            return store, RunLayout("bench", "snap", uuid.uuid4().hex[:12])

        # 1. plain minio client, file by file
        def fput() -> None:
            store, _ = fresh_store()
            prefix = f"{store.prefix}/plain"
            for path in files:
                store.client.fput_object(BUCKET, f"{prefix}/{path.relative_to(model).as_posix()}", str(path))

        t_fput, _ = median_time(fput, args.repeat)

        # 2. a2rl snapshot into a fresh run (every blob uploaded)
        def cold() -> SnapshotStats:
            forget_known_blobs()
            store, layout = fresh_store()
            return snapshot_tree(store, layout, model)[1]

        t_cold, cold_stats = median_time(cold, args.repeat)

        # 3. re-snapshot of the unchanged model, with and without the known-blob cache
        store, layout = fresh_store()
        forget_known_blobs()
        snapshot_tree(store, layout, model)
        known: set[str] = set()
        snapshot_tree(store, layout, model, known=known)
        t_again, again = median_time(lambda: snapshot_tree(store, layout, model, known=known)[1], args.repeat)

        def again_new_process() -> SnapshotStats:
            forget_known_blobs()
            return snapshot_tree(store, layout, model)[1]

        t_again_heads, again_heads = median_time(again_new_process, args.repeat)
        digests = DigestCache()
        snapshot_tree(store, layout, model, known=known, digests=digests)
        t_cached, cached = median_time(
            lambda: snapshot_tree(store, layout, model, known=known, digests=digests)[1], args.repeat
        )

        # 4. the recorder's code snapshotter on an unchanged code/, and a whole workspace
        snapper = CodeSnapshotter(store, layout, code, max_file_bytes=100 * MB, known=known)
        snapper.snapshot("change")
        t_code, _ = median_time(lambda: snapper.snapshot("change"), args.repeat)
        revisions = len(list(store.list(layout.revisions)))
        ws_digests = DigestCache()
        snapshot_tree(store, layout, ws, known=known, digests=ws_digests)
        t_ws, ws_stats = median_time(
            lambda: snapshot_tree(store, layout, ws, known=known, digests=ws_digests)[1], args.repeat
        )

        # 5. a fresh run whose base model was pushed to the store's model library
        from a2rl.models.library import ModelLayout

        lib_store, _ = fresh_store()
        library = ModelLayout("bench-model")
        snapshot_tree(lib_store, library, model)

        def from_library() -> SnapshotStats:
            forget_known_blobs()
            return snapshot_tree(lib_store, fresh_store()[1], model, copy_from=(library,))[1]

        t_lib, lib_stats = median_time(from_library, args.repeat)

        mbps = lambda seconds: model_bytes / MB / seconds  # noqa: E731
        print()
        print(f"{'measurement':44} {'seconds':>8} {'MiB/s':>8} {'uploaded':>12}")
        print(f"{'minio fput_object, file by file':44} {t_fput:8.2f} {mbps(t_fput):8.0f} {model_bytes:12d}")
        print(f"{'a2rl snapshot, cold (hash + upload + verify)':44} {t_cold:8.2f} {mbps(t_cold):8.0f} "
              f"{cold_stats.bytes_uploaded:12d}")  # fmt: skip
        print(f"{'a2rl re-snapshot, unchanged (known blobs)':44} {t_again:8.2f} {mbps(t_again):8.0f} "
              f"{again.bytes_uploaded:12d}")  # fmt: skip
        print(f"{'a2rl re-snapshot, unchanged (HEAD per blob)':44} {t_again_heads:8.2f} "
              f"{mbps(t_again_heads):8.0f} {again_heads.bytes_uploaded:12d}")  # fmt: skip
        print(f"{'a2rl re-snapshot, unchanged (+ digest cache)':44} {t_cached:8.3f} "
              f"{mbps(t_cached):8.0f} {cached.bytes_uploaded:12d}")  # fmt: skip
        print(f"{'code/ re-snapshot, unchanged (' + str(args.code_files) + ' files)':44} {t_code:8.3f} "
              f"{'':>8} {0:12d}")  # fmt: skip
        print(f"{'workspace re-snapshot, unchanged (code+model)':44} {t_ws:8.2f} {'':>8} "
              f"{ws_stats.bytes_uploaded:12d}")  # fmt: skip
        print(f"{'new run from store:<name> (copied in store)':44} {t_lib:8.2f} {mbps(t_lib):8.0f} "
              f"{lib_stats.bytes_uploaded:12d}  copied {lib_stats.bytes_copied}")  # fmt: skip
        print()
        print(f"ratio snapshot(cold) / fput = {t_cold / t_fput:.2f}")
        print(f"unchanged code/ re-snapshots wrote {revisions - 1} new revision(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
