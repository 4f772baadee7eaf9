"""The workspace pod's name resolution: no DNS server at all, the few names it needs pinned.

Recursive DNS is a tunnel through any NetworkPolicy: a pod that may ask the cluster's resolver
(which recurses to the internet) can fetch answers from, and send data to, any name server in the
world in its queries. So the workspace pod (agent and recorder share its network namespace) gets:

- `dnsPolicy: None` with a `dnsConfig` whose only name server is 127.0.0.1 in the pod's own network
  namespace, where no resolver runs: a name that is not pinned fails at once and no query leaves
  the pod (its NetworkPolicy has no port-53 rule either). No search domains.
- `hostAliases`: each name its containers use, with the address the operator resolved when it
  built the pod (`a2rl_operator.dns_pins`): the object store's host (`AWS_ENDPOINT_URL`, when it
  is a name), the run's driver gateway Service (a stack run) and an in-cluster `spec.llmGateway`
  Service (their ClusterIPs). The kubelet writes them into the pod's `/etc/hosts`, which every
  resolver reads before DNS. The API server needs no name: `KUBERNETES_SERVICE_HOST` is an IP.

The run's eval and report pods (they parse untrusted model files) get the same: no resolver, the
store's host and the in-cluster Services their evaluation calls (an LLM judge, a search API:
`url_service`) pinned; their NetworkPolicy has no port-53 rule either. Only the gateway pod, which
calls the provider by its public name, keeps a resolver.

Pinned addresses are fixed for the pod's life (the NetworkPolicy pins the store's CIDR anyway).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from a2rl_operator.manifests.common import Manifest
from a2rl_operator.manifests.network import GatewayError, parse_gateway

#: The pod's only name server: its own loopback, where nothing answers.
NO_RESOLVER = "127.0.0.1"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class HostPin:
    """One `/etc/hosts` line of the pod: an address and the names that resolve to it."""

    ip: str
    hostnames: tuple[str, ...]


def endpoint_host(endpoint: str) -> str | None:
    """The host name of an S3 endpoint (`http://minio.store:9000`, `minio.store:9000`); None when
    it is an IP address (nothing to resolve) or empty."""
    text = endpoint.strip()
    if not text:
        return None
    host = urlsplit(text if "://" in text else f"http://{text}").hostname
    if not host:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host.rstrip(".").lower()
    return None


def service_hostnames(
    service: str, namespace: str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
) -> tuple[str, ...]:
    """The names a pod may use for a Service of another namespace without search domains."""
    return (
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    )


def llm_gateway_service(text: str | None) -> tuple[str, str] | None:
    """(service, namespace) when `spec.llmGateway` names an in-cluster Service; None for an IP/CIDR."""
    if not text:
        return None
    try:
        peer = parse_gateway(text)
    except GatewayError:
        return None
    if peer.namespace is None:
        return None
    host = text.strip().rpartition(":")[0] if peer.port is not None else text.strip()
    return host.split(".")[0], peer.namespace


@dataclass(frozen=True)
class UrlService:
    """The in-cluster Service a URL's host names, and the names to pin for it."""

    service: str
    namespace: str
    hostnames: tuple[str, ...]


def url_service(url: str, namespace: str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> UrlService | None:
    """The Service `url`'s host names (`<service>` of `namespace`, `<service>.<namespace>[.svc[.
    <domain>]]`); None for an IP address or any other host (which no pod of ours can resolve)."""
    host = (urlsplit(url.strip()).hostname or "").rstrip(".").lower()
    if not host:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return None
    bare = "." not in host
    try:
        peer = parse_gateway(f"{host}.{namespace}" if bare else host)
    except GatewayError:
        return None
    if peer.namespace is None:
        return None
    service = host.split(".")[0]
    names = service_hostnames(service, peer.namespace, cluster_domain)
    return UrlService(service, peer.namespace, (host, *names) if host not in names else names)


def pod_dns(pins: Sequence[HostPin]) -> Manifest:
    """The pod spec's DNS fields: no resolver, `pins` in `/etc/hosts` (names merged per address)."""
    by_ip: dict[str, list[str]] = {}
    for pin in pins:
        names = by_ip.setdefault(pin.ip, [])
        names += [n for n in pin.hostnames if n not in names]
    fields: Manifest = {"dnsPolicy": "None", "dnsConfig": {"nameservers": [NO_RESOLVER]}}
    if by_ip:
        fields["hostAliases"] = [{"ip": ip, "hostnames": names} for ip, names in by_ip.items()]
    return fields
