"""The run's grading NetworkPolicy: what its eval and report pods may reach.

One policy per run (`<run>-grading`, owned by the BenchRun) selects every eval pod and the report
pod of the run. No ingress; egress only to the store (`--store-egress`) and, for a task
scored by an LLM judge or a search API (`Task.endpoint_env`), those services' URLs: the run's
`spec.evaluation.judge.baseUrl`, else the operator's forwarded `A2RL_JUDGE_BASE_URL` /
`A2RL_SEARCH_URL`. These pods have no ServiceAccount token: no API-server egress. No DNS either:
the names they use are pinned in their `/etc/hosts` (`manifests.dns`).

A URL's host becomes a NetworkPolicy peer as `spec.llmGateway` does (`network.parse_gateway`):
an IP address is an `ipBlock` on the URL's port (explicit, or 80/443 by scheme); an in-cluster
Service (`<service>.<namespace>[.svc[.cluster.local]]`, or `<service>` of the run's own
namespace) is every pod of its namespace on any port (a Service's port is not its pods' port).
Any other host name cannot be expressed (NetworkPolicy has no host names): `UrlPeerError`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from a2rl.constants import COMPONENT_EVAL, COMPONENT_REPORT, LABEL_COMPONENT, LABEL_RUN_UID
from a2rl_operator.config import OperatorConfig
from a2rl_operator.grading.config import ENDPOINT_ENV, GradingConfig
from a2rl_operator.manifests.common import Body, Manifest, child_name, object_meta
from a2rl_operator.manifests.network import (
    GatewayError,
    GatewayPeer,
    gateway_rule,
    ip_rule,
    parse_gateway,
)

SUFFIX_GRADING = "grading"
DEFAULT_PORTS = {"http": 80, "https": 443}


class UrlPeerError(ValueError):
    """A service URL whose host cannot be a NetworkPolicy peer."""


def grading_policy_name(body: Body) -> str:
    return child_name(body["metadata"]["name"], SUFFIX_GRADING)


def url_peer(url: str, namespace: str) -> GatewayPeer:
    """The peer the pods of `namespace` reach `url` at (see the module's docstring)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise UrlPeerError(f"{url!r} is not an http(s) URL")
    host = parts.hostname
    try:
        explicit = parts.port
    except ValueError as exc:
        raise UrlPeerError(f"{url!r}: {exc}") from None
    try:
        cidr = str(ipaddress.ip_network(host))
    except ValueError:
        pass
    else:
        return GatewayPeer(cidr, None, explicit or DEFAULT_PORTS[parts.scheme])
    name = host.rstrip(".").lower()
    if "." not in name:
        name = f"{name}.{namespace}"  # a Service of the pod's own namespace
    try:
        peer = parse_gateway(name)
    except GatewayError:
        peer = None
    if peer is None or peer.namespace is None:
        raise UrlPeerError(
            f"host {host!r} of {url!r} cannot be allowed by a NetworkPolicy: use an IP address or an "
            "in-cluster Service (<service>.<namespace>[.svc.cluster.local]), e.g. a proxy to it"
        )
    return GatewayPeer(None, peer.namespace, None)


def endpoint_urls(endpoint_env: Iterable[str], eval_env: Mapping[str, str]) -> list[str]:
    """The URLs the evaluation calls: `eval_env`'s values of the task's `endpoint_env` names."""
    return [eval_env[k].strip() for k in endpoint_env if eval_env.get(k, "").strip()]


def egress_problems(grading: GradingConfig) -> list[str]:
    """The operator's forwarded service URLs the eval pods' NetworkPolicy cannot allow (host names)."""
    problems = []
    for name, url in grading.eval_env.items():
        if name in ENDPOINT_ENV:
            try:
                url_peer(url, "default")
            except UrlPeerError as exc:
                problems.append(f"{name}: {exc}")
    return problems


def grading_network_policy(body: Body, urls: Iterable[str], config: OperatorConfig) -> Manifest:
    """Raises UrlPeerError when one of `urls` is not expressible."""
    namespace = body["metadata"]["namespace"]
    egress: list[Manifest] = [ip_rule(e) for e in config.store_egress]
    for url in urls:
        rule = gateway_rule(url_peer(url, namespace))
        if rule not in egress:
            egress.append(rule)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(body, grading_policy_name(body)),
        "spec": {
            "podSelector": {
                "matchLabels": {LABEL_RUN_UID: body["metadata"]["uid"]},
                "matchExpressions": [
                    {"key": LABEL_COMPONENT, "operator": "In", "values": [COMPONENT_EVAL, COMPONENT_REPORT]}
                ],
            },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }
