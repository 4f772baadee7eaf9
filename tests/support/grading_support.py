"""Helpers of the tests that grade in the cluster (real control plane + real MinIO): BenchRuns
and BenchSubmissions as the recorder creates them, eval and report pods played as local
processes (kwok does not run containers), and waiting for submission states.

Shared by `test_operator_submissions.py` and `test_cluster_e2e.py`; their fixtures (the
operator with grading on, MinIO, the store) are in `tests/support/grading_fixtures.py`.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from a2rl_grader.baseline import baseline_submission_manifest
from a2rl_recorder.cluster_dispatch import benchsubmission_body
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, BENCHSUBMISSION_PLURAL
from a2rl.records.tree import TreeRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import snapshot_tree
from a2rl.store.layout import RunLayout
from tests.support.operator_install import a2rl_executable

STORE_URI = "s3://a2rl-grading/runs"
GRADER_IMAGE = "ghcr.io/a2rl/grader:test"
#: How long the operator waits for evaluations in flight at the end of a run.
DRAIN_TIMEOUT_S = 8
#: Held-out items an evaluation scores (`spec.evaluation.limit` of `create_run`).
EVAL_LIMIT = 8
#: What the grader image's ENV provides (the pod spec does not list it): the programs on PATH.
IMAGE_ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"}


def custom(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


def create_run(api: client.ApiClient, ns: str, name: str, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["python", "-m", "a2rl_agents.sft"]},
        "budget": {"wallTimeSeconds": 3600, "graceSeconds": 5, "maxSubmissions": 2},
        "resources": {"cpu": "1", "memory": "1Gi"},
        "evaluation": {
            "cpu": "1",
            "memory": "2Gi",
            "gpus": 1,
            "backend": "transformers",
            "limit": EVAL_LIMIT,
        },
    }
    spec.update(overrides)
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "BenchRun",
        "metadata": {"name": name},
        "spec": spec,
    }
    run: dict[str, Any] = custom(api).create_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, body
    )
    return run


def get_sub(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    sub: dict[str, Any] = custom(api).get_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHSUBMISSION_PLURAL, name
    )
    return sub


def wait_state(api: client.ApiClient, ns: str, name: str, state: str, timeout: float = 60) -> dict[str, Any]:
    from tests.testenv.controlplane import wait_for

    def check() -> dict[str, Any] | None:
        sub = get_sub(api, ns, name)
        return sub if (sub.get("status") or {}).get("state") == state else None

    try:
        result: dict[str, Any] = wait_for(check, timeout=timeout, what=f"BenchSubmission {name} {state}")
    except TimeoutError:
        print(json.dumps(get_sub(api, ns, name).get("status"), indent=1))
        raise
    return result


def running_pod(api: client.ApiClient, ns: str, selector: str, timeout: float = 60) -> dict[str, Any]:
    from tests.testenv.controlplane import wait_for

    core = client.CoreV1Api(api)

    def running() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=selector).items
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    pod: dict[str, Any] = api.sanitize_for_serialization(wait_for(running, timeout=timeout, what=selector))
    return pod


def layout_of(run: dict[str, Any]) -> RunLayout:
    meta = run["metadata"]
    return RunLayout(meta["namespace"], meta["name"], meta["uid"])


def record_submission(
    s: ObjectStore, run: dict[str, Any], index: int, model: Path, submitted: datetime | None = None
) -> dict[str, Any]:
    """What the recorder does on POST /submit: snapshot the model, write the manifest, and the
    BenchSubmission body it creates (the recorder's own builder)."""
    layout = layout_of(run)
    tree, _ = snapshot_tree(s, layout, model)
    when = (submitted or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    if index == 0:
        base = baseline_submission_manifest(TreeRecord.of(tree), tree.digest, "tiny")
        manifest = {**base.to_json(), "submitted_at": when}
    else:
        manifest = {
            "index": index,
            "submitted_at": when,
            "model_path": f"output/v{index}",
            "model": tree.to_json(),
            "model_digest": tree.digest,
            "identical_to_base": False,
            "code_revision": None,
            "code_digest": None,
            "request": {"model_path": f"output/v{index}"},
        }
    s.put_json(layout.submission_manifest(index), manifest)
    meta = run["metadata"]
    return benchsubmission_body(
        run_name=meta["name"],
        namespace=meta["namespace"],
        run_uid=meta["uid"],
        index=index,
        manifest=manifest,
        manifest_uri=s.url_for(layout.submission_manifest(index)),
    )


def submit(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    ns = body["metadata"]["namespace"]
    created: dict[str, Any] = custom(api).create_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHSUBMISSION_PLURAL, body
    )
    return created


def eval_job(api: client.ApiClient, ns: str, name: str) -> Any:
    try:
        return client.BatchV1Api(api).read_namespaced_job(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def container_env(api: client.ApiClient, ns: str, container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom Secrets, then env."""
    core = client.CoreV1Api(api)

    def secret(name: str) -> dict[str, str]:
        data = core.read_namespaced_secret(name, ns).data or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        env.update(secret(src["secretRef"]["name"]))
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secret(ref["name"])[ref["key"]]
    return env


TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class Played:
    """A container run as a local process: what ran and how it ended."""

    container: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    returncode: int | None = None
    output: str = ""


@dataclass
class PodPlayer:
    """Runs a pod's containers as local processes with the pod spec's command, arguments,
    environment and working directory, each mount path mapped to a local directory standing in
    for the volume, and the projected ServiceAccount token as `kubeconfig`."""

    api: client.ApiClient
    pod: dict[str, Any]
    mounts: dict[str, Path]
    kubeconfig: Path | None = None
    played: list[Played] = field(default_factory=list)

    def _local(self, text: str) -> str:
        for path in sorted(self.mounts, key=len, reverse=True):
            if text == path or text.startswith(path + "/"):
                return str(self.mounts[path]) + text[len(path) :]
        return text

    def container(self, name: str) -> dict[str, Any]:
        spec = self.pod["spec"]
        found: dict[str, Any] = next(
            c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name
        )
        return found

    def prepare(self, name: str) -> Played:
        c = self.container(name)
        for path in self.mounts.values():
            path.mkdir(parents=True, exist_ok=True)
        argv = [self._local(a) for a in c["command"] + c.get("args", [])]
        argv[0] = {"a2rl": a2rl_executable(), "python": sys.executable}.get(argv[0], argv[0])
        env = {
            k: self._local(v)
            for k, v in container_env(self.api, self.pod["metadata"]["namespace"], c).items()
        }
        env = {**IMAGE_ENV, **env}
        if any(m["mountPath"] == TOKEN_DIR for m in c.get("volumeMounts", [])):
            # The projected ServiceAccount token, as the in-cluster client would use it.
            assert self.kubeconfig is not None
            env["KUBECONFIG"] = str(self.kubeconfig)
        cwd = self._local(c["workingDir"]) if c.get("workingDir") else None
        return Played(name, argv, env, cwd)

    def run(self, name: str, timeout: float = 900) -> Played:
        p = self.prepare(name)
        proc = subprocess.run(
            p.argv, env=p.env, cwd=p.cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
        p.returncode, p.output = proc.returncode, proc.stdout + proc.stderr
        self.played.append(p)
        return p

    def start(self, name: str, log: Path) -> tuple[Played, subprocess.Popen[bytes]]:
        p = self.prepare(name)
        out = log.open("wb")
        proc = subprocess.Popen(p.argv, env=p.env, cwd=p.cwd, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.played.append(p)
        return p, proc


def play(
    api: client.ApiClient, pod: dict[str, Any], container_name: str, mounts: dict[str, Path]
) -> subprocess.CompletedProcess[str]:
    """Run one container of `pod` to completion as a local process (`PodPlayer`)."""
    p = PodPlayer(api, pod, mounts).prepare(container_name)
    return subprocess.run(
        p.argv, env=p.env, cwd=p.cwd, capture_output=True, text=True, timeout=600, check=False
    )


def finish_pod(
    api: client.ApiClient, pod: dict[str, Any], proc: subprocess.CompletedProcess[str] | None
) -> None:
    """Let the kwok pod end the way the played process did."""
    from tests.testenv.fixtures import complete_pod

    name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
    if proc is None or proc.returncode == 0:
        complete_pod(api, ns, name, "succeeded")
    else:
        complete_pod(api, ns, name, "failed", exit_code=proc.returncode)


def submission_table(api: client.ApiClient, ns: str) -> dict[str, Any]:
    """What `kubectl get benchsubmissions` prints (the server-side Table of the printer columns)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{ns}/{BENCHSUBMISSION_PLURAL}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers)
    resp.read()
    table: dict[str, Any] = json.loads(resp.data)
    return table


def run_name() -> str:
    return f"gr-{uuid.uuid4().hex[:6]}"
