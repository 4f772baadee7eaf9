"""Shared pieces of the cluster-mode recorder tests (no tests here).

`ClusterRun` sets up what the operator would for one BenchRun on the real control plane — the
BenchRun itself, the run's ServiceAccount/Role/RoleBinding (the operator's own manifests), a
token kubeconfig for that ServiceAccount — plus a fresh prefix in the real MinIO. `RecorderProc`
runs `a2rl recorder serve` as a real process configured only by environment, as in the pod.
The tests play the operator with `wait_submission` and `set_status` (admin credentials).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl_operator.manifests.rbac import role, role_binding, runner_name, service_account
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.api.benchsubmission import submission_name
from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, BENCHSUBMISSION_PLURAL
from a2rl.launch import a2rl_argv
from a2rl.store.layout import RunLayout
from a2rl.store.open import parse_endpoint
from a2rl.store.s3 import S3Store
from tests.testenv.controlplane import wait_for

REPO = Path(__file__).resolve().parents[2]
BUCKET = "a2rl-recorder"
A2RL = a2rl_argv()


def benchrun_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "BenchRun",
        "metadata": {"name": name},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": {"image": "ghcr.io/a2rl/agent-baselines:0.1.0", "command": ["python", "-m", "agent"]},
            "budget": {"wallTimeSeconds": 3600, "graceSeconds": 5},
            "resources": {"cpu": "1", "memory": "1Gi"},
        },
    }


@dataclass
class ClusterRun:
    admin: client.ApiClient
    namespace: str
    run: dict[str, Any]
    kubeconfig: Path  # the run's ServiceAccount (what the recorder sidecar gets)
    minio: Any
    store_prefix: str

    @property
    def name(self) -> str:
        return str(self.run["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.run["metadata"]["uid"])

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.namespace, self.name, self.uid)

    @property
    def store_uri(self) -> str:
        return f"s3://{BUCKET}/{self.store_prefix}"

    def store(self) -> S3Store:
        """A direct view of the run's store (no spool): what an eval Job would read."""
        host, secure = parse_endpoint(self.minio.endpoint)
        return S3Store(
            host, self.minio.access_key, self.minio.secret_key, BUCKET, self.store_prefix, secure=secure
        )

    def recorder_env(self, workspace: Path, spool: Path, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("A2RL_", "AWS_", "KUBECONFIG"))}
        env.update(
            {
                "A2RL_STORE_URI": self.store_uri,
                "AWS_ENDPOINT_URL": self.minio.endpoint,
                "AWS_ACCESS_KEY_ID": self.minio.access_key,
                "AWS_SECRET_ACCESS_KEY": self.minio.secret_key,
                "KUBECONFIG": str(self.kubeconfig),
                "A2RL_RUN_PREFIX": self.layout.prefix,
                "A2RL_RUN_NAME": self.name,
                "A2RL_RUN_NAMESPACE": self.namespace,
                "A2RL_RUN_UID": self.uid,
                "WORKSPACE": str(workspace),
                "TASK": "arith",
                "A2RL_RUN_TIMEOUT": "3600",
                "A2RL_SPOOL_DIR": str(spool),
                "A2RL_CODE_POLL_INTERVAL": "0.2",
                "A2RL_CODE_DEBOUNCE": "30",  # only submits and the final flush make revisions
                "A2RL_RECORDER_DRAIN_TIMEOUT": "90",
                "A2RL_EVAL_TIMEOUT": "300",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)
        return env

    # --- playing the operator -------------------------------------------------------------

    def custom(self, api: client.ApiClient | None = None) -> Any:
        return client.CustomObjectsApi(api or self.admin)

    def get_submission(self, index: int) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom().get_namespaced_custom_object(
                API_GROUP,
                API_VERSION,
                self.namespace,
                BENCHSUBMISSION_PLURAL,
                submission_name(self.name, index),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def wait_submission(self, index: int, timeout: float = 60) -> dict[str, Any]:
        found: dict[str, Any] = wait_for(
            lambda: self.get_submission(index), timeout=timeout, interval=0.2,
            what=f"BenchSubmission {submission_name(self.name, index)}",
        )  # fmt: skip
        return found

    def set_status(self, index: int, state: str, score: float | None = None, error: str | None = None,
                   api: client.ApiClient | None = None) -> None:  # fmt: skip
        status: dict[str, Any] = {"state": state, "evaluatorVersion": "arith-test"}
        if score is not None:
            status["score"] = score
        if error is not None:
            status["error"] = error
        self.custom(api).patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, self.namespace, BENCHSUBMISSION_PLURAL,
            submission_name(self.name, index), {"status": status},
        )  # fmt: skip

    def create_baseline(self, score: float) -> None:
        """What the operator does before the agent starts: BenchSubmission 0, evaluated."""
        body = {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": "BenchSubmission",
            "metadata": {"name": submission_name(self.name, 0)},
            "spec": {
                "runName": self.name,
                "index": 0,
                "modelPath": "models/tiny",
                "modelDigest": "0" * 64,
                "manifestUri": f"{self.store_uri}/{self.layout.submission_manifest(0)}",
                "submittedAt": "2026-01-01T00:00:00Z",
            },
        }
        self.custom().create_namespaced_custom_object(
            API_GROUP, API_VERSION, self.namespace, BENCHSUBMISSION_PLURAL, body
        )
        self.set_status(0, "Succeeded", score=score)


def make_cluster_run(control_plane: Any, admin: client.ApiClient, namespace: str, minio: Any) -> ClusterRun:
    custom: Any = client.CustomObjectsApi(admin)
    run: dict[str, Any] = custom.create_namespaced_custom_object(
        API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, benchrun_body(f"rec-{uuid.uuid4().hex[:6]}")
    )
    core: Any = client.CoreV1Api(admin)
    rbac: Any = client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(namespace, service_account(run))
    rbac.create_namespaced_role(namespace, role(run))
    rbac.create_namespaced_role_binding(namespace, role_binding(run))
    kubeconfig = control_plane.kubeconfig_for_serviceaccount(namespace, runner_name(run), create=False)
    return ClusterRun(admin, namespace, run, kubeconfig, minio, f"runs-{uuid.uuid4().hex[:8]}")


def call(url: str, method: str = "GET", body: Any = None, timeout: float = 300) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class RecorderProc:
    """`a2rl recorder serve --port 0` in a subprocess, logging to a file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [*A2RL, "recorder", "serve", "--port", "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on http://127.0.0.1:" not in line:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"recorder did not start: {line!r}\n{self.log()}")
        self.url = line.strip().rsplit(" ", 1)[-1]

    def submit(self, model_path: str, timeout: float = 300) -> tuple[int, Any]:
        return call(f"{self.url}/submit", "POST", {"model_path": model_path}, timeout=timeout)

    def get(self, path: str) -> tuple[int, Any]:
        return call(f"{self.url}{path}", timeout=30)

    def terminate(self, timeout: float = 120) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


def write_model(path: Path, weights: bytes) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (path / "tokenizer.json").write_text(json.dumps({"version": "1.0", "vocab": list("abc")}))
    (path / "model.safetensors").write_bytes(weights)
    return path


def make_workspace(root: Path) -> Path:
    ws = root / "ws"
    for sub in ("code", "output", "models/tiny", "data"):
        (ws / sub).mkdir(parents=True)
    (ws / "run_meta.json").write_text(json.dumps({"start_time": time.time(), "timeout_s": 3600}))
    return ws
