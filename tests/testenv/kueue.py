"""Kueue (sigs.k8s.io/kueue, built by `hack/testenv build`) as a process against the test control
plane, the way a real cluster runs it minus the Deployment.

`KueueServer.start`: the module's CRDs (`config/components/crd/bases`, copied beside the binary at
build time, so they always match it) applied server-side; a webhook serving certificate signed
by the control plane's CA; the Configuration (webhook on a free loopback port with that
certificate, no internal cert management, no leader election, no metrics server, only the
`batch/job` integration); the process itself (`--kubeconfig` = admin), in a mount namespace of
its own where an overlay on `/etc` gives it the metrics certificate Kueue insists on reading from
a fixed path there (root and overlayfs needed; the host's `/etc` is untouched); once it is ready,
the module's webhook configurations rewritten to `url:` + `caBundle`, keeping only the webhooks of
Jobs and of Kueue's own kinds. Then the default quota: a ResourceFlavor matching the kwok GPU
nodes and a ClusterQueue over it (`DEFAULT_QUOTA`); `local_queue(ns)` gives a namespace its
LocalQueue. Requires PyYAML (the pytest fixtures only; `hack/testenv up` does not start Kueue).
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.testenv.controlplane import GPU_RESOURCE, ControlPlane, Process, TestEnvError, free_port, wait_for

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
FLAVOR = "kwok-gpu"
CLUSTER_QUEUE = "a2rl"
LOCAL_QUEUE = "a2rl"
#: The kwok GPU nodes carry it (`ControlPlane.add_node`); Kueue puts it in admitted pods' nodeSelector.
FLAVOR_NODE_LABELS = {"nvidia.com/gpu.present": "true"}
#: What the default ClusterQueue lends: 2 GPUs, the rest ample (every a2rl container asks for
#: `ephemeral-storage`, and Kueue refuses a workload asking for a resource its queue does not cover).
DEFAULT_QUOTA = {"cpu": "64", "memory": "512Gi", "ephemeral-storage": "4Ti", "pods": "100", GPU_RESOURCE: "2"}
#: Webhooks kept from the module's manifests: Jobs (the only integration on) and Kueue's kinds.
WEBHOOK_GROUPS = frozenset({"batch", GROUP})
FIELD_MANAGER = "a2rl-testenv"

Obj = dict[str, Any]

# --------------------------------------------------------------------------- objects


def resource_flavor(name: str = FLAVOR, node_labels: dict[str, str] | None = None) -> Obj:
    labels = FLAVOR_NODE_LABELS if node_labels is None else node_labels
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": labels}}  # fmt: skip


def cluster_queue(
    name: str = CLUSTER_QUEUE,
    quota: dict[str, str] | None = None,
    flavor: str = FLAVOR,
    preemption: Obj | None = None,
) -> Obj:
    """A ClusterQueue over one flavor, open to every namespace; by default a lower-priority
    workload in it may be preempted by a higher one (`withinClusterQueue: LowerPriority`)."""
    amounts = DEFAULT_QUOTA if quota is None else quota
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": preemption or {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": list(amounts),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [{"name": k, "nominalQuota": v} for k, v in amounts.items()],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(namespace: str, name: str = LOCAL_QUEUE, cluster: str = CLUSTER_QUEUE) -> Obj:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": meta,
            "spec": {"clusterQueue": cluster}}  # fmt: skip


def workload_priority_class(name: str, value: int) -> Obj:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value, "description": f"a2rl tests: {name}"}  # fmt: skip


# --------------------------------------------------------------------------- the process


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TestEnvError(f"openssl {' '.join(args)} failed: {proc.stderr}")


def _plural(kind: str) -> str:
    return kind.lower() + ("es" if kind.endswith("s") else "s")


@dataclass
class KueueServer:
    control_plane: ControlPlane
    state_dir: Path
    binary: Path
    #: Where `build` copied the module's `config/components/...` folders.
    module_dir: Path
    webhook_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: Process | None = None
    #: API paths of the webhook configurations installed (removed by `stop`).
    webhooks: list[str] = field(default_factory=list)

    @property
    def cert_dir(self) -> Path:
        return self.state_dir / "webhook-certs"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "kueue.log"

    # -- REST (admin identity; server-side apply)

    def _ssl(self) -> ssl.SSLContext:
        pki = self.control_plane.pki
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        ctx.load_cert_chain(str(pki.cert("admin")), str(pki.key("admin")))
        return ctx

    def request(
        self, method: str, path: str, body: Obj | None = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.control_plane.ports["apiserver"], context=self._ssl(), timeout=30
        )
        try:
            payload = json.dumps(body).encode() if body is not None else None
            conn.request(
                method,
                path,
                body=payload,
                headers={"Content-Type": content_type, "Accept": "application/json"},
            )
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    def apply(self, obj: Obj) -> Obj:
        """Server-side apply (forced, field manager `a2rl-testenv`) of any object."""
        group_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
        path = f"{base}{ns}/{_plural(kind)}/{meta['name']}?{query}"
        status, data = self.request("PATCH", path, obj, content_type="application/apply-patch+yaml")
        if status not in (200, 201):
            raise TestEnvError(f"apply {kind} {meta['name']}: HTTP {status}: {data}")
        return dict(data)

    def get(self, path: str) -> Obj | None:
        status, data = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise TestEnvError(f"GET {path}: HTTP {status}: {data}")
        return dict(data)

    def workloads(self, namespace: str) -> list[Obj]:
        found = self.get(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/workloads") or {}
        return list(found.get("items") or [])

    # -- lifecycle

    def start(self, log: Callable[[str], None] = print, timeout: float = 60) -> None:
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._install_crds(timeout)
        self._write_certs()
        config = self.state_dir / "config.yaml"
        config.write_text(yaml.safe_dump(self._configuration(), sort_keys=False))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}
        self.control_plane.create("/api/v1/namespaces", namespace, exist_ok=True)
        kueue = [str(self.binary), f"--config={config}", f"--kubeconfig={self.control_plane.kubeconfig}",
                 "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"]  # fmt: skip
        self.process = Process("kueue", self._with_metrics_certs(kueue), self.log_path)
        self.process.start()
        proc = self.process

        def ready() -> bool:
            proc.check_alive()
            conn = http.client.HTTPConnection("127.0.0.1", self.health_port, timeout=2)
            try:
                conn.request("GET", "/readyz")
                return conn.getresponse().status == 200
            finally:
                conn.close()

        try:
            wait_for(ready, timeout=timeout, what="kueue /readyz")
            self._install_webhooks()
            # The webhooks answer (a ResourceFlavor goes through Kueue's own): quota can be set up.
            wait_for(
                lambda: self.apply(resource_flavor()), timeout=timeout, what="Kueue's webhooks to answer"
            )
            self.apply(cluster_queue())
        except BaseException:
            self.stop()
            raise
        elapsed = time.monotonic() - started
        log(f"[testenv] kueue ready in {elapsed:.1f}s (webhooks on 127.0.0.1:{self.webhook_port})")

    def stop(self) -> None:
        """Stop the process and remove its webhooks (else every Job create would fail on them)."""
        for path in self.webhooks:
            self.request("DELETE", path)
        if self.process is not None:
            self.process.stop()

    def local_queue(self, namespace: str, name: str = LOCAL_QUEUE, cluster: str = CLUSTER_QUEUE) -> str:
        self.apply(local_queue(namespace, name, cluster))
        return name

    # -- pieces

    def _configuration(self) -> Obj:
        return {
            "apiVersion": CONFIG_API,
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(self.cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"]},
        }

    def _write_certs(self) -> None:
        pki = self.control_plane.pki
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        key, crt = self.cert_dir / "tls.key", self.cert_dir / "tls.crt"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-days", "3650", "-keyout", str(key), "-out", str(crt),
                 "-subj", "/CN=kueue-webhook", "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key),
                 "-addext", "basicConstraints=critical,CA:FALSE",
                 "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
                 "-addext", "extendedKeyUsage=serverAuth",
                 "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")  # fmt: skip

    def _with_metrics_certs(self, argv: list[str]) -> list[str]:
        """`argv` run where `/etc/kueue/metrics/certs/tls.{crt,key}` exist: Kueue reads its metrics
        certificate from that fixed path (whether or not the metrics server runs) and exits without
        it. In a mount namespace of its own, an overlay on `/etc` adds them for Kueue alone: the
        host's `/etc` is left as it is."""
        upper, work = self.state_dir / "etc-upper", self.state_dir / "etc-work"
        certs = upper / "kueue" / "metrics" / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        work.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            (certs / name).write_bytes((self.cert_dir / name).read_bytes())
        script = (
            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"'
        )
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-ec", script, "sh",
                str(upper), str(work), *argv]  # fmt: skip

    def _documents(self, folder: str) -> Iterator[Obj]:
        for path in sorted((self.module_dir / folder).glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if isinstance(doc, dict) and doc.get("kind"):
                    yield doc

    def _install_crds(self, timeout: float) -> None:
        names = []
        for crd in self._documents("config/components/crd/bases"):
            self.apply(crd)
            names.append(crd["metadata"]["name"])

        def established(name: str) -> bool:
            crd = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
            conds = (crd.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        for name in names:
            wait_for(functools.partial(established, name), timeout=timeout, what=f"CRD {name} Established")

    def _install_webhooks(self) -> None:
        ca = base64.b64encode(self.control_plane.pki.ca_cert.read_bytes()).decode()
        for doc in self._documents("config/components/webhook"):
            if doc["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                continue
            kept = []
            for hook in doc.get("webhooks") or []:
                groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
                if not groups & WEBHOOK_GROUPS:
                    continue
                path = hook["clientConfig"]["service"].get("path", "/")
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}", "caBundle": ca}
                kept.append(hook)
            doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
            doc["webhooks"] = kept
            self.apply(doc)
            plural = _plural(doc["kind"])
            self.webhooks.append(f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}")
