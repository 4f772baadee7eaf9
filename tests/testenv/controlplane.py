"""Start and stop the real test environment: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok (fake GPU nodes) and MinIO, all on loopback with free ports.

Stdlib only (plus the `openssl` CLI for certificates) so `hack/testenv up` runs with any
python3; the pytest fixtures wrap the same classes. Talking to the API server here goes through
a tiny client-certificate HTTPS helper; tests use `ControlPlane.api_client()` (kubernetes client).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.testenv import build

STAGES_FILE = build.MODULES_DIR / "kwok" / "stages.yaml"
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
COMPLETE_ANNOTATION = "a2rl.dev/test-complete"
EXIT_CODE_ANNOTATION = "a2rl.dev/test-exit-code"
GPU_RESOURCE = "nvidia.com/gpu"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
DEFAULT_NODES = ("kwok-gpu-0", "kwok-gpu-1")


class TestEnvError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2, what: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy (returned); raise TimeoutError otherwise.

    Exceptions raised by the predicate count as "not yet" and the last one is reported.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            desc = what or getattr(predicate, "__name__", "condition")
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {desc}; last error: {last_exc!r}")
        time.sleep(interval)


# --------------------------------------------------------------------------- processes


@dataclass
class Process:
    """One child in its own process group, logging to `<state>/<name>.log`."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None
    pid: int = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return _pid_alive(self.pid, self.argv[0])

    def check_alive(self) -> None:
        if not self.alive():
            raise TestEnvError(f"{self.name} exited early; last log lines:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 10.0) -> None:
        if not self.pid or not self.alive():
            self._reap()
            return
        _signal_group(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.alive():
            _signal_group(self.pid, signal.SIGKILL)
            wait_for(lambda: not self.alive(), timeout=10, what=f"{self.name} to die")
        self._reap()

    def _reap(self) -> None:
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)


def attach_processes(info: dict[str, Any], state_dir: Path) -> dict[str, Process]:
    """The processes another process started and described (`pids`, `argv0`), by name, logging under
    `state_dir`: for `hack/testenv status` and `down`."""
    processes = {}
    for name, pid in info["pids"].items():
        proc = Process(name, [info["argv0"][name]], state_dir / f"{name}.log")
        proc.pid = pid
        processes[name] = proc
    return processes


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _pid_alive(pid: int, binary: str) -> bool:
    """For processes started by another python process (hack/testenv up): guard against pid reuse."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    zombie = stat.rsplit(")", 1)[1].split()[0] == "Z"
    # An exiting process has already released its memory (empty cmdline) but is not gone yet.
    return cmdline in (binary, "") and not zombie


# --------------------------------------------------------------------------- certificates


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TestEnvError(f"openssl {' '.join(args)} failed: {proc.stderr}")


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    def create(self, host: str = "127.0.0.1") -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "3650"]
        _openssl("req", "-x509", *ec, "-keyout", str(self.ca_key), "-out", str(self.ca_cert),
                 "-subj", "/CN=a2rl-testenv-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")  # fmt: skip
        sans = "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        sans += "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
        if host != "127.0.0.1":
            sans += f",IP:{host}"
        self.leaf("apiserver", "/CN=kube-apiserver", "serverAuth", sans)
        self.leaf("admin", "/O=system:masters/CN=a2rl-admin", "clientAuth")
        self.leaf("controller-manager", "/CN=system:kube-controller-manager", "clientAuth")
        self.leaf("scheduler", "/CN=system:kube-scheduler", "clientAuth")
        # Service-account token signing key pair (EC, ES256 tokens).
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(self.key("sa")))
        _openssl("ec", "-in", str(self.key("sa")), "-pubout", "-out", str(self.dir / "sa.pub"))

    def leaf(self, name: str, subject: str, usage: str, sans: str = "") -> None:
        """`<name>.crt`/`.key` signed by the CA: `usage` serverAuth (with `sans`) or clientAuth."""
        args = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-days", "3650", "-keyout", str(self.key(name)), "-out", str(self.cert(name)),
                "-subj", subject, "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key),
                "-addext", "basicConstraints=critical,CA:FALSE",
                "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
                "-addext", f"extendedKeyUsage={usage}"]  # fmt: skip
        if sans:
            args += ["-addext", f"subjectAltName={sans}"]
        _openssl(*args)


def write_kubeconfig(
    path: Path, server: str, ca: Path, user: dict[str, str], name: str = "a2rl-testenv"
) -> Path:
    """Kubeconfig as JSON (a YAML subset) so no YAML library is needed."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- control plane


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok under `state_dir`.

    The API server listens on `host`: loopback, or the host end of the real node's link
    (tests/testenv/hostnet.py), where the `kubernetes` Service's endpoints point for pods."""

    state_dir: Path
    binaries: dict[str, Path] = field(default_factory=build.binary_paths)
    processes: dict[str, Process] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    host: str = "127.0.0.1"

    @property
    def pki(self) -> Pki:
        return Pki(self.state_dir / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.ports['apiserver']}"

    @property
    def bin_dir(self) -> Path:
        return self.binaries["kube-apiserver"].parent

    # -- lifecycle

    def start(self, nodes: tuple[str, ...] = DEFAULT_NODES, log: Callable[[str], None] = print) -> None:
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.ports.setdefault("etcd", free_port())
        self.ports.setdefault("etcd-peer", free_port())
        self.ports.setdefault("apiserver", free_port())
        self.ports.setdefault("kwok", free_port())
        self.pki.create(self.host)
        self._write_kubeconfigs()
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
            for node in nodes:
                self.add_node(node)
            self._wait_nodes_ready(nodes)
        except BaseException:
            self.stop()
            raise
        log(f"[testenv] control plane ready at {self.server} in {time.monotonic() - started:.1f}s")

    def stop(self) -> None:
        # Reverse start order: clients first, etcd last.
        for name in reversed(list(self.processes)):
            self.processes[name].stop()

    def _spawn(self, name: str, argv: list[str]) -> Process:
        proc = Process(name, argv, self.state_dir / f"{name}.log")
        proc.start()
        self.processes[name] = proc
        return proc

    def _write_kubeconfigs(self) -> None:
        pki = self.pki
        for name in ("admin", "controller-manager", "scheduler"):
            user = {"client-certificate": str(pki.cert(name)), "client-key": str(pki.key(name))}
            write_kubeconfig(self.state_dir / f"{name}.kubeconfig", self.server, pki.ca_cert, user)

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        proc = self._spawn("etcd", [
            str(self.binaries["etcd"]), "--name=default", f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync", "--log-level=warn",
        ])  # fmt: skip

        def healthy() -> bool:
            proc.check_alive()
            with urllib.request.urlopen(f"{client}/health", timeout=2) as resp:
                return bool(json.load(resp).get("health") == "true")

        wait_for(healthy, timeout=30, what="etcd /health")

    def _start_apiserver(self) -> None:
        pki, state = self.pki, self.state_dir
        proc = self._spawn("kube-apiserver", [
            str(self.binaries["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            f"--bind-address={self.host}", f"--secure-port={self.ports['apiserver']}",
            f"--advertise-address={self.host}", f"--cert-dir={state / 'apiserver-certs'}",
            f"--tls-cert-file={pki.cert('apiserver')}", f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            # PodSecurity is on by default; naming it makes the intent explicit and guards a change.
            "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,PodSecurity,"
            "DefaultTolerationSeconds,Priority,ResourceQuota,NodeRestriction,MutatingAdmissionWebhook,"
            "ValidatingAdmissionWebhook",
            # Logs, exec and port-forward of a real node's pods: its kubelet's serving certificate is
            # signed by the test CA; the API server is a client of the kubelet with the admin's.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pki.ca_cert}",
            f"--kubelet-client-certificate={pki.cert('admin')}", f"--kubelet-client-key={pki.key('admin')}",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki.key('sa')}",
            # The "kubernetes" Service cannot point at a loopback address; on the real node's link it
            # points at `host`, where pods reach it through kube-proxy.
            "--endpoint-reconciler-type=" + ("none" if self.host.startswith("127.") else "lease"),
            "--profiling=false", "--v=1",
        ])  # fmt: skip

        def ready() -> bool:
            proc.check_alive()
            status, _ = self.request("GET", "/readyz")
            return status == 200

        wait_for(ready, timeout=90, what="kube-apiserver /readyz")

    def _start_controllers(self) -> None:
        state, pki = self.state_dir, self.pki
        self._spawn("kube-controller-manager", [
            str(self.binaries["kube-controller-manager"]),
            f"--kubeconfig={state / 'controller-manager.kubeconfig'}",
            "--secure-port=0", "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.key('sa')}", f"--root-ca-file={pki.ca_cert}",
            f"--cluster-signing-cert-file={pki.ca_cert}", f"--cluster-signing-key-file={pki.ca_key}",
            "--controllers=*", "--v=1",
        ])  # fmt: skip
        self._spawn("kube-scheduler", [
            str(self.binaries["kube-scheduler"]),
            f"--kubeconfig={state / 'scheduler.kubeconfig'}",
            "--secure-port=0", "--leader-elect=false", "--v=1",
        ])  # fmt: skip
        key, value = KWOK_NODE_ANNOTATION
        self._spawn("kwok", [
            str(self.binaries["kwok"]),
            f"--kubeconfig={self.kubeconfig}", f"--config={STAGES_FILE}",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
            f"--cidr={POD_CIDR}", "--node-ip=10.240.0.1", "--node-lease-duration-seconds=40",
        ])  # fmt: skip
        # Namespaces are usable once the service-account controller (in KCM) creates "default" SAs.
        default_sa = "/api/v1/namespaces/default/serviceaccounts/default"
        wait_for(lambda: self._alive_and(lambda: self.get(default_sa)),
                 timeout=60, what="kube-controller-manager to create the default ServiceAccount")  # fmt: skip

    def _alive_and(self, check: Callable[[], Any]) -> Any:
        for proc in self.processes.values():
            proc.check_alive()
        return check()

    def node_ready(self, node: str) -> bool:
        obj = self.get(f"/api/v1/nodes/{node}") or {}
        conds = obj.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def _wait_nodes_ready(self, nodes: tuple[str, ...]) -> None:
        for node in nodes:
            wait_for(functools.partial(self._alive_and, functools.partial(self.node_ready, node)),
                     timeout=60, what=f"node {node} Ready")  # fmt: skip

    # -- REST helpers (admin identity)

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.cert("admin")), str(self.pki.key("admin")))
        return ctx

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPSConnection(
            self.host, self.ports["apiserver"], context=self._ssl_context(), timeout=10
        )
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = raw.decode(errors="replace")
        return resp.status, data

    def get(self, path: str) -> dict[str, Any] | None:
        status, data = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise TestEnvError(f"GET {path}: HTTP {status}: {data}")
        return dict(data)

    def create(self, path: str, body: dict[str, Any], exist_ok: bool = False) -> dict[str, Any]:
        status, data = self.request("POST", path, body)
        if status == 409 and exist_ok:
            return dict(data)
        if status not in (200, 201):
            raise TestEnvError(f"POST {path}: HTTP {status}: {data}")
        return dict(data)

    # -- public helpers

    def add_node(
        self,
        name: str,
        cpu: str = "32",
        memory: str = "256Gi",
        gpus: int = 8,
        pods: str = "110",
        labels: dict[str, str] | None = None,
        ephemeral_storage: str = "2Ti",
    ) -> dict[str, Any]:
        """Register a kwok-managed fake Node advertising cpu, memory, pods, ephemeral-storage (the
        scheduler fits pods' ephemeral-storage requests against it) and nvidia.com/gpu."""
        resources = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": ephemeral_storage,
                     GPU_RESOURCE: str(gpus)}  # fmt: skip
        key, value = KWOK_NODE_ANNOTATION
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    "nvidia.com/gpu.present": "true" if gpus else "false",
                    **(labels or {}),
                },
            },
            "spec": {},
            "status": {"capacity": resources, "allocatable": resources},
        }
        return self.create("/api/v1/nodes", node, exist_ok=True)

    def kubeconfig_for_serviceaccount(
        self, namespace: str, name: str, create: bool = True, expiration_seconds: int = 3600
    ) -> Path:
        """Kubeconfig authenticating as the ServiceAccount, with a token from the TokenRequest API."""
        if create:
            sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
            self.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", sa, exist_ok=True)
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        resp = self.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
        token = resp["status"]["token"]
        path = self.state_dir / "kubeconfigs" / f"sa-{namespace}-{name}.kubeconfig"
        path.parent.mkdir(exist_ok=True)
        return write_kubeconfig(path, self.server, self.pki.ca_cert, {"token": token})

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A `kubernetes.client.ApiClient` for the admin (or the given kubeconfig)."""
        from kubernetes import config as k8s_config

        return k8s_config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def describe(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "host": self.host,
            "ports": self.ports,
            "binaries": {k: str(v) for k, v in self.binaries.items()},
            "pids": {name: proc.pid for name, proc in self.processes.items()},
            "argv0": {name: proc.argv[0] for name, proc in self.processes.items()},
        }

    @classmethod
    def attach(cls, info: dict[str, Any]) -> ControlPlane:
        """Rebuild the handle of a control plane started by another process (hack/testenv up)."""
        state = Path(info["state_dir"])
        binaries = {k: Path(v) for k, v in info["binaries"].items()}
        cp = cls(state_dir=state, binaries=binaries, host=info.get("host", "127.0.0.1"))
        cp.ports = dict(info["ports"])
        cp.processes = attach_processes(info, state)
        return cp


# --------------------------------------------------------------------------- MinIO


@dataclass
class MinioServer:
    """A MinIO server on a fixed loopback port; stop()/start() keep the port and the data."""

    state_dir: Path
    binary: Path = field(default_factory=lambda: build.binary_paths()["minio"])
    port: int = field(default_factory=free_port)
    console_port: int = field(default_factory=free_port)
    access_key: str = field(default_factory=lambda: "a2rl-" + secrets.token_hex(6))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    process: Process | None = None
    #: Where it listens: loopback, or the host end of the real node's link (pods reach it there).
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "MINIO_CONFIG_ENV_FILE": "",
        }

    def start(self, timeout: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = Process("minio", [
            str(self.binary), "server", str(self.data_dir), "--quiet",
            "--address", f"{self.host}:{self.port}", "--console-address", f"{self.host}:{self.console_port}",
        ], self.state_dir / "minio.log", env=self.env())  # fmt: skip
        self.process.start()
        proc = self.process

        def ready() -> bool:
            proc.check_alive()
            with urllib.request.urlopen(f"{self.endpoint}/minio/health/ready", timeout=2) as resp:
                return bool(resp.status == 200)

        wait_for(ready, timeout=timeout, what="MinIO /minio/health/ready")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def is_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/minio/health/live", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def describe(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "binary": str(self.binary),
            "host": self.host,
            "port": self.port,
            "console_port": self.console_port,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "pid": self.process.pid if self.process else 0,
        }

    @classmethod
    def attach(cls, info: dict[str, Any]) -> MinioServer:
        server = cls(
            state_dir=Path(info["state_dir"]),
            binary=Path(info["binary"]),
            port=info["port"],
            console_port=info["console_port"],
            access_key=info["access_key"],
            secret_key=info["secret_key"],
            host=info.get("host", "127.0.0.1"),
        )
        server.process = Process("minio", [info["binary"]], server.state_dir / "minio.log")
        server.process.pid = info["pid"]
        return server


@contextlib.contextmanager
def running(state_dir: Path, with_minio: bool = True) -> Iterator[tuple[ControlPlane, MinioServer | None]]:
    """Context manager used by scripts: start everything, stop on exit."""
    cp = ControlPlane(state_dir / "k8s")
    minio = MinioServer(state_dir / "minio") if with_minio else None
    cp.start()
    try:
        if minio:
            minio.start()
        yield cp, minio
    finally:
        if minio:
            minio.stop()
        cp.stop()
