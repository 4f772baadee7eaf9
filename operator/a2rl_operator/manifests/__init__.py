"""Pure builders: a BenchRun (wire dict) in, child manifests (dicts) out. No I/O."""

from __future__ import annotations

from a2rl.api.benchrun import BenchRunSpec
from a2rl.store.scoped import RunCredentials
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.common import Body, Manifest
from a2rl_operator.manifests.gateway import agent_gateway_rule, gateway_children, has_gateway
from a2rl_operator.manifests.job import active_deadline_seconds, workspace_job
from a2rl_operator.manifests.network import network_policy
from a2rl_operator.manifests.rbac import role, role_binding, service_account
from a2rl_operator.manifests.secret import store_secret
from a2rl_operator.manifests.workspace import workspace_pvc


def parse_spec(body: Body) -> BenchRunSpec:
    """The typed spec (the API server has validated and defaulted it already)."""
    return BenchRunSpec.model_validate(body["spec"])


def children(
    body: Body,
    config: OperatorConfig,
    credentials: RunCredentials | None = None,
    gateway_token: str | None = None,
) -> list[Manifest]:
    """Every child of the run, in creation order (the Job last: it needs all the others);
    `credentials`: the run's own store keys for its `<run>-store` Secret (None: the operator's);
    `gateway_token`: the per-run token of a stack run's driver gateway (required for one)."""
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
        workspace_job(body, spec, config),
    ]


__all__ = ["Body", "Manifest", "children", "parse_spec"]
