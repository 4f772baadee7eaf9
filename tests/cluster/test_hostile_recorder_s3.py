"""The symlink attacks of tests/unit/test_hostile_recorder.py through the cluster recorder's store
path: an `S3Store` (a real MinIO) wrapped in a `SpoolingStore`, as the sidecar runs it."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from a2rl_recorder.service import Recorder
from a2rl_recorder.spool import SpoolingStore

from a2rl.store.cas import forget_known_blobs
from tests.support.recorder_support import (
    LAYOUT,
    StoreBackedDispatcher,
    make_config,
    make_model,
    make_workspace,
    submission_keys,
)

SECRET = b"HELDOUT-GOLD-" + os.urandom(8).hex().encode()


@pytest.mark.minio
def test_symlink_swaps_never_put_an_outside_byte_into_s3(minio: object, tmp_path: Path) -> None:
    from a2rl.store.open import parse_endpoint
    from a2rl.store.s3 import S3Store

    forget_known_blobs()
    host, secure = parse_endpoint(minio.endpoint)  # type: ignore[attr-defined]
    inner = S3Store(host, minio.access_key, minio.secret_key, "a2rl-hostile", f"t/{uuid.uuid4().hex}",  # type: ignore[attr-defined]
                    secure=secure)  # fmt: skip
    store = SpoolingStore(inner, tmp_path / "spool")
    ws = make_workspace(tmp_path)
    recorder = Recorder(make_config(ws), store, StoreBackedDispatcher(store))
    secret = tmp_path / "heldout"
    secret.mkdir()
    (secret / "heldout.jsonl").write_bytes(SECRET * 64)
    make_model(secret / "model")

    # code/ and a model directory that are links: refused outright.
    (ws / "code").rmdir()
    (ws / "code").symlink_to(secret)
    (ws / "output" / "linked").symlink_to(secret / "model")
    status, reply = recorder.submit({"model_path": "output/linked"})
    assert status == 400 and "output/linked is a symlink" in reply["error"]  # type: ignore[call-overload]
    assert recorder.code.snapshot("change") is None

    # A subdirectory swapped for a link while submits run.
    model = make_model(ws / "output" / "v1")
    (model / "shards").mkdir()
    for i in range(20):
        (model / "shards" / f"s{i:02d}.bin").write_bytes(os.urandom(2048))
    (ws / "output" / ".dirlink").symlink_to(secret)
    stop = threading.Event()

    def swapper() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            os.rename(model / "shards", ws / "output" / ".real")
            os.rename(ws / "output" / ".dirlink", model / "shards")
            time.sleep(0.001 * (n % 3))
            os.rename(model / "shards", ws / "output" / ".dirlink")
            os.rename(ws / "output" / ".real", model / "shards")
            time.sleep(0.001 * (n % 5))

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    statuses: list[int] = []
    t_end = time.monotonic() + 4.0
    try:
        while len(statuses) < 30 and time.monotonic() < t_end:
            status, reply = recorder.submit({"model_path": "output/v1"})
            assert status in (200, 400, 409), reply
            statuses.append(status)
    finally:
        stop.set()
        thread.join()
    # The swapper may win every race on a loaded machine; once it stops (each of its rounds ends
    # with the real directory back), the same submit goes through, so uploads are exercised too.
    status, reply = recorder.submit({"model_path": "output/v1"})
    assert status == 200, reply
    statuses.append(status)
    assert store.close(5)
    keys = list(inner.list(""))
    manifests = [k for k in submission_keys(store) if k.endswith("/manifest.json")]
    assert len(manifests) == statuses.count(200)  # refused submits recorded nothing
    assert [k for k in keys if k.startswith(LAYOUT.blobs)]
    assert not [k for k in keys if SECRET in inner.get_bytes(k)]
