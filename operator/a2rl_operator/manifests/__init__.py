"""Pure builders: a BenchRun (wire dict) in, child manifests (dicts) out. No I/O."""

from __future__ import annotations

from collections.abc import Sequence

from a2rl.api.benchrun import BenchRunSpec
from a2rl.store.scoped import RunCredentials
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import Body, Manifest
from a2rl_operator.manifests.dns import HostPin
from a2rl_operator.manifests.gateway import agent_gateway_rule, gateway_children, has_gateway
from a2rl_operator.manifests.job import active_deadline_seconds, workspace_job
from a2rl_operator.manifests.network import network_policy
from a2rl_operator.manifests.rbac import role, role_binding, service_account
from a2rl_operator.manifests.secret import store_secret
from a2rl_operator.manifests.workspace import workspace_pvc


def parse_spec(body: Body) -> BenchRunSpec:
    """The typed spec (the API server has validated and defaulted it already)."""
    return BenchRunSpec.model_validate(body["spec"])


def workspace_children(
    body: Body,
    config: OperatorConfig,
    credentials: RunCredentials | None = None,
    gateway_token: str | None = None,
) -> list[Manifest]:
    """Every child of the run but the workspace Job, in creation order; `credentials`: the run's
    own store keys for its `<run>-store` Secret (None: the operator's); `gateway_token`: the per-run
    token of a stack run's driver gateway (required for one)."""
    spec = parse_spec(body)
    gateway: list[Manifest] = []
    rule: Manifest | None = None
    if has_gateway(spec):
        if not gateway_token:
            raise ValueError("a stack run needs its gateway token")
        deadline = active_deadline_seconds(spec, config)
        gateway = gateway_children(body, spec, config, gateway_token, deadline)
        rule = agent_gateway_rule(body)
    return [
        workspace_pvc(body, config, spec),
        service_account(body),
        role(body),
        role_binding(body),
        network_policy(body, spec.llm_gateway, config, rule),
        store_secret(body, spec, config, credentials),
        *gateway,
    ]


def children(
    body: Body,
    config: OperatorConfig,
    credentials: RunCredentials | None = None,
    gateway_token: str | None = None,
    pins: Sequence[HostPin] = (),
) -> list[Manifest]:
    """`workspace_children`, then the workspace Job (last: it needs all the others) with `pins`,
    the addresses its names resolve to (`manifests.dns`; the operator resolves them once the
    other children exist: the gateway Service's ClusterIP)."""
    spec = parse_spec(body)
    return [
        *workspace_children(body, config, credentials, gateway_token),
        workspace_job(body, spec, config, pins),
    ]


__all__ = ["Body", "Manifest", "children", "parse_spec", "workspace_children"]
