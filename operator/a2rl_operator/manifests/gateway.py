"""The run's driver gateway in a cluster (a run with `spec.agent.stack`; docs/operator.md, "The
driver gateway of a stack run"): its own pod, never a container of the workspace pod.

The workspace pod's containers share one network namespace, so a gateway sidecar would give the
agent the gateway's egress to the upstream provider. Instead each stack run gets:

- `<run>-gateway-token` (Secret): the per-run token (worthless anywhere but this gateway),
  `secretKeyRef` of the gateway container and of the agent container;
- `<run>-gateway` (Job, one pod, `restartPolicy: Never`): `a2rl gateway serve` on 0.0.0.0:8080,
  the upstream key as a file from `spec.driver.secretRef` (mounted in this pod only), the run's
  store Secret (it writes `driver/…` under the run's prefix, with the run's scoped keys). A
  gateway that dies is not restarted: a new one would start the budget's totals from zero;
- `<run>-gateway` (Service): the agent's URL of it;
- `<run>-gateway` (NetworkPolicy): ingress only from the run's workspace pod on the gateway port
  (and from the pods that scrape `/metrics`, `--gateway-metrics-from`); egress only to DNS, the
  store and the upstream (`spec.driver.baseUrl`);
- one egress rule in the workspace pod's policy (`agent_gateway_rule`): the gateway pod, its port.

The agent container of a stack run gets a command generated here (`stack_command`): the launcher
`a2rl.contracts.stack_launch` run by the image's Python (the stack images carry a2rl), which
starts the stack's invocation pointed at the gateway Service: the images stay plain.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import (
    CLUSTER_GATEWAY_PORT,
    COMPONENT_AGENT,
    COMPONENT_GATEWAY,
    ENV_AGENT_GATEWAY_TOKEN,
    ENV_GATEWAY_TOKEN,
    LABEL_COMPONENT,
    LABEL_RUN_UID,
)
from a2rl.contracts.env import gateway_contract_env
from a2rl.contracts.stack_launch import LaunchParams, launch_argv
from a2rl.store.layout import RunLayout
from a2rl.tracing.context import pod_trace_env
from a2rl_operator.config import MetricsScraper, OperatorConfig
from a2rl_operator.manifests.common import (
    Body,
    Manifest,
    child_name,
    guaranteed,
    object_meta,
    pod_security_context,
    restricted_security_context,
)
from a2rl_operator.manifests.grading_network import UrlPeerError, url_peer
from a2rl_operator.manifests.network import DNS_RULE, gateway_rule, ip_rule
from a2rl_operator.manifests.pod_defaults import apply_pod_defaults
from a2rl_operator.manifests.secret import store_env_from

SUFFIX_GATEWAY = "gateway"
SUFFIX_GATEWAY_TOKEN = "gateway-token"
GATEWAY_CONTAINER = "gateway"
TOKEN_KEY = "token"
KEY_VOLUME = "driver-key"
KEY_DIR = "/var/run/secrets/driver"
KEY_FILE = f"{KEY_DIR}/key"
SCRATCH_VOLUME = "scratch"
SCRATCH_MOUNT = "/tmp"
#: Where the stack images install the stack (`images/agent-<stack>/Dockerfile`: `a2rl run`'s
#: layout, `<cache>/agents/<stack>-<version>`, with the cache at /opt/a2rl-cache).
STACK_INSTALL_ROOT = "/opt/a2rl-cache/agents"
#: Private, link-local, CGNAT and loopback ranges: a public upstream (a host name NetworkPolicy
#: cannot name) is allowed as "the internet on the URL's port", never the cluster's own ranges.
NON_PUBLIC_V4 = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "127.0.0.0/8",
)
NON_PUBLIC_V6 = ("fc00::/7", "fe80::/10", "::1/128")
DEFAULT_PORTS = {"http": 80, "https": 443}
#: How long the agent's launcher waits for the gateway to answer `/health` before it starts the
#: stack anyway (the stack then reports the connection error itself).
GATEWAY_WAIT_S = 120


def has_gateway(spec: BenchRunSpec) -> bool:
    """A run with an agent stack has a driver gateway."""
    return spec.agent.stack is not None and spec.driver is not None


def gateway_name(body: Body) -> str:
    """Name of the gateway Job, Service and NetworkPolicy."""
    return child_name(body["metadata"]["name"], SUFFIX_GATEWAY)


def gateway_token_secret_name(body: Body) -> str:
    return child_name(body["metadata"]["name"], SUFFIX_GATEWAY_TOKEN)


def gateway_url(body: Body) -> str:
    """The gateway Service as the agent reaches it (the cluster's DNS search path completes it)."""
    return f"http://{gateway_name(body)}.{body['metadata']['namespace']}.svc:{CLUSTER_GATEWAY_PORT}"


def new_gateway_token() -> str:
    """A fresh per-run token (the format of `a2rl_gateway.new_run_token`)."""
    return "a2rl-run-" + secrets.token_urlsafe(32)


def gateway_pod_labels(body: Body) -> dict[str, str]:
    return {LABEL_RUN_UID: body["metadata"]["uid"], LABEL_COMPONENT: COMPONENT_GATEWAY}


def _agent_pod_labels(body: Body) -> dict[str, str]:
    return {LABEL_RUN_UID: body["metadata"]["uid"], LABEL_COMPONENT: COMPONENT_AGENT}


def _token_ref(body: Body) -> Manifest:
    return {"secretKeyRef": {"name": gateway_token_secret_name(body), "key": TOKEN_KEY}}


def gateway_token_secret(body: Body, token: str) -> Manifest:
    """`<run>-gateway-token`: read by the gateway and the agent container (`secretKeyRef`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(body, gateway_token_secret_name(body), COMPONENT_GATEWAY),
        "type": "Opaque",
        "immutable": True,
        "stringData": {TOKEN_KEY: token},
    }


def gateway_env(body: Body, spec: BenchRunSpec) -> list[Manifest]:
    """`a2rl gateway serve`'s configuration (`a2rl_gateway.GatewayConfig.from_env`); the store URI
    and keys come from the run's store Secret (`envFrom`), the upstream key from its file."""
    assert spec.driver is not None
    meta = body["metadata"]
    values = gateway_contract_env(
        provider=spec.driver.provider,
        base_url=spec.driver.base_url,
        model=spec.driver.model,
        host="0.0.0.0",
        port=CLUSTER_GATEWAY_PORT,
        run_prefix=RunLayout(meta["namespace"], meta["name"], meta["uid"]).prefix,
        driver_tokens=spec.budget.driver_tokens,
        driver_cost_usd=spec.budget.driver_cost_usd,
        key_source=None if spec.driver.secret_ref is None else f"file:{KEY_FILE}",
    )
    values.update({"HOME": SCRATCH_MOUNT, "TMPDIR": SCRATCH_MOUNT})
    env: list[Manifest] = [{"name": k, "value": v} for k, v in values.items()]
    env.append({"name": ENV_GATEWAY_TOKEN, "valueFrom": _token_ref(body)})
    return env + pod_trace_env(meta)


def gateway_job(body: Body, spec: BenchRunSpec, config: OperatorConfig, deadline_s: int) -> Manifest:
    """`<run>-gateway`: one pod running `a2rl gateway serve`; `deadline_s` its Job's deadline,
    except for a queued run (`spec.queueName`): the gateway is not queued, and the time the
    workspace waits for Kueue is unknown, so it serves until the BenchRun goes."""
    volumes: list[Manifest] = [{"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": "1Gi"}}]
    mounts: list[Manifest] = [{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT}]
    assert spec.driver is not None
    if spec.driver.secret_ref is not None:  # the upstream key: this pod only, a file
        ref = spec.driver.secret_ref
        volumes.append(
            {
                "name": KEY_VOLUME,
                "secret": {
                    "secretName": ref.name,
                    "items": [{"key": ref.key, "path": "key"}],
                    "defaultMode": 0o440,
                },
            }
        )
        mounts.append({"name": KEY_VOLUME, "mountPath": KEY_DIR, "readOnly": True})
    container: Manifest = {
        "name": GATEWAY_CONTAINER,
        "image": config.recorder_image,  # it carries the whole a2rl CLI, the gateway included
        "command": ["a2rl", "gateway", "serve"],
        "env": gateway_env(body, spec),
        "envFrom": store_env_from(body, spec),
        "ports": [{"name": "http", "containerPort": CLUSTER_GATEWAY_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": CLUSTER_GATEWAY_PORT},
            "periodSeconds": 2,
            "failureThreshold": 3,
        },
        "resources": guaranteed(
            {"cpu": config.gateway_cpu, "memory": config.gateway_memory, "ephemeral-storage": "2Gi"}
        ),
        "securityContext": {**restricted_security_context(), "readOnlyRootFilesystem": True},
        "volumeMounts": mounts,
    }
    pod_spec: Manifest = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": volumes,
    }
    meta = object_meta(body, gateway_name(body), COMPONENT_GATEWAY)
    job_spec: Manifest = {
        "backoffLimit": 0,
        "template": {"metadata": {"labels": meta["labels"]}, "spec": pod_spec},
    }
    if not spec.queue_name:
        job_spec["activeDeadlineSeconds"] = deadline_s
    job: Manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}
    return apply_pod_defaults(job, config.pod_defaults, "gateway")


def gateway_service(body: Body) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(body, gateway_name(body), COMPONENT_GATEWAY),
        "spec": {
            "type": "ClusterIP",
            "selector": gateway_pod_labels(body),
            "ports": [
                {
                    "name": "http",
                    "port": CLUSTER_GATEWAY_PORT,
                    "targetPort": CLUSTER_GATEWAY_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def upstream_rules(spec: BenchRunSpec, namespace: str) -> list[Manifest]:
    """Egress to the upstream of `spec.driver`: its IP or in-cluster Service exactly; a public
    host name (the providers' APIs) as every public address on the URL's port.

    A two-label host (`name.tld`) is both: as for the judge, `<service>.<namespace>` is an
    in-cluster Service, but `openrouter.ai` is a public API — the pod's resolver tries the
    cluster's search domains first and falls back to public DNS, so both peers are allowed."""
    assert spec.driver is not None
    url = spec.driver.base_url or "https://"  # the providers' own APIs: public, https
    rules: list[Manifest] = []
    if spec.driver.base_url:
        try:
            peer = url_peer(url, namespace)
        except UrlPeerError:
            pass
        else:
            rules.append(gateway_rule(peer))
            if peer.cidr is not None or not _two_label_host(url):
                return rules
    parts = urlsplit(url)
    port = parts.port or DEFAULT_PORTS.get(parts.scheme, 443)
    rules.append(
        {
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(NON_PUBLIC_V4)}},
                {"ipBlock": {"cidr": "::/0", "except": list(NON_PUBLIC_V6)}},
            ],
            "ports": [{"protocol": "TCP", "port": port}],
        }
    )
    return rules


