"""Install the operator into a cluster and run it as a subprocess: shared by the e2e tests and
`bench/operator_apply.py`, `bench/operator_scale.py` (the Helm chart does the same in production).

The operator authenticates as its own ServiceAccount bound to `rbac.RULES` — never as admin —
so the tests prove the RBAC is sufficient.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from a2rl_operator import finalizer_policy
from a2rl_operator.rbac import cluster_role, cluster_role_binding
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import API_GROUP, API_VERSION, BENCHRUN_PLURAL, FINALIZER

OPERATOR_NAME = "a2rl-operator"
ADMISSION = tuple(finalizer_policy.ADMISSION_API.split("/"))


def _exists_ok(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


def install_crds(api: client.ApiClient, crds_dir: Path, timeout: float = 60) -> None:
    ext: Any = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(crds_dir.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(crd["metadata"]["name"])
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established")
            time.sleep(0.2)


def install_rbac(api: client.ApiClient, namespace: str, name: str = OPERATOR_NAME) -> None:
    """Namespace, ServiceAccount, ClusterRole (rbac.RULES) and ClusterRoleBinding of the operator."""
    core: Any = client.CoreV1Api(api)
    rbac: Any = client.RbacAuthorizationV1Api(api)
    _exists_ok(core.create_namespace, {"metadata": {"name": namespace}})
    _exists_ok(core.create_namespaced_service_account, namespace, {"metadata": {"name": name}})
    role = cluster_role(name)
    try:
        rbac.create_cluster_role(role)
    except ApiException as exc:
        if exc.status != 409:
            raise
        rbac.replace_cluster_role(name, role)
    _exists_ok(rbac.create_cluster_role_binding, cluster_role_binding(name, name, namespace))


def install_finalizer_policy(
    api: client.ApiClient,
    name: str,
    namespaces: Sequence[str],
    probe_run: dict[str, Any],
    timeout: float = 60,
) -> None:
    """The chart's finalizer policy `name`, bound to `namespaces` (as `operator.watchNamespaces`
    renders it), once the API server applies it: a dry-run create of `probe_run` in the first
    namespace comes back with the finalizer. A new policy is compiled within a second or so; right
    after the CRD is created the API server answers 503 until the policy's type checker knows the
    kind (a control plane just started: 429)."""
    custom: Any = client.CustomObjectsApi(api)
    for plural, body in (
        ("mutatingadmissionpolicies", finalizer_policy.policy(name)),
        ("mutatingadmissionpolicybindings", finalizer_policy.binding(name, namespaces)),
    ):
        custom.create_cluster_custom_object(*ADMISSION, plural, body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            probe = custom.create_namespaced_custom_object(
                API_GROUP, API_VERSION, namespaces[0], BENCHRUN_PLURAL, probe_run, dry_run="All"
            )
            if FINALIZER in (probe["metadata"].get("finalizers") or []):
                return
        except ApiException as exc:
            if exc.status not in (429, 503):
                raise
        time.sleep(0.5)
    raise TimeoutError(f"the finalizer policy {name} was not applied within {timeout:.0f} s")


def remove_finalizer_policy(api: client.ApiClient, name: str) -> None:
    """The finalizer policy `name` and its binding gone (either may not have been created)."""
    custom: Any = client.CustomObjectsApi(api)
    for plural in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
        try:
            custom.delete_cluster_custom_object(*ADMISSION, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def serviceaccount_kubeconfig(
    api: client.ApiClient, namespace: str, name: str, dest: Path, ttl_s: int = 7200
) -> Path:
    """A kubeconfig that authenticates with a fresh token of the ServiceAccount (TokenRequest)."""
    core: Any = client.CoreV1Api(api)
    req = {"spec": {"expirationSeconds": ttl_s}}
    token = core.create_namespaced_service_account_token(name, namespace, req).status.token
    cfg = api.configuration
    cluster: dict[str, Any] = {"server": cfg.host}
    if cfg.ssl_ca_cert:
        cluster["certificate-authority"] = cfg.ssl_ca_cert
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(doc))
    dest.chmod(0o600)
    return dest


def a2rl_executable() -> str:
    candidate = Path(sys.executable).parent / "a2rl"
    return str(candidate) if candidate.exists() else "a2rl"


class OperatorProcess:
    """`a2rl operator` as a child process with its log in a file."""

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        args: Sequence[str] = (),
        port: int = 0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.args = list(args)
        self.port = port
        self.env = dict(env or {})  # on top of ours (e.g. store credentials)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def healthz(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    @property
    def readyz(self) -> str:
        return f"http://127.0.0.1:{self.port}/readyz"

    def start(self, timeout: float = 60) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
        env.update(self.env)
        argv = [a2rl_executable(), "operator", "--kubeconfig", str(self.kubeconfig), *self.args]
        if self.port:
            argv += ["--health", f"127.0.0.1:{self.port}"]
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        if self.port:
            self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:  # ready: kopf's startup handlers ran and the API server answers
                with urllib.request.urlopen(self.readyz, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"operator not healthy after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no clean-up at all, like a node loss or an OOM kill."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, grace: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def peak_rss_kib(self) -> int:
        """VmHWM of the running operator (peak resident set size)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise RuntimeError("VmHWM not found")

    def cpu_seconds(self) -> float:
        """User + system CPU time the running operator has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
