"""The Helm chart with the pinned helm (built by `hack/testenv build` into its own cache folder):
`helm lint --strict` and `helm template` of the default values and of a file that sets every
value, the schema's refusals, and `helm install` into the real control plane — the CRDs, the
operator's RBAC and its Deployment with the probes and the pod defaults as the API server stored
them (no image is pulled: kwok plays the nodes) — then `helm uninstall`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_operator import finalizer_policy
from a2rl_operator.config import MetricsScraper, parse_metrics_scraper
from a2rl_operator.manifests.common import run_labels
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.api.chart_values import ChartValues, PodDefaults
from a2rl.api.crdgen import KINDS
from a2rl.constants import COMPONENT_AGENT, COMPONENT_GATEWAY, ENV_IMAGE_PULL_SECRETS, ENV_POD_DEFAULTS
from tests.support.helm import Helm
from tests.testenv import build

pytestmark = [pytest.mark.cluster]

CHART = Path(__file__).resolve().parents[2] / "charts" / "a2rl"
FULL = CHART / "ci" / "full-values.yaml"


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    try:
        return build.ensure_tools(names=("helm",))["helm"]
    except build.BuildError as exc:
        pytest.fail(f"building helm failed:\n{exc}", pytrace=False)


@pytest.fixture(scope="module")
def helm(helm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(helm_binary, tmp_path_factory.mktemp("helm"))


def rendered(helm: Helm, *args: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = helm("template", "rel", str(CHART), "--namespace", "a2rl-system", *args).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def operator_container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}


def test_helm_lint_strict_passes_with_the_default_and_the_full_values(helm: Helm) -> None:
    assert "1 chart(s) linted, 0 chart(s) failed" in helm("lint", "--strict", str(CHART)).stdout
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), "-f", str(FULL)).stdout


def test_helm_template_of_the_default_values(helm: Helm) -> None:
    docs = rendered(helm)
    assert set(docs) == {
        ("Deployment", "rel-a2rl-operator"),
        ("ServiceAccount", "rel-a2rl-operator"),
        ("ClusterRole", "rel-a2rl-operator"),
        ("ClusterRoleBinding", "rel-a2rl-operator"),
        ("Service", "rel-a2rl-operator-metrics"),
    }
    deployment = docs["Deployment", "rel-a2rl-operator"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = operator_container(deployment)
    assert container["image"] == "ghcr.io/a2rl/operator:0.1.0"
    assert "--health=0.0.0.0:8080" in container["args"] and "--leader-elect" not in container["args"]
    metrics = docs["Service", "rel-a2rl-operator-metrics"]["spec"]
    assert metrics["ports"] == [{"name": "http-metrics", "port": 8080, "targetPort": "health"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert PodDefaults.model_validate_json(env_of(container)[ENV_POD_DEFAULTS]) == PodDefaults()
    assert ENV_IMAGE_PULL_SECRETS not in env_of(container) and "A2RL_GRADER_IMAGE" not in env_of(container)


def test_helm_template_of_every_value(helm: Helm) -> None:
    full = ChartValues.model_validate(yaml.safe_load(FULL.read_text()))
    docs = rendered(helm, "-f", str(FULL))
    assert set(docs) == {  # rbac.create: false
        ("Deployment", "a2rl-bench-operator"),
        ("ValidatingAdmissionPolicy", "a2rl-bench-benchrun-limits"),
        ("ValidatingAdmissionPolicyBinding", "a2rl-bench-benchrun-limits"),
        ("Service", "a2rl-bench-operator-metrics"),
        ("ServiceMonitor", "a2rl-bench-operator"),
        ("PodMonitor", "a2rl-bench-gateways"),
    }
    # Two replicas: they elect a leader, and roll one at a time.
    deployment = docs["Deployment", "a2rl-bench-operator"]
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"] == {"type": "RollingUpdate"}
    assert "--leader-elect" in operator_container(deployment)["args"]
    monitor = docs["ServiceMonitor", "a2rl-bench-operator"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"] == [{"port": "http-metrics", "path": "/metrics", "interval": "15s"}]
    service = docs["Service", "a2rl-bench-operator-metrics"]
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    policy = docs["ValidatingAdmissionPolicy", "a2rl-bench-benchrun-limits"]["spec"]["validations"]
    assert len(policy) == 4  # wall time, agent GPUs, eval GPUs, registries (knownTasksOnly: false)
    binding = docs["ValidatingAdmissionPolicyBinding", "a2rl-bench-benchrun-limits"]["spec"]
    assert binding["validationActions"] == ["Deny", "Audit"]
    pod = docs["Deployment", "a2rl-bench-operator"]["spec"]["template"]["spec"]
    container = operator_container(docs["Deployment", "a2rl-bench-operator"])
    env = env_of(container)
    # The registry of every image of the chart is the mirror's.
    mirror = "registry.example:5000/mirror/a2rl/"
    assert container["image"] == mirror + "operator-dev:0.1.0-rc1"
    assert f"--recorder-image={mirror}recorder:0.1.0-rc1" in container["args"]
    assert f"--setup-image={mirror}grader:0.1.0-rc1" in container["args"]
    assert env["A2RL_GRADER_IMAGE"] == mirror + "grader:0.1.0-rc1"
    # Pod defaults and the global pull Secrets, as the operator will read them.
    assert PodDefaults.model_validate_json(env[ENV_POD_DEFAULTS]) == full.pod_defaults
    assert json.loads(env[ENV_IMAGE_PULL_SECRETS]) == [{"name": "regcred"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["priorityClassName"] == "a2rl-system" and pod["serviceAccountName"] == "a2rl-operator-sa"
    assert container["ports"] == [{"name": "health", "containerPort": 9090}]
    assert "--health=0.0.0.0:9090" in container["args"]
    assert {"--namespace=bench-a", "--namespace=bench-b", "--verbose"} <= set(container["args"])
    # The gateway pods' scrapers, as the operator parses them; the PodMonitor selects those pods.
    scrapers = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--gateway-metrics-from=")]
    assert [parse_metrics_scraper(a) for a in scrapers] == [
        MetricsScraper("monitoring", (("app.kubernetes.io/name", "prometheus"), ("team", "obs"))),
        MetricsScraper("observability"),
    ]
    pods = docs["PodMonitor", "a2rl-bench-gateways"]
    assert pods["metadata"]["labels"]["release"] == "prometheus"
    assert pods["spec"]["namespaceSelector"] == {"any": True}
    run = {"metadata": {"name": "cc", "uid": "u1"}}
    selector = pods["spec"]["selector"]["matchLabels"].items()
    assert selector <= run_labels(run, COMPONENT_GATEWAY).items()  # the operator's gateway pods
    assert not selector <= run_labels(run, COMPONENT_AGENT).items()
    assert pods["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "20s"}]


MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


@pytest.mark.parametrize(
    ("values", "namespaces"),
    [((), ()), (("-f", str(FULL)), ("bench-a", "bench-b"))],
    ids=["default", "full"],
)
def test_the_finalizer_policy_is_the_operators_and_bound_to_the_watched_namespaces(
    helm: Helm, values: tuple[str, ...], namespaces: tuple[str, ...]
) -> None:
    docs = rendered(helm, *values, "--api-versions", MAP_API, "--set", "operator.finalizerAtCreate=true")
    full = "a2rl-bench" if values else "rel-a2rl"
    name = f"{full}-{finalizer_policy.NAME_SUFFIX}"
    assert docs["MutatingAdmissionPolicy", name]["spec"] == finalizer_policy.policy_spec()
    binding = docs["MutatingAdmissionPolicyBinding", name]["spec"]
    assert binding == finalizer_policy.binding_spec(name, namespaces)
    # Off, or where the API server does not serve the API (before 1.36): the operator adds it.
    off = rendered(helm, *values, "--api-versions", MAP_API, "--set", "operator.finalizerAtCreate=false")
    assert not [key for key in off if key[0].startswith("MutatingAdmission")]
    assert not [key for key in rendered(helm, *values) if key[0].startswith("MutatingAdmission")]


@pytest.mark.parametrize(
    ("flag", "error"),
    [
        ("foo.bar=1", "additional properties 'foo' not allowed"),
        ("podDefaults.eval.nodeSelektor.a=b", "at '/podDefaults/eval': additional properties 'nodeSelektor'"),
        ("operator.healthPort=http", "at '/operator/healthPort': got string, want integer"),
        ("operator.livenessPort=8080", "additional properties 'livenessPort' not allowed"),
        ("store.egress={storage.example:9000}", "at '/store/egress/0'"),
    ],
)
def test_the_schema_refuses_unknown_keys_and_wrong_types(helm: Helm, flag: str, error: str) -> None:
    proc = helm("template", "rel", str(CHART), "--set", flag, check=False)
    assert proc.returncode != 0 and error in proc.stderr, proc.stderr


def test_kube_version_below_1_31_is_refused(helm: Helm) -> None:
    proc = helm("template", "rel", str(CHART), "--kube-version", "1.30.4", check=False)
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr and ">=1.31.0-0" in proc.stderr
    helm("template", "rel", str(CHART), "--kube-version", "1.31.0")


@pytest.fixture
def installed(
    helm_binary: Path, control_plane: Any, make_namespace: Any, tmp_path: Path
) -> Iterator[tuple[Helm, str, str]]:
    helm = Helm(helm_binary, tmp_path / "helm", kubeconfig=control_plane.kubeconfig)
    ns, release = make_namespace(prefix="chart"), f"a2rl-{uuid.uuid4().hex[:6]}"
    yield helm, ns, release
    helm("uninstall", release, "-n", ns, "--wait", check=False)


def test_helm_install_into_the_control_plane(installed: tuple[Helm, str, str], control_plane: Any) -> None:
    helm, ns, release = installed
    api = control_plane.api_client()
    apps, rbac, ext = (
        client.AppsV1Api(api),
        client.RbacAuthorizationV1Api(api),
        client.ApiextensionsV1Api(api),
    )

    # An unknown value: refused by the schema before anything exists.
    refused = helm("install", release, str(CHART), "-n", ns, "--set", "foo.bar=1", check=False)
    assert refused.returncode != 0 and "additional properties 'foo' not allowed" in refused.stderr
    assert release not in helm("list", "-n", ns, "-q").stdout

    full = ChartValues.model_validate(yaml.safe_load(FULL.read_text()))
    start = time.monotonic()
    # Without the ServiceMonitor and PodMonitor: the Prometheus Operator's CRDs are not part of the
    # test cluster.
    helm("install", release, str(CHART), "-n", ns, "-f", str(FULL), "--set",
         f"rbac.create=true,fullnameOverride={release},operator.serviceMonitor.enabled=false,"
         "gateway.metrics.podMonitor.enabled=false,operator.finalizerAtCreate=true")  # fmt: skip
    print(f"helm install: {time.monotonic() - start:.1f}s")

    # The CRDs (from crds/; present already when other tests installed them), established.
    for kind in KINDS:
        crd = ext.read_custom_resource_definition(kind.crd_name)
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
        assert crd.spec.versions[0].selectable_fields, kind.crd_name
    # The operator's RBAC, bound to its ServiceAccount.
    role = rbac.read_cluster_role(f"{release}-operator")
    assert any("benchruns" in r.resources for r in role.rules)
    binding = rbac.read_cluster_role_binding(f"{release}-operator")
    assert [(s.name, s.namespace) for s in binding.subjects] == [("a2rl-operator-sa", ns)]
    # The Deployment as the API server stored it: probes, pod defaults, pull Secrets.
    deployment = api.sanitize_for_serialization(apps.read_namespaced_deployment(f"{release}-operator", ns))
    container = operator_container(deployment)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health", "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health", "scheme": "HTTP"}
    env = env_of(container)
    assert PodDefaults.model_validate_json(env[ENV_POD_DEFAULTS]) == full.pod_defaults
    assert json.loads(env[ENV_IMAGE_PULL_SECRETS]) == [{"name": "regcred"}]
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate" and deployment["spec"]["replicas"] == 2
    assert "--leader-elect" in container["args"]
    assert any("leases" in r.resources and r.resource_names == ["a2rl-operator"] for r in role.rules)
    # The API server serves MutatingAdmissionPolicy (1.36): the finalizer policy, bound to the
    # watched namespaces.
    admission = client.CustomObjectsApi(api)
    map_name = f"{release}-{finalizer_policy.NAME_SUFFIX}"
    stored = admission.get_cluster_custom_object(
        "admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings", map_name
    )
    assert stored["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": finalizer_policy.NAMESPACE_NAME_LABEL, "operator": "In", "values": ["bench-a", "bench-b"]}
        ]
    }

    helm("uninstall", release, "-n", ns, "--wait")
    with pytest.raises(ApiException) as gone:
        apps.read_namespaced_deployment(f"{release}-operator", ns)
    assert gone.value.status == 404
    for kind in KINDS:  # helm never deletes crds/: uninstalling keeps every BenchRun
        ext.read_custom_resource_definition(kind.crd_name)


def _benchrun(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task": "arith",
        "baseModel": {"name": "tiny", "source": "builtin:tiny"},
        "agent": {
            "image": "ghcr.io/a2rl/agent-baselines:0.1.0",
            "command": ["python", "-m", "a2rl_agents.sft"],
        },
        "budget": {"wallTimeSeconds": 3600},
        **spec,
    }
    return {"apiVersion": "a2rl.dev/v1alpha1", "kind": "BenchRun", "metadata": {"name": name}, "spec": base}


def test_admission_policies_refuse_runs_over_the_clusters_limits(
    installed: tuple[Helm, str, str], control_plane: Any, make_namespace: Any
) -> None:
    from tests.testenv.controlplane import wait_for

    helm, ns, release = installed
    limits = ",".join(
        f"admissionPolicies.{v}"
        for v in (
            "enabled=true",
            "maxWallTimeSeconds=7200",
            "maxGpus=2",
            "allowedImageRegistries={ghcr.io/a2rl}",
        )
    )
    # No finalizer policy: no operator runs here to let the created runs go.
    helm("install", release, str(CHART), "-n", ns, "--set",
         f"fullnameOverride={release},operator.finalizerAtCreate=false", "--set", limits)  # fmt: skip
    custom = client.CustomObjectsApi(control_plane.api_client())
    runs = make_namespace(prefix="runs")

    def create(body: dict[str, Any]) -> str | None:
        """None when created (and deleted again), else the API server's refusal."""
        try:
            custom.create_namespaced_custom_object("a2rl.dev", "v1alpha1", runs, "benchruns", body)
        except ApiException as exc:
            assert exc.status in (403, 422), exc.body
            return str(json.loads(exc.body)["message"])
        custom.delete_namespaced_custom_object(
            "a2rl.dev", "v1alpha1", runs, "benchruns", body["metadata"]["name"]
        )
        return None

    over_budget = _benchrun("long", budget={"wallTimeSeconds": 43200})
    # The API server enforces a new policy once it has compiled it (about a second).
    message = wait_for(lambda: create(over_budget), timeout=30, what="the policy refusing an over-budget run")
    print(message)
    assert "spec.budget.wallTimeSeconds: 43200 s is over the limit of this cluster (7200 s)" in message
    assert f"{release}-benchrun-limits" in message
    gpus = create(_benchrun("gpus", resources={"gpus": 4}))
    assert gpus is not None and "spec.resources.gpus: 4 is over the limit of this cluster (2)" in gpus
    eval_gpus = create(_benchrun("eval-gpus", evaluation={"gpus": 3}))
    assert eval_gpus is not None and "spec.evaluation.gpus: 3" in eval_gpus
    image = create(_benchrun("image", agent={"image": "ghcr.io/a2rl-evil/agent:1", "command": ["x"]}))
    assert image is not None and "is not from a registry this cluster allows (ghcr.io/a2rl/)" in image
    task = create(_benchrun("typo", task="gsm8kk"))
    assert task is not None and "spec.task: unknown task gsm8kk; known tasks: alfworld," in task
    # Within every limit: created.
    assert create(_benchrun("fine", budget={"wallTimeSeconds": 7200}, resources={"gpus": 2})) is None