def _two_label_host(url: str) -> bool:
    return len((urlsplit(url).hostname or "").rstrip(".").split(".")) == 2


def metrics_ingress_rule(scraper: MetricsScraper) -> Manifest:
    """Ingress on the gateway port from the scraper's pods (`--gateway-metrics-from`): for
    `GET /metrics`; the relay answers them nothing without the run's token."""
    peer: Manifest = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": scraper.namespace}},
        "podSelector": {"matchLabels": dict(scraper.pod_labels)},
    }
    return {"from": [peer], "ports": [{"protocol": "TCP", "port": CLUSTER_GATEWAY_PORT}]}


def gateway_network_policy(body: Body, spec: BenchRunSpec, config: OperatorConfig) -> Manifest:
    """`<run>-gateway`: ingress from the run's workspace pod on the gateway port (and from the
    metrics scrapers the operator was given); egress to DNS, the store and the upstream only (no
    API server: the pod has no token)."""
    egress = [DNS_RULE]
    egress += [ip_rule(e) for e in config.store_egress]
    egress += upstream_rules(spec, body["metadata"]["namespace"])
    ingress: list[Manifest] = [
        {
            "from": [{"podSelector": {"matchLabels": _agent_pod_labels(body)}}],
            "ports": [{"protocol": "TCP", "port": CLUSTER_GATEWAY_PORT}],
        }
    ]
    ingress += [metrics_ingress_rule(s) for s in config.gateway_metrics_from]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(body, gateway_name(body), COMPONENT_GATEWAY),
        "spec": {
            "podSelector": {"matchLabels": gateway_pod_labels(body)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def agent_gateway_rule(body: Body) -> Manifest:
    """The one egress rule a stack run's workspace policy gains: its gateway pod, its port."""
    return {
        "to": [{"podSelector": {"matchLabels": gateway_pod_labels(body)}}],
        "ports": [{"protocol": "TCP", "port": CLUSTER_GATEWAY_PORT}],
    }


# --- the agent container of a stack run -----------------------------------------------------------


def stack_command(body: Body, spec: BenchRunSpec) -> list[str]:
    """The agent container's command: the launcher and what it needs (no secret: the token comes
    from the environment, `stack_env`)."""
    assert spec.agent.stack is not None and spec.driver is not None
    params = LaunchParams(
        stack=spec.agent.stack,
        provider=spec.driver.provider,
        model=spec.driver.model,
        gateway=gateway_url(body),
        install_dir=f"{STACK_INSTALL_ROOT}/{spec.agent.stack}-{spec.agent.stack_version_or_default}",
        mode=spec.agent.mode,
        budget_s=spec.budget.wall_time_seconds,
        max_submissions=spec.budget.max_submissions,
        token_env=ENV_AGENT_GATEWAY_TOKEN,
        gateway_wait_s=GATEWAY_WAIT_S,
    )
    return launch_argv(params)


def stack_env(body: Body) -> list[Manifest]:
    """The per-run token for the launcher (it hands it to the stack in the stack's own variables)."""
    return [{"name": ENV_AGENT_GATEWAY_TOKEN, "valueFrom": _token_ref(body)}]


def gateway_children(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, token: str, deadline_s: int
) -> list[Manifest]:
    """The gateway's objects, in creation order (the token Secret first: both pods reference it);
    `deadline_s`: the gateway Job's, the workspace Job's backstop (it serves no longer)."""
    return [
        gateway_token_secret(body, token),
        gateway_network_policy(body, spec, config),
        gateway_service(body),
        gateway_job(body, spec, config, deadline_s),
    ]
