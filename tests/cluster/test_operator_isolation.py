"""Nothing escapes a run, on the real control plane + real MinIO, with the operator running as
its own ServiceAccount (the chart's RBAC) and grading on:

- the workspace pod resolves only the names it needs: no DNS server (`dnsPolicy: None`, its own
  loopback as the only name server), the store host and the run's gateway Service pinned in its
  `/etc/hosts` with the addresses the operator resolved; the API server admits the pod spec; its
  NetworkPolicy has no port-53 egress;
- an eval pod has no DNS either (the store host pinned, no port-53 egress in the run's grading
  NetworkPolicy); its store keys, as the pod gets them from its Secret, are its own: with them a parser
  exploit cannot read another run, list the bucket, read held-out data or overwrite another
  submission's result (real MinIO refuses), yet the real `fetch-heldout` and `a2rl eval submission`
  processes work with them; the keys die when the eval Job has finished, the run's held-out
  reader when the run is deleted.

The store endpoint is given to the operator as a host name (`localhost`), as an in-cluster
Service name would be, so that it must be pinned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, LABEL_COMPONENT, LABEL_RUN_UID
from a2rl.models.tiny import build_tiny_model
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.store.open import open_store
from a2rl.store.scoped import grading_user_prefix
from tests.support.grading_support import (
    container_env,
    create_run,
    finish_pod,
    layout_of,
    play,
    record_submission,
    run_name,
    running_pod,
    submit,
    wait_state,
)
from tests.support.operator_support import RESTRICTED, persistent_volumes, wait_run
from tests.testenv.controlplane import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

KEY_SECRET = "driver-key"


@pytest.fixture(scope="module")
def minio_env(minio: Any) -> Iterator[dict[str, str]]:
    """MinIO by host name (the operator must resolve and pin it), in this process's environment."""
    env = {
        "AWS_ENDPOINT_URL": minio.endpoint.replace("127.0.0.1", "localhost"),
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
    }
    assert "localhost" in env["AWS_ENDPOINT_URL"]
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env


@pytest.fixture(scope="module")
def volumes(admin: client.ApiClient) -> Iterator[None]:
    with persistent_volumes(admin, "isolation-ws", 4):
        yield


