"""A stack run's driver gateway in a cluster: its pod, Service, token Secret and NetworkPolicies
(pure builders), the agent container's generated command (run for real against a fake stack),
and the driver budget in the run's conditions and status."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from a2rl_gateway.config import GatewayConfig
from a2rl_operator import driver_usage
from a2rl_operator import status as st
from a2rl_operator.config import Egress, MetricsScraper, OperatorConfig, parse_metrics_scraper
from a2rl_operator.manifests import children, parse_spec
from a2rl_operator.manifests.gateway import STACK_INSTALL_ROOT, gateway_url, upstream_rules

from a2rl.api.benchrun import BenchRunStatus
from a2rl.constants import (
    COND_AGENT_FINISHED,
    COND_SUCCEEDED,
    ENV_AGENT_GATEWAY_TOKEN,
    ENV_GATEWAY_KEY_SOURCE,
    ENV_GATEWAY_TOKEN,
    REASON_DRIVER_BUDGET_EXHAUSTED,
)
from a2rl.errors import A2rlError
from a2rl.records.driver import DriverBudgetState, DriverSummary
from a2rl.stacks import STACKS, UPSTREAM_KEY_ENV
from tests.support.pss import restricted_violations

UID = "9d1c2b3a-aaaa-bbbb-cccc-ddddeeeeffff"
TOKEN = "a2rl-run-" + "t" * 43
CONFIG = OperatorConfig(
    store_uri="s3://runs/a2rl",
    store_credentials={"AWS_ACCESS_KEY_ID": "ak", "AWS_SECRET_ACCESS_KEY": "sk"},
    store_egress=(Egress("10.0.0.9/32", 9000),),
    apiserver_egress=(Egress("10.96.0.1/32", 443),),
)


def stack_run(base_url: str | None = None, **budget: Any) -> dict[str, Any]:
    driver: dict[str, Any] = {
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "secretRef": {"name": "anthropic-key", "key": "api-key"},
    }
    if base_url:
        driver["baseUrl"] = base_url
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "cc", "namespace": "team-a", "uid": UID, "generation": 1},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": {"stack": "claude-code"},
            "driver": driver,
            "budget": {"wallTimeSeconds": 600, "graceSeconds": 30, **budget},
        },
    }


def objects(run: dict[str, Any], config: OperatorConfig = CONFIG) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in children(run, config, gateway_token=TOKEN)}


def podparse_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = podparse_spec(job)
    return [*spec.get("initContainers", []), *spec["containers"]]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_a_stack_run_gets_a_gateway_job_service_secret_and_policy_before_the_workspace_job() -> None:
    objs = children(stack_run(), CONFIG, gateway_token=TOKEN)
    assert [(o["kind"], o["metadata"]["name"]) for o in objs][-5:] == [
        ("Secret", "cc-gateway-token"),
        ("NetworkPolicy", "cc-gateway"),
        ("Service", "cc-gateway"),
        ("Job", "cc-gateway"),
        ("Job", "cc-workspace"),
    ]
    for obj in objs:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == UID
    # A run without a stack has none of it.
    plain = stack_run()
    plain["spec"]["agent"] = {"image": "agent:1", "command": ["python", "-m", "agent"]}
    plain["spec"].pop("driver")
    assert not any("gateway" in o["metadata"]["name"] for o in children(plain, CONFIG))


def test_the_upstream_key_is_mounted_in_the_gateway_pod_only() -> None:
    objs = objects(stack_run())
    gateway, workspace = objs[("Job", "cc-gateway")], objs[("Job", "cc-workspace")]
    (container,) = containers(gateway)
    env = {e["name"]: e for e in container["env"]}
    assert env[ENV_GATEWAY_KEY_SOURCE]["value"] == "file:/var/run/secrets/driver/key"
    key_volumes = [v for v in podparse_spec(gateway)["volumes"] if "secret" in v]
    assert key_volumes == [
        {
            "name": "driver-key",
            "secret": {
                "secretName": "anthropic-key",
                "items": [{"key": "api-key", "path": "key"}],
                "defaultMode": 0o440,
            },
        }
    ]
    assert {"name": "driver-key", "mountPath": "/var/run/secrets/driver", "readOnly": True} in container[
        "volumeMounts"
    ]
    # Nowhere in the workspace pod: not a volume, not an env reference, not a word.
    assert "anthropic-key" not in json.dumps(workspace)
    # The gateway writes driver/ records with the run's store Secret, reads its token from its own.
    assert container["envFrom"] == [{"secretRef": {"name": "cc-store"}}]
    assert env[ENV_GATEWAY_TOKEN]["valueFrom"] == {
        "secretKeyRef": {"name": "cc-gateway-token", "key": "token"}
    }
    assert env["A2RL_GATEWAY_HOST"]["value"] == "0.0.0.0"
    assert env["A2RL_RUN_PREFIX"]["value"] == f"team-a/cc-{UID}"
    assert container["command"] == ["a2rl", "gateway", "serve"]
    assert objs[("Secret", "cc-gateway-token")]["stringData"] == {"token": TOKEN}


def test_gateway_pod_is_restricted_never_restarts_and_serves_no_longer_than_the_workspace() -> None:
    objs = objects(stack_run(driverTokens=1000, driverCostUSD=2.5))
    gateway, workspace = objs[("Job", "cc-gateway")], objs[("Job", "cc-workspace")]
    assert restricted_violations(podparse_spec(gateway)) == []
    assert podparse_spec(gateway)["restartPolicy"] == "Never" and gateway["spec"]["backoffLimit"] == 0
    assert podparse_spec(gateway)["automountServiceAccountToken"] is False
    assert gateway["spec"]["activeDeadlineSeconds"] == workspace["spec"]["activeDeadlineSeconds"]
    env = {e["name"]: e.get("value") for e in containers(gateway)[0]["env"]}
    assert env["A2RL_DRIVER_TOKENS"] == "1000" and env["A2RL_DRIVER_COST_USD"] == "2.5"
    # A run waiting in a Kueue queue: the gateway is not queued, so no deadline runs out meanwhile.
    queued = stack_run()
    queued["spec"]["queueName"] = "gpu"
    queued_gateway = objects(queued)[("Job", "cc-gateway")]
    assert "activeDeadlineSeconds" not in queued_gateway["spec"]
    assert (
        "suspend" not in queued_gateway["spec"]
        and objects(queued)[("Job", "cc-workspace")]["spec"]["suspend"]
    )


def test_service_selects_the_gateway_pod_and_not_the_workspace_pod() -> None:
    objs = objects(stack_run())
    service = objs[("Service", "cc-gateway")]
    gw_labels = objs[("Job", "cc-gateway")]["spec"]["template"]["metadata"]["labels"]
    ws_labels = objs[("Job", "cc-workspace")]["spec"]["template"]["metadata"]["labels"]
    assert selects({"matchLabels": service["spec"]["selector"]}, gw_labels)
    assert not selects({"matchLabels": service["spec"]["selector"]}, ws_labels)
    assert service["spec"]["ports"][0]["port"] == 8080
    assert gateway_url(stack_run()) == "http://cc-gateway.team-a.svc:8080"


def test_agent_policy_gains_only_the_gateway_and_the_gateway_policy_admits_only_the_agent() -> None:
    objs = objects(stack_run())
    plain = stack_run()
    plain["spec"]["agent"] = {"image": "agent:1", "command": ["a"]}
    plain["spec"].pop("driver")
    before = next(o for o in children(plain, CONFIG) if o["kind"] == "NetworkPolicy")
    after = objs[("NetworkPolicy", "cc-workspace")]
    added = [r for r in after["spec"]["egress"] if r not in before["spec"]["egress"]]
    gw_labels = objs[("Job", "cc-gateway")]["spec"]["template"]["metadata"]["labels"]
    ws_labels = objs[("Job", "cc-workspace")]["spec"]["template"]["metadata"]["labels"]
    (rule,) = added
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    (peer,) = rule["to"]
    assert set(peer) == {"podSelector"} and selects(peer["podSelector"], gw_labels)
    assert after["spec"]["ingress"] == [] and after["spec"]["podSelector"] == before["spec"]["podSelector"]

    policy = objs[("NetworkPolicy", "cc-gateway")]
    assert selects(policy["spec"]["podSelector"], gw_labels)
    assert not selects(policy["spec"]["podSelector"], ws_labels)
    (ingress,) = policy["spec"]["ingress"]
    (source,) = ingress["from"]
    assert selects(source["podSelector"], ws_labels) and not selects(source["podSelector"], gw_labels)
    egress = policy["spec"]["egress"]
    # DNS, the store, the upstream: no API server (the pod has no token).
    assert {
        "to": [{"ipBlock": {"cidr": "10.0.0.9/32"}}],
        "ports": [{"protocol": "TCP", "port": 9000}],
    } in egress
    assert not any("10.96.0.1/32" in json.dumps(r) for r in egress)
    assert len(egress) == 3


def test_the_metrics_scrapers_reach_the_gateway_port_and_nothing_else_changes() -> None:
    prometheus = parse_metrics_scraper("monitoring:app.kubernetes.io/name=prometheus,team=obs")
    assert prometheus == MetricsScraper(
        "monitoring", (("app.kubernetes.io/name", "prometheus"), ("team", "obs"))
    )
    config = dataclasses.replace(CONFIG, gateway_metrics_from=(prometheus, parse_metrics_scraper("obs")))
    plain = objects(stack_run(), CONFIG)[("NetworkPolicy", "cc-gateway")]["spec"]
    scraped = objects(stack_run(), config)[("NetworkPolicy", "cc-gateway")]["spec"]
    agent_rule, from_prometheus, from_obs = scraped["ingress"]
    assert [agent_rule] == plain["ingress"] and scraped["egress"] == plain["egress"]
    assert from_prometheus == {
        "from": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus", "team": "obs"}},
            }
        ],
        "ports": [{"protocol": "TCP", "port": 8080}],
    }
    assert from_obs["from"][0]["podSelector"] == {"matchLabels": {}}  # every pod of `obs`
    for bad in ("Monitoring", "monitoring:app", "monitoring:=x", ""):
        with pytest.raises(A2rlError, match="gateway metrics scraper"):
            parse_metrics_scraper(bad)


def test_upstream_rules_follow_the_base_url() -> None:
    # The providers' public APIs: the internet on 443, never the cluster's private ranges.
    (public,) = upstream_rules(parse_spec(stack_run()), "team-a")
    assert public["ports"] == [{"protocol": "TCP", "port": 443}]
    v4 = public["to"][0]["ipBlock"]
    assert v4["cidr"] == "0.0.0.0/0" and "10.0.0.0/8" in v4["except"] and "169.254.0.0/16" in v4["except"]
    (ip,) = upstream_rules(parse_spec(stack_run("http://10.1.2.3:8000/v1")), "team-a")
    assert ip == {"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [{"protocol": "TCP", "port": 8000}]}
    in_llm = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llm"}}}]
    (svc,) = upstream_rules(parse_spec(stack_run("http://vllm.llm.svc:8000/v1")), "team-a")
    assert svc["to"] == in_llm
    # `name.tld` may be a Service (`<service>.<namespace>`) or a public API: both are allowed.
    svc, public = upstream_rules(parse_spec(stack_run("http://vllm.llm:8000/v1")), "team-a")
    assert svc["to"] == in_llm and public["ports"] == [{"protocol": "TCP", "port": 8000}]
    ns_ai, public = upstream_rules(parse_spec(stack_run("https://openrouter.ai/api/v1")), "team-a")
    assert ns_ai["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == "ai"
    assert public["to"][0]["ipBlock"]["cidr"] == "0.0.0.0/0" and public["ports"][0]["port"] == 443


def test_the_agent_container_runs_the_stack_through_the_launcher_with_the_token_from_the_secret() -> None:
    objs = objects(stack_run())
    (agent,) = podparse_spec(objs[("Job", "cc-workspace")])["containers"]
    assert agent["command"][:3] == ["python", "-m", "a2rl.contracts.stack_launch"]
    params = json.loads(agent["command"][3])
    assert params["gateway"] == "http://cc-gateway.team-a.svc:8080"
    assert params["install_dir"] == "/opt/a2rl-cache/agents/claude-code-2.1.331"
    assert TOKEN not in json.dumps(agent)  # a reference to the Secret, never the value
    env = {e["name"]: e for e in agent["env"]}
    assert env[ENV_AGENT_GATEWAY_TOKEN]["valueFrom"] == {
        "secretKeyRef": {"name": "cc-gateway-token", "key": "token"}
    }
    assert not any(name in env for name in UPSTREAM_KEY_ENV)
    assert "livenessProbe" in agent  # the deadline probe stays


def test_the_launcher_builds_the_prompt_from_the_workspace_and_execs_the_stack(tmp_path: Path) -> None:
    """The generated command, run as the container would: a fake `claude` records what it got."""
    install = tmp_path / "opt" / "claude-code-2.1.331"
    entry = install / "node_modules" / ".bin" / "claude"
    entry.parent.mkdir(parents=True)
    out = tmp_path / "got.json"
    entry.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv, 'env': dict(os.environ)}}, open({str(out)!r}, 'w'))\n"
    )
    entry.chmod(0o755)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "description.md").write_text("Add two numbers.\n")
    (workspace / "instructions.md").write_text("Rules.\n")
    objs = objects(stack_run())
    (agent,) = podparse_spec(objs[("Job", "cc-workspace")])["containers"]
    command = list(agent["command"])
    params = json.loads(command[3])
    params["install_dir"] = str(install)
    assert params["gateway_wait_s"] > 0
    params["gateway_wait_s"] = 0  # no gateway here (the e2e test has one)
    command[3] = json.dumps(params)
    env = {e["name"]: e["value"] for e in agent["env"] if "value" in e}
    env.update(
        {
            "PATH": os.environ["PATH"],
            "WORKSPACE": str(workspace),
            "HOME": str(tmp_path / "home"),
            ENV_AGENT_GATEWAY_TOKEN: TOKEN,
            "ANTHROPIC_AUTH_TOKEN": "leaked-upstream-key",
        }
    )
    proc = subprocess.run([sys.executable, *command[1:]], check=False, env=env, cwd=workspace, timeout=60)
    assert proc.returncode == 0
    got = json.loads(out.read_text())
    assert got["argv"][0] == str(entry) and got["argv"][1] == "-p"
    assert "Add two numbers." in got["argv"][2] and "600 seconds" in got["argv"][2]
    assert got["env"]["ANTHROPIC_BASE_URL"] == "http://cc-gateway.team-a.svc:8080"
    assert got["env"]["ANTHROPIC_API_KEY"] == TOKEN
    assert ENV_AGENT_GATEWAY_TOKEN not in got["env"]  # only the stack's own variables hold it
    assert "ANTHROPIC_AUTH_TOKEN" not in got["env"]


def _summary(refused: int, tokens: int = 1200) -> DriverSummary:
    return DriverSummary(
        calls=3,
        total_tokens=tokens,
        cost_usd=0.0123,
        budget=DriverBudgetState(
            driver_tokens=1000, exhausted=True, reason="the run's driver budget (1000 tokens) is exhausted",
            refused_calls=refused,
        ),
    )  # fmt: skip


def test_a_refused_agent_ends_the_run_driver_budget_exhausted() -> None:
    job = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    refused = driver_usage.refused_reason(_summary(refused=1))
    changes = st.observe(st.Observation(job=job, pod=None, queue_name=None, driver_refused=refused), [])
    finished = next(c for c in changes if c.type == COND_AGENT_FINISHED)
    assert finished.reason == REASON_DRIVER_BUDGET_EXHAUSTED and "1000 tokens" in finished.message
    succeeded = next(c for c in changes if c.type == COND_SUCCEEDED)
    assert succeeded.reason == REASON_DRIVER_BUDGET_EXHAUSTED
    # Exhausted by the last call, but never refused: the agent ended on its own.
    assert driver_usage.refused_reason(_summary(refused=0)) is None
    plain = st.observe(st.Observation(job=job, pod=None, queue_name=None), [])
    assert next(c for c in plain if c.type == COND_SUCCEEDED).reason == st.R_AGENT_COMPLETED


def test_status_carries_the_gateways_totals() -> None:
    status = driver_usage.with_usage(BenchRunStatus(), _summary(refused=0))
    wire = status.to_wire(only_set=True)
    assert (wire["driverTokens"], wire["driverCostUSD"]) == (1200, 0.0123)
    assert driver_usage.with_usage(BenchRunStatus(), None) == BenchRunStatus()


def test_the_gateway_reads_its_pod_env_back_into_the_runs_configuration() -> None:
    """What the operator writes is what `a2rl gateway serve` reads (`GatewayConfig.from_env`)."""
    objs = objects(stack_run("http://10.1.2.3:8000", driverTokens=1000))
    (container,) = containers(objs[("Job", "cc-gateway")])
    env = {e["name"]: e.get("value") for e in container["env"]}
    env[ENV_GATEWAY_TOKEN] = TOKEN  # the secretKeyRef, resolved
    env["A2RL_STORE_URI"] = "s3://runs/a2rl"  # the store Secret's envFrom
    config = GatewayConfig.from_env({k: v for k, v in env.items() if v is not None})
    assert (config.host, config.port) == ("0.0.0.0", 8080)
    assert config.key_source == "file:/var/run/secrets/driver/key"
    assert (config.provider, config.base_url, config.model) == (
        "anthropic",
        "http://10.1.2.3:8000",
        "claude-sonnet-4-5",
    )
    assert config.limits.tokens == 1000 and config.run_prefix == f"team-a/cc-{UID}"
    assert GatewayConfig.from_env(config.to_env()) == config


def test_every_stack_image_installs_its_stack_where_the_generated_command_looks() -> None:
    root = Path(__file__).resolve().parents[2] / "images"
    for name, sdef in STACKS.items():
        dockerfile = (root / f"agent-{name}" / "Dockerfile").read_text()
        assert f"ARG VERSION={sdef.default_version}\n" in dockerfile, name
        assert f"{STACK_INSTALL_ROOT}/{name}-$VERSION/{sdef.entry}" in dockerfile, name
