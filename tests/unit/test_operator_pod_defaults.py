"""The chart's `podDefaults` and `imagePullSecrets` reach every pod the operator builds.

The four kinds (workspace, eval, report, gateway) each get their own part; what the pod already
has (the run's `spec.runtimeClassName`, the builder's own fields) wins; the global pull Secrets
come first in every kind; the merged pods still pass the `restricted` Pod Security Standard.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from a2rl_operator.config import OperatorConfig, pod_defaults_from_env
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests import children, parse_spec
from a2rl_operator.manifests.eval_job import EvalTarget, eval_job
from a2rl_operator.manifests.pod_defaults import COMPONENTS, with_pod_defaults
from a2rl_operator.manifests.report_job import report_job

from a2rl.api.chart_values import ChartValues, ComponentPodDefaults, PodDefaults
from a2rl.constants import ENV_IMAGE_PULL_SECRETS, ENV_POD_DEFAULTS
from a2rl.errors import A2rlError
from tests.support.pss import restricted_violations

UID = "5e0f3c2a-1111-2222-3333-444455556666"
GRADING = GradingConfig(grader_image="ghcr.io/a2rl/grader:test")
TARGET = EvalTarget(index=1, store_uri="s3://runs/a2rl", heldout_key="data/arith/1-seed0/heldout")


def _part(kind: str) -> dict[str, Any]:
    """A different, recognisable default per kind."""
    return {
        "nodeSelector": {"pool": f"{kind}-pool", "zone": "z1"},
        "tolerations": [{"key": f"{kind}-only", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "tier", "operator": "In", "values": [kind]}]}
                    ]
                }
            }
        },
        "priorityClassName": f"{kind}-priority",
        "runtimeClassName": f"{kind}-runtime",
        "imagePullSecrets": [{"name": f"{kind}-pull"}],
    }


ENV = {
    ENV_POD_DEFAULTS: json.dumps({kind: _part(kind) for kind in COMPONENTS}),
    ENV_IMAGE_PULL_SECRETS: json.dumps([{"name": "global-pull"}]),
}
DEFAULTS = pod_defaults_from_env(ENV)
CONFIG = OperatorConfig(store_uri="s3://runs/a2rl", pod_defaults=DEFAULTS)


def stack_run(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchRun",
        "metadata": {"name": "cc", "namespace": "team-a", "uid": UID, "generation": 1},
        "spec": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": {"stack": "claude-code"},
            "driver": {"provider": "anthropic", "model": "m", "secretRef": {"name": "k", "key": "api-key"}},
            "budget": {"wallTimeSeconds": 600, "graceSeconds": 30},
            **spec,
        },
    }


def pods(run: dict[str, Any], config: OperatorConfig = CONFIG) -> dict[str, dict[str, Any]]:
    """The pod spec of every kind the operator builds for `run`."""
    spec = parse_spec(run)
    jobs = {
        o["metadata"]["name"]: o
        for o in children(run, config, gateway_token="a2rl-run-x")
        if o["kind"] == "Job"
    }
    sub = {"metadata": {"name": "cc-00001", "uid": "s-uid"}, "spec": {"index": 1}}
    out = {
        "workspace": jobs["cc-workspace"],
        "gateway": jobs["cc-gateway"],
        "eval": eval_job(run, sub, spec, TARGET, GRADING, pod_defaults=config.pod_defaults),
        "report": report_job(run, spec, "s3://runs/a2rl", GRADING, pod_defaults=config.pod_defaults),
    }
    return {kind: job["spec"]["template"]["spec"] for kind, job in out.items()}


@pytest.mark.parametrize("kind", COMPONENTS)
def test_every_kind_of_pod_gets_its_own_defaults(kind: str) -> None:
    pod = pods(stack_run())[kind]
    assert pod["nodeSelector"] == {"pool": f"{kind}-pool", "zone": "z1"}
    assert pod["tolerations"] == [{"key": f"{kind}-only", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["affinity"] == _part(kind)["affinity"]
    assert pod["priorityClassName"] == f"{kind}-priority"
    assert pod["runtimeClassName"] == f"{kind}-runtime"
    # The global pull Secret first, then the kind's own.
    assert pod["imagePullSecrets"] == [{"name": "global-pull"}, {"name": f"{kind}-pull"}]
    assert restricted_violations({"spec": pod}) == []


def test_the_runs_runtime_class_wins_over_the_default_in_its_workspace_pod() -> None:
    got = pods(stack_run(runtimeClassName="gvisor"))
    assert got["workspace"]["runtimeClassName"] == "gvisor"
    assert got["eval"]["runtimeClassName"] == "eval-runtime"  # the run's class is its agent pod's


def test_without_defaults_the_pods_are_as_before() -> None:
    plain = pods(stack_run(), OperatorConfig(store_uri="s3://runs/a2rl"))
    for pod in plain.values():
        for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"):
            assert key not in pod
        assert "runtimeClassName" not in pod


def test_the_merge_keeps_what_the_pod_has() -> None:
    pod = {
        "nodeSelector": {"zone": "mine", "gpu": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "affinity": {"podAffinity": {}},
        "priorityClassName": "own",
        "imagePullSecrets": [{"name": "own-pull"}],
    }
    defaults = ComponentPodDefaults.model_validate(
        {
            "nodeSelector": {"zone": "theirs", "pool": "p"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "spot", "value": "yes"}],
            "affinity": {"nodeAffinity": {}},
            "priorityClassName": "default",
            "imagePullSecrets": [{"name": "own-pull"}, {"name": "more"}],
        }
    )
    merged = with_pod_defaults(pod, defaults)
    assert merged["nodeSelector"] == {"zone": "mine", "gpu": "a100", "pool": "p"}
    assert merged["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "spot", "value": "yes"},
    ]
    assert merged["affinity"] == {"podAffinity": {}} and merged["priorityClassName"] == "own"
    assert merged["imagePullSecrets"] == [{"name": "own-pull"}, {"name": "more"}]
    assert pod["nodeSelector"] == {"zone": "mine", "gpu": "a100"}  # the input is not changed


def test_the_operator_reads_what_the_chart_writes() -> None:
    """The chart passes `podDefaults` as JSON of the same model (`toJson` of the values)."""
    values = ChartValues.model_validate({"podDefaults": {"eval": {"nodeSelector": {"gpu": "h100"}}}})
    env = {ENV_POD_DEFAULTS: json.dumps(values.model_dump(by_alias=True, mode="json")["podDefaults"])}
    got = pod_defaults_from_env(env)
    assert got.eval.node_selector == {"gpu": "h100"} and got.workspace == ComponentPodDefaults()
    assert pod_defaults_from_env({}) == PodDefaults()


@pytest.mark.parametrize(
    "env",
    [
        {ENV_POD_DEFAULTS: '{"eval": {"nodeSelektor": {}}}'},
        {ENV_POD_DEFAULTS: '{"builder": {}}'},
        {ENV_POD_DEFAULTS: "not json"},
        {ENV_IMAGE_PULL_SECRETS: '[{"nom": "x"}]'},
    ],
)
def test_bad_defaults_stop_the_operator_at_start_up(env: dict[str, str]) -> None:
    with pytest.raises(A2rlError, match="A2RL_POD_DEFAULTS"):
        pod_defaults_from_env(env)