def pod_spec_of_job(admin: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    job = admin.sanitize_for_serialization(client.BatchV1Api(admin).read_namespaced_job(name, ns))
    return dict(job["spec"]["template"]["spec"])


def test_the_workspace_pod_resolves_only_its_pinned_names(
    operator: Any, admin: client.ApiClient, make_namespace: Any
) -> None:
    ns = make_namespace(labels=RESTRICTED)
    core, net = client.CoreV1Api(admin), client.NetworkingV1Api(admin)
    core.create_namespaced_secret(ns, {"metadata": {"name": KEY_SECRET}, "stringData": {"api-key": "sk-x"}})
    name = run_name()
    driver = {"provider": "anthropic", "model": "claude-sonnet-4-5", "baseUrl": "http://10.1.2.3:8000",
              "secretRef": {"name": KEY_SECRET, "key": "api-key"}}  # fmt: skip
    run = create_run(admin, ns, name, agent={"stack": "claude-code"}, driver=driver,
                     budget={"wallTimeSeconds": 600, "graceSeconds": 5})  # fmt: skip
    uid = run["metadata"]["uid"]
    wait_run(admin, ns, name, "AgentRunning")
    pod = running_pod(admin, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent")  # admitted as `restricted`
    spec = pod["spec"]
    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"] == {"nameservers": ["127.0.0.1"]}  # no search domains, no cluster resolver
    hosts = {n: a["ip"] for a in spec["hostAliases"] for n in a["hostnames"]}
    service = core.read_namespaced_service(f"{name}-gateway", ns)
    assert service.spec.cluster_ip  # allocated by the API server when the operator created it
    for alias in (
        f"{name}-gateway.{ns}",
        f"{name}-gateway.{ns}.svc",
        f"{name}-gateway.{ns}.svc.cluster.local",
    ):
        assert hosts[alias] == service.spec.cluster_ip
    assert hosts["localhost"] in ("127.0.0.1", "::1")  # the store host, as the operator resolved it
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    gateway_host = json.loads(agent["command"][-1])["gateway"].split("//")[1].split(":")[0]
    assert gateway_host in hosts
    assert pod_spec_of_job(admin, ns, f"{name}-workspace")["hostAliases"] == spec["hostAliases"]
    policy = net.read_namespaced_network_policy(f"{name}-workspace", ns).to_dict()["spec"]
    ports = [p["port"] for rule in policy["egress"] for p in rule.get("ports") or []]
    assert 53 not in ports and "kube-dns" not in json.dumps(policy)
    # The gateway pod keeps its DNS: it resolves the provider's host.
    gw_policy = net.read_namespaced_network_policy(f"{name}-gateway", ns).to_dict()["spec"]
    assert 53 in [p["port"] for rule in gw_policy["egress"] for p in rule.get("ports") or []]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"base": build_tiny_model(root / "base", seed=0), "v1": build_tiny_model(root / "v1", seed=1)}


def _s3(env: dict[str, str], uri: str) -> ObjectStore:
    with pytest.MonkeyPatch.context() as mp:
        for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            mp.setenv(key, env[key])
        return open_store(uri)


def _refused(call: Any, *args: Any) -> None:
    with pytest.raises(Exception, match="AccessDenied"):
        result = call(*args)
        if hasattr(result, "__next__"):
            list(result)


@pytest.mark.slow
def test_an_eval_pods_keys_reach_its_own_submission_only(
    operator: Any,
    admin: client.ApiClient,
    store: ObjectStore,
    minio_env: dict[str, str],
    models: dict[str, Path],
    make_namespace: Any,
    tmp_path: Path,
) -> None:
    ns = make_namespace(labels=RESTRICTED)
    name = run_name()
    run = wait_run(admin, ns, create_run(admin, ns, name)["metadata"]["name"], "AgentRunning")
    layout = layout_of(run)
    rival = RunLayout("team-b", "rival", str(uuid.uuid4()))  # another team's run, in the same bucket
    store.put_bytes(rival.submission_result(1), b'{"score": 91.0}')
    store.put_bytes(rival.blob("cd34"), b"rival weights")
    submit(admin, record_submission(store, run, 0, models["base"]))
    submit(admin, record_submission(store, run, 1, models["v1"]))
    store.put_bytes(layout.submission_result(0), b'{"score": 12.5}')  # as if evaluated already
    wait_state(admin, ns, f"{name}-00001", "Evaluating")
    pod = running_pod(admin, ns, f"batch.kubernetes.io/job-name={name}-eval-00001")
    # No resolver: the store host is pinned as the operator resolved it; no port-53 egress.
    assert pod["spec"]["dnsPolicy"] == "None" and pod["spec"]["dnsConfig"] == {"nameservers": ["127.0.0.1"]}
    assert {n: a["ip"] for a in pod["spec"]["hostAliases"] for n in a["hostnames"]}["localhost"] in (
        "127.0.0.1",
        "::1",
    )
    grading = client.NetworkingV1Api(admin).read_namespaced_network_policy(f"{name}-grading", ns)
    assert 53 not in [
        p["port"] for rule in grading.to_dict()["spec"]["egress"] for p in rule.get("ports") or []
    ]
    containers = {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}
    env = container_env(admin, ns, containers["eval"])  # as the kubelet gives it to the pod
    fetch_env = container_env(admin, ns, containers["fetch-heldout"])
    assert env["AWS_ACCESS_KEY_ID"].startswith(grading_user_prefix(layout.uid))
    assert env["AWS_SECRET_ACCESS_KEY"] != minio_env["AWS_SECRET_ACCESS_KEY"]
    assert fetch_env["AWS_ACCESS_KEY_ID"] not in (env["AWS_ACCESS_KEY_ID"], minio_env["AWS_ACCESS_KEY_ID"])
    pod_store = _s3(env, store.uri)
    heldout = next(k for k in store.list("data/arith") if "/heldout/" in k)

    # The exploit's moves, refused by MinIO.
    for key in (rival.submission_result(1), rival.blob("cd34"), heldout, layout.submission_result(0),
                layout.run_json):  # fmt: skip
        _refused(pod_store.get_bytes, key)
    for prefix in ("", "team-b", "data", layout.prefix):
        _refused(pod_store.list, prefix)
    for key in (layout.submission_result(0), layout.submission_seal(1), rival.submission_result(1)):
        _refused(pod_store.put_bytes, key, b'{"score": 100.0}')
    assert store.get_bytes(layout.submission_result(0)) == b'{"score": 12.5}'
    assert store.get_bytes(rival.submission_result(1)) == b'{"score": 91.0}'
    fetch_store = _s3(fetch_env, store.uri)
    _refused(fetch_store.get_bytes, layout.submission_manifest(1))  # the reader reads held-out data only
    _refused(fetch_store.put_bytes, heldout, b"forged")

    # The pod's real programs work with exactly these keys.
    mounts = {"/var/run/a2rl/heldout": tmp_path / "heldout", "/tmp": tmp_path / "scratch"}
    fetched = play(admin, pod, "fetch-heldout", mounts)
    assert fetched.returncode == 0, fetched.stderr
    evaluated = play(admin, pod, "eval", mounts)
    assert evaluated.returncode == 0, evaluated.stderr
    assert store.get_json(layout.submission_result(1))["index"] == 1
    finish_pod(admin, pod, evaluated)
    wait_state(admin, ns, f"{name}-00001", "Succeeded", timeout=60)
    with pytest.raises(Exception, match="InvalidAccessKeyId"):  # the finished pod's keys are gone
        pod_store.get_bytes(layout.submission_manifest(1))
    assert fetch_store.get_bytes(f"{heldout.rsplit('/', 1)[0]}/manifest.json")  # the run's reader lives on

    # Deleting the run: the finalizer removes every store user of the run that is left.
    client.CustomObjectsApi(admin).delete_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, name
    )

    def reader_gone() -> bool:
        try:
            fetch_store.get_bytes(heldout)
        except Exception as exc:
            return "InvalidAccessKeyId" in str(exc)
        return False

    wait_for(reader_gone, timeout=60, what="the run's held-out reader removed by the finalizer")
