"""An evaluation with an S3 store (a real MinIO on the host's loopback) uses it from inside its box
through the egress proxy — and reaches nothing else of MinIO's, nor of the host's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.sandbox import submission_box

from a2rl.eval_sandbox import find_bwrap
from a2rl.store.open import open_store

pytestmark = [
    pytest.mark.minio,
    pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap cannot create namespaces here"),
]

_IN_THE_BOX = r"""
import hashlib, json, os, pathlib, sys, urllib.request
from a2rl.store.open import open_store
store = open_store(sys.argv[1])
out = {"client": type(store.client._http).__name__}
big = os.urandom(12 << 20)  # over minio's 5 MiB part: a multipart upload
store.put_bytes("probe/small.txt", b"written in the box")
store.put_bytes("probe/big.bin", big)
out["small"] = store.get_bytes("probe/small.txt").decode()
out["big"] = hashlib.sha256(store.get_bytes("probe/big.bin")).hexdigest() == hashlib.sha256(big).hexdigest()
store.get_file("probe/small.txt", pathlib.Path(os.environ["TMPDIR"]) / "copy.txt")
out["file"] = (pathlib.Path(os.environ["TMPDIR"]) / "copy.txt").read_text()
out["keys"] = sorted(store.list("probe"))
out["exists"] = [store.exists("probe/small.txt"), store.exists("probe/none")]
store.copy("probe/small.txt", "probe/copied.txt")
def attempt(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
out["console"] = attempt(f"http://127.0.0.1:{sys.argv[2]}/")
renamed = os.environ["AWS_ENDPOINT_URL"].replace("127.0.0.1", "localhost")
out["other_name"] = attempt(f"{renamed}/minio/health/live")
print(json.dumps(out))
"""


def test_an_evaluation_uses_its_s3_store_through_the_proxy_and_reaches_nothing_else(
    minio: Any, tmp_path: Path
) -> None:
    uri = f"s3://a2rl-egress/{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": minio.endpoint,
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
    }
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    box = submission_box(1, task="arith", store_uri=uri, run_prefix="local/x-0123", heldout=heldout, env=env)
    with box:
        described = box.describe()
        done = subprocess.run(
            [*box.prefix, sys.executable, "-c", _IN_THE_BOX, uri, str(minio.console_port)],
            env={**env, **box.env},
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert f"network: only 127.0.0.1:{minio.port} (through a proxy)" in described
    assert seen["client"] == "ProxyManager"
    assert seen["small"] == seen["file"] == "written in the box" and seen["big"] is True
    assert seen["keys"] == ["probe/big.bin", "probe/small.txt"] and seen["exists"] == [True, False]
    assert seen["console"].startswith("HTTPError: HTTP Error 403"), seen["console"]
    assert seen["other_name"].startswith("HTTPError: HTTP Error 403"), seen["other_name"]  # as written only
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            patch.setenv(name, env[name])
        store = open_store(uri)
        assert store.get_bytes("probe/copied.txt") == b"written in the box"
        assert len(store.get_bytes("probe/big.bin")) == 12 << 20
