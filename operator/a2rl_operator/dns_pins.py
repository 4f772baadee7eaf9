"""What the names of the pods without DNS resolve to (`manifests.dns`), looked up by the operator
when it builds each pod. The workspace pod's:

- the object store's host (`AWS_ENDPOINT_URL` of the operator, which the run's Secret carries):
  the operator's own resolver (in a cluster: the cluster's DNS, so a Service name or an external
  host alike), every address it returns;
- the run's driver gateway Service (a stack run): its ClusterIP, read from the API server (the
  operator created it just before);
- `spec.llmGateway` naming an in-cluster Service: its ClusterIP (a missing or headless Service is
  not pinned: the agent cannot resolve it, and the reason is returned).

The eval and report pods' (`grading_pins`): the store's host, and each in-cluster Service a URL
their evaluation calls names (an LLM judge, a search API), by its ClusterIP.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import ENV_S3_ENDPOINT
from a2rl.errors import A2rlError
from a2rl_operator.config import OperatorConfig
from a2rl_operator.kube import Kube
from a2rl_operator.manifests.common import Body
from a2rl_operator.manifests.dns import (
    HostPin,
    endpoint_host,
    llm_gateway_service,
    service_hostnames,
    url_service,
)
from a2rl_operator.manifests.gateway import gateway_name, has_gateway

Resolver = Callable[[str], list[str]]


class PinError(A2rlError):
    """A name the workspace pod needs cannot be resolved now (the reconcile is retried)."""


def system_resolver(host: str) -> list[str]:
    """Every address the operator's resolver gives `host` (in its order, without repeats)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise PinError(f"cannot resolve the store host {host!r}: {exc}") from None
    out: list[str] = []
    for info in infos:
        ip = str(info[4][0]).split("%")[0]
        if ip not in out:
            out.append(ip)
    return out


def store_pins(config: OperatorConfig, resolve: Resolver = system_resolver) -> list[HostPin]:
    """The store host's addresses (none when the endpoint is an IP). Raises PinError."""
    host = endpoint_host(config.store_credentials.get(ENV_S3_ENDPOINT, ""))
    if host is None:
        return []
    addresses = resolve(host)
    if not addresses:
        raise PinError(f"the store host {host!r} has no address")
    return [HostPin(ip, (host,)) for ip in addresses]


def service_pins(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, kube: Kube
) -> tuple[list[HostPin], list[str]]:
    """The run's gateway Service and an in-cluster `spec.llmGateway` (notes: names left unpinned).
    Raises PinError when the run's gateway Service has no ClusterIP (it must exist by now)."""
    pins: list[HostPin] = []
    notes: list[str] = []
    namespace = body["metadata"]["namespace"]
    if has_gateway(spec):
        ip = kube.service_cluster_ip(namespace, gateway_name(body))
        if ip is None:
            raise PinError(f"the run's gateway Service {namespace}/{gateway_name(body)} has no ClusterIP")
        pins.append(HostPin(ip, service_hostnames(gateway_name(body), namespace, config.cluster_domain)))
    service = llm_gateway_service(spec.llm_gateway)
    if service is not None:
        ip = kube.service_cluster_ip(service[1], service[0])
        if ip is None:
            notes.append(f"spec.llmGateway: Service {service[1]}/{service[0]} has no ClusterIP: not pinned")
        else:
            pins.append(HostPin(ip, service_hostnames(*service, config.cluster_domain)))
    return pins, notes


def workspace_pins(
    body: Body, spec: BenchRunSpec, config: OperatorConfig, kube: Kube, resolve: Resolver = system_resolver
) -> tuple[list[HostPin], list[str]]:
    """(the pins of the workspace pod, notes on names left unpinned): `store_pins` + `service_pins`."""
    pins, notes = service_pins(body, spec, config, kube)
    return store_pins(config, resolve) + pins, notes


def grading_pins(
    urls: Iterable[str],
    namespace: str,
    config: OperatorConfig,
    kube: Kube,
    resolve: Resolver = system_resolver,
) -> tuple[list[HostPin], list[str]]:
    """(the pins of a run's eval and report pods, notes on names left unpinned): the store's host,
    and each URL of `urls` (resolved in `namespace`, the run's) that names an in-cluster Service
    with a ClusterIP. Raises PinError for the store host."""
    pins = store_pins(config, resolve)
    notes: list[str] = []
    for url in urls:
        target = url_service(url, namespace, config.cluster_domain)
        if target is None:
            continue
        ip = kube.service_cluster_ip(target.namespace, target.service)
        if ip is None:
            notes.append(f"{url}: Service {target.namespace}/{target.service} has no ClusterIP: not pinned")
        else:
            pins.append(HostPin(ip, target.hostnames))
    return pins, notes
