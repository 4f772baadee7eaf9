"""The run's NetworkPolicy: no ingress; egress only to the store, the API server, the LLM gateway
(`spec.llmGateway`) and, for a stack run, its own driver gateway pod (`manifests.gateway`).

The policy selects the workspace pod; its containers share one network namespace, so the
agent and the recorder have the same egress (the agent has no API token and no store keys).
No DNS: recursive DNS reaches every name server in the world; the pod's names are pinned in its
`/etc/hosts` instead (`manifests.dns`). `DNS_RULE` is for the gateway pod alone.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from a2rl.constants import COMPONENT_AGENT, LABEL_COMPONENT, LABEL_RUN_UID
from a2rl_operator.config import Egress, OperatorConfig
from a2rl_operator.manifests.common import Body, Manifest, object_meta, workspace_name

NS_NAME_LABEL = "kubernetes.io/metadata.name"


class GatewayError(ValueError):
    """`spec.llmGateway` cannot be expressed as a NetworkPolicy peer."""


@dataclass(frozen=True)
class GatewayPeer:
    """Either an IP block or every pod of a namespace (an in-cluster Service), with a port."""

    cidr: str | None
    namespace: str | None
    port: int | None


def parse_gateway(text: str) -> GatewayPeer:
    """`10.0.0.5`, `10.0.0.0/24`, `10.0.0.5:8000` or `<service>.<namespace>[.svc[.cluster.local]][:port]`.

    NetworkPolicy has no host names: an in-cluster Service is reached by allowing its namespace.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or "/" in port_text or not port_text.isdigit():
        host, port_text = text.strip(), ""
    port = int(port_text) if port_text else None
    if port is not None and not 1 <= port <= 65535:
        raise GatewayError(f"port {port} out of range")
    try:
        return GatewayPeer(str(ipaddress.ip_network(host, strict=False)), None, port)
    except ValueError:
        pass
    parts = host.split(".")
    in_cluster = len(parts) == 2 or (len(parts) >= 3 and parts[2] == "svc")
    if in_cluster and all(p and p.replace("-", "").isalnum() and p == p.lower() for p in parts[:2]):
        return GatewayPeer(None, parts[1], port)
    raise GatewayError(
        f"{text!r} is neither an IP/CIDR nor an in-cluster Service name (<service>.<namespace>[:port])"
    )


def ip_rule(egress: Egress) -> Manifest:
    rule: Manifest = {"to": [{"ipBlock": {"cidr": egress.cidr}}]}
    if egress.port is not None:
        rule["ports"] = [{"protocol": "TCP", "port": egress.port}]
    return rule


def gateway_rule(peer: GatewayPeer) -> Manifest:
    if peer.cidr is not None:
        return ip_rule(Egress(peer.cidr, peer.port))
    rule: Manifest = {"to": [{"namespaceSelector": {"matchLabels": {NS_NAME_LABEL: peer.namespace}}}]}
    if peer.port is not None:
        rule["ports"] = [{"protocol": "TCP", "port": peer.port}]
    return rule


DNS_RULE: Manifest = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {NS_NAME_LABEL: "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def network_policy(
    body: Body, gateway: str | None, config: OperatorConfig, driver_gateway: Manifest | None = None
) -> Manifest:
    """Raises GatewayError when `gateway` is not expressible (the run is then not accepted).
    `driver_gateway`: the rule to the run's own driver gateway pod (a stack run), added last."""
    egress = [ip_rule(e) for e in config.store_egress]
    egress += [ip_rule(e) for e in config.apiserver_egress]
    if gateway:
        egress.append(gateway_rule(parse_gateway(gateway)))
    if driver_gateway is not None:
        egress.append(driver_gateway)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(body, workspace_name(body), COMPONENT_AGENT),
        "spec": {
            "podSelector": {
                "matchLabels": {LABEL_RUN_UID: body["metadata"]["uid"], LABEL_COMPONENT: COMPONENT_AGENT}
            },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }
