"""BenchCampaigns on the real control plane + real MinIO: the operator expands the matrix into
BenchRuns, at most `maxConcurrentRuns` in flight, rolls their results up into the campaign's
status, survives a SIGKILL mid-campaign without creating a duplicate, writes campaign.json,
creates the campaign report Job, and goes with its runs when the campaign is deleted (their
records stay in the store).

The operator runs as `a2rl operator` as its own ServiceAccount (the chart's RBAC) with grading on
(tests/support/grading_fixtures.py). kwok runs no containers, so the test plays every run to its
graded end as `test_operator_submissions.py` does: the baseline from the store's baseline cache
(no eval Job), submission 1's eval pod played by writing its `result.json`, the agent pod
completed, the report pod played by writing `report.json`. Every run's score is chosen per cell,
so the best cell is known in advance.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from a2rl_grader.baseline import cluster_baseline_cache_key
from a2rl_grader.evaluate import write_result
from a2rl_operator.retention import RECORD_NAME
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import stage_to_store
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.api.benchcampaign import BenchCampaignSpec
from a2rl.campaign.matrix import PlannedRun, expand
from a2rl.constants import (
    API_GROUP,
    API_VERSION,
    BENCHCAMPAIGN_PLURAL,
    BENCHRUN_PLURAL,
    LABEL_CAMPAIGN,
    LABEL_CAMPAIGN_CELL,
    LABEL_COMPONENT,
    LABEL_RUN_UID,
)
from a2rl.models.tiny import build_tiny_model
from a2rl.records.base import write_record
from a2rl.records.report import REPORT_SCHEMA_VERSION, ReportRecord
from a2rl.records.result import ResultRecord
from a2rl.store.base import ObjectStore
from a2rl.store.cas import hash_tree
from a2rl.store.layout import CampaignLayout, RunLayout
from a2rl.store.s3 import S3Store
from tests.support import argocd_health as argo
from tests.support.grading_support import (
    EVAL_LIMIT,
    STORE_URI,
    custom,
    finish_pod,
    get_sub,
    play,
    record_submission,
    submit,
)
from tests.support.operator_install import OperatorProcess
from tests.support.operator_support import RESTRICTED, condition
from tests.testenv import build

pytestmark = [pytest.mark.cluster, pytest.mark.minio]

# The fixtures `admin`, `minio_env`, `store`, `volumes` and `operator`: tests/support/grading_fixtures.py.

SEEDS = (0, 1)
PROTOCOLS = ("a2rl", "reference")
#: The baseline per protocol (what the store's baseline cache holds).
BASELINE = {"a2rl": 30.0, "reference": 40.0}
#: Improvement of submission 1 per (agent, protocol); + 2 per seed.
GAIN = {("sft", "a2rl"): 10.0, ("sft", "reference"): 5.0, ("grpo", "a2rl"): 20.0, ("grpo", "reference"): 0.0}
MAX_CONCURRENT = 2
BASE_SEED, V1_SEED = 0, 1


def agent(module: str) -> dict[str, Any]:
    return {"image": "agent:1", "command": ["python", "-m", module]}


def campaign_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "task": "arith",
            "baseModel": {"name": "tiny", "source": "builtin:tiny"},
            "agent": agent("a2rl_agents.sft"),
            "budget": {"wallTimeSeconds": 3600, "graceSeconds": 5, "maxSubmissions": 2},
            "resources": {"cpu": "1", "memory": "1Gi"},
            "evaluation": {"cpu": "1", "memory": "2Gi", "backend": "transformers", "limit": EVAL_LIMIT},
        },
        "matrix": {
            "agents": [
                {"name": "sft", "agent": agent("a2rl_agents.sft")},
                {"name": "grpo", "agent": agent("a2rl_agents.grpo")},
            ],
            "protocols": list(PROTOCOLS),
            "seeds": list(SEEDS),
        },
        "maxConcurrentRuns": MAX_CONCURRENT,
    }
    spec.update(overrides)
    return spec


def create_campaign(api: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "BenchCampaign",
        "metadata": {"name": name},
        "spec": spec,
    }
    created: dict[str, Any] = custom(api).create_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHCAMPAIGN_PLURAL, body
    )
    return created


def get_campaign(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = custom(api).get_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHCAMPAIGN_PLURAL, name
    )
    return obj


def list_runs(api: client.ApiClient, ns: str, campaign: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = custom(api).list_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, BENCHRUN_PLURAL, label_selector=f"{LABEL_CAMPAIGN}={campaign}"
    )["items"]
    return items


def campaign_table(api: client.ApiClient, ns: str) -> dict[str, Any]:
    """What `kubectl get benchcampaigns` prints: the server-side Table of the printer columns."""
    method, url, headers, _, _ = api.param_serialize(
        "GET",
        f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{ns}/{BENCHCAMPAIGN_PLURAL}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers)
    resp.read()
    table: dict[str, Any] = json.loads(resp.data)
    return table


def terminal_time(run: dict[str, Any]) -> datetime | None:
    for type_ in ("Succeeded", "Failed"):
        c = condition(run, type_)
        if c and c["status"] == "True":
            return datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))
    return None


def created_at(run: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(run["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def most_in_flight(runs: list[dict[str, Any]]) -> int:
    """The most runs in flight at once, from the runs' own timestamps: each run counts from its
    creation up to (not including) the time its terminal condition was set."""
    spans = [(created_at(r), terminal_time(r)) for r in runs]
    return max(sum(1 for s, e in spans if s <= t and (e is None or t < e)) for t, _ in spans)


class Player:
    """Plays every run of the campaign to its graded end, one non-blocking step per call."""

    def __init__(
        self,
        api: client.ApiClient,
        store: ObjectStore,
        ns: str,
        planned: dict[str, PlannedRun],
        models: dict[str, Path],
    ) -> None:
        self.api, self.store, self.ns, self.planned, self.models = api, store, ns, planned, models
        self.core = client.CoreV1Api(api)
        self.stage: dict[str, str] = {}
        self.max_live_in_flight = 0

    def _running_pod(self, selector: str) -> dict[str, Any] | None:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=selector).items
        running = [p for p in pods if p.status.phase == "Running"]
        return self.api.sanitize_for_serialization(running[0]) if running else None

    def _complete(self, pod: dict[str, Any]) -> None:
        from tests.testenv.fixtures import complete_pod

        complete_pod(self.api, self.ns, pod["metadata"]["name"], "succeeded")

    def _sub_state(self, name: str) -> dict[str, Any]:
        try:
            return get_sub(self.api, self.ns, name).get("status") or {}
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise

    def score(self, run: PlannedRun) -> float:
        axes = run.cell.as_dict()
        return BASELINE[axes["protocol"]] + GAIN[(axes["agent"], axes["protocol"])] + 2.0 * run.seed

    def step(self, runs: list[dict[str, Any]]) -> None:
        live = sum(1 for r in runs if (r.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
        self.max_live_in_flight = max(self.max_live_in_flight, live)
        for run in runs:
            self._step(run)

    def _step(self, run: dict[str, Any]) -> None:
        name, uid = run["metadata"]["name"], run["metadata"]["uid"]
        stage = self.stage.get(name, "new")
        if stage == "new":
            graded = condition(run, "Graded")
            if condition(run, "AgentRunning") and graded and graded["reason"] == "AwaitingAgent":
                submit(self.api, record_submission(self.store, run, 0, self.models["base"]))
                self.stage[name] = "baseline"
        elif stage == "baseline":
            if self._sub_state(f"{name}-00000").get("state") == "Succeeded":
                submit(self.api, record_submission(self.store, run, 1, self.models["v1"]))
                self.stage[name] = "submitted"
        elif stage == "submitted":
            job = self._sub_state(f"{name}-00001").get("evalJob")
            pod = self._running_pod(f"batch.kubernetes.io/job-name={job}") if job else None
            if pod is not None:  # the eval container: its result.json, as the eval process writes it
                result = ResultRecord(
                    index=1,
                    task="arith",
                    score=self.score(self.planned[name]),
                    error=None,
                    n=EVAL_LIMIT,
                    model_digest=hash_tree(self.models["v1"]).digest,
                )
                write_result(self.store, RunLayout(self.ns, name, uid), 1, result, [])
                self._complete(pod)
                self.stage[name] = "evaluated"
        elif stage == "evaluated":
            if self._sub_state(f"{name}-00001").get("state") == "Succeeded":
                pod = self._running_pod(f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent")
                if pod is not None:
                    self._complete(pod)
                    self.stage[name] = "agent-done"
        elif stage == "agent-done":
            pod = self._running_pod(f"batch.kubernetes.io/job-name={name}-report")
            if pod is not None:  # the report container: report.json, as `a2rl report` writes it
                status = run.get("status") or {}
                report = ReportRecord(
                    schema_version=REPORT_SCHEMA_VERSION,
                    baseline_score=status["baselineScore"],
                    best_score=status["bestScore"],
                    best_submission=1,
                    improvement=status["improvement"],
                    total_submissions=1,
                    valid_submissions=1,
                )
                write_record(self.store, f"{RunLayout(self.ns, name, uid).report_dir}/report.json", report)
                self._complete(pod)
                self.stage[name] = "reported"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("campaign-models")
    return {
        "base": build_tiny_model(root / "base", seed=BASE_SEED),
        "v1": build_tiny_model(root / "v1", seed=V1_SEED),
    }


@pytest.fixture(scope="module")
def baselines(store: ObjectStore, models: dict[str, Path]) -> Iterator[None]:
    """Held-out data staged for every protocol and seed, and the base model's baseline cached (for
    this module only: the cache entries go afterwards, since other modules evaluate the same
    base model's baseline in the same store)."""
    digest = hash_tree(models["base"]).digest
    keys: list[str] = []
    for protocol in PROTOCOLS:
        task = get_task("arith", protocol=protocol)  # type: ignore[arg-type]
        for seed in SEEDS:
            stage_to_store(task, store, source=None, seed=seed)
            key = cluster_baseline_cache_key(task, digest, EVAL_LIMIT, store, seed)
            keys.append(key)
            store.put_json(
                key,
                {
                    "index": 0,
                    "task": "arith",
                    "score": BASELINE[protocol],
                    "error": None,
                    "evaluator_version": task.evaluator_version,
                    "n": EVAL_LIMIT,
                    "correct": 3,
                    "metrics": {},
                    "started_at": "2026-01-01T00:00:00Z",
                    "finished_at": "2026-01-01T00:00:03Z",
                    "duration_s": 3.0,
                    "model_digest": digest,
                    "details": [],
                },
            )
    yield
    for key in keys:
        store.delete(key)


@pytest.fixture(scope="module")
def tools() -> dict[str, Path]:
    """kstatus (sigs.k8s.io/cli-utils) and kubectl (`hack/testenv build` builds them; here too when
    missing)."""
    try:
        return build.ensure_tools(names=("kstatus", "kubectl"))
    except build.BuildError as exc:
        pytest.fail(f"building the kstatus and kubectl tools failed:\n{exc}", pytrace=False)


def gitops_reading(tool: Path, obj: dict[str, Any]) -> tuple[str, str]:
    """(kstatus, Argo CD health) of one campaign object as the API server returned it."""
    proc = subprocess.run([str(tool)], input=json.dumps(obj), capture_output=True, text=True, timeout=30,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["status"], argo.health("BenchCampaign", obj)["status"]


def test_a_campaign_runs_its_matrix_within_its_concurrency_survives_a_restart_and_goes_with_its_runs(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    models: dict[str, Path],
    baselines: None,
    make_namespace: Callable[..., str],
    minio_env: dict[str, str],
    tools: dict[str, Path],
    tmp_path: Path,
    control_plane: Any,
) -> None:
    from tests.testenv.controlplane import wait_for

    started = time.monotonic()
    ns = make_namespace(labels=RESTRICTED)
    name = "paper"
    spec = campaign_spec()
    planned = {r.name: r for r in expand(name, BenchCampaignSpec.model_validate(spec))}
    assert len(planned) == 8
    campaign = create_campaign(admin, ns, name, spec)
    uid = campaign["metadata"]["uid"]
    player = Player(admin, store, ns, planned, models)

    # --- play the runs to their end; SIGKILL the operator once the first run has ended
    killed_at: float | None = None
    in_flight: dict[str, Any] | None = None
    restarted = False
    deadline = time.monotonic() + 240
    while True:
        runs = list_runs(admin, ns, name)
        assert len(runs) <= len(planned) and {r["metadata"]["name"] for r in runs} <= set(planned)
        player.step(runs)
        finished = [r for r in runs if (r.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
        if killed_at is None and finished:
            operator.kill()  # mid-campaign: no clean-up at all
            killed_at = time.monotonic()
            print(
                f"operator killed after {killed_at - started:.1f}s: {len(runs)} runs, {len(finished)} ended"
            )
        if killed_at is not None and not restarted and time.monotonic() - killed_at > 2:
            operator.start()
            restarted = True
        current = get_campaign(admin, ns, name)
        status = current.get("status") or {}
        if in_flight is None and status.get("phase") == "Running":
            in_flight = copy.deepcopy(current)
        if status.get("phase") == "Succeeded" and len(finished) == len(planned):
            break
        assert time.monotonic() < deadline, json.dumps(status, indent=1)
        time.sleep(0.3)
    print(f"all 8 runs ended after {time.monotonic() - started:.1f}s")

    # --- exactly the planned runs (no duplicate after the restart), owned by the campaign
    runs = list_runs(admin, ns, name)
    assert sorted(r["metadata"]["name"] for r in runs) == sorted(planned)
    for run in runs:
        (owner,) = run["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("BenchCampaign", name, uid)
        assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
        assert run["metadata"]["labels"][LABEL_CAMPAIGN_CELL] == planned[run["metadata"]["name"]].cell.key
        assert run["spec"] == planned[run["metadata"]["name"]].spec.to_wire()
    # --- maxConcurrentRuns never exceeded: from the runs' timestamps, and as the test saw them
    assert most_in_flight(runs) <= MAX_CONCURRENT
    assert player.max_live_in_flight <= MAX_CONCURRENT

    # --- the roll-up, recomputed here from the runs' own statuses
    status = get_campaign(admin, ns, name)["status"]
    assert status["phase"] == "Succeeded" and status["progress"] == "8/8"
    assert status["observedGeneration"] == current["metadata"]["generation"]
    phases = [r["status"]["phase"] for r in runs]
    assert status["runs"]["total"] == 8 and status["runs"]["succeeded"] == phases.count("Succeeded") == 8
    by_cell: dict[str, list[float]] = {}
    for run in runs:
        st_ = run["status"]
        assert st_["improvement"] == pytest.approx(st_["bestScore"] - st_["baselineScore"])
        by_cell.setdefault(run["metadata"]["labels"][LABEL_CAMPAIGN_CELL], []).append(st_["improvement"])
    cells = {c["key"]: c for c in status["cells"]}
    assert set(cells) == set(by_cell)
    for key, gains in by_cell.items():
        cell = cells[key]
        assert (cell["runs"], cell["finished"], cell["failed"]) == (2, 2, 0)
        assert cell["improvement"]["n"] == len(gains) == 2
        assert cell["improvement"]["mean"] == pytest.approx(sum(gains) / len(gains))
        assert cell["improvement"]["ciLow"] < cell["improvement"]["mean"] < cell["improvement"]["ciHigh"]
    best = max(by_cell, key=lambda k: sum(by_cell[k]) / 2)
    assert cells[best]["axes"] == {"agent": "grpo", "protocol": "a2rl"}
    assert status["bestCell"].startswith("agent=grpo, protocol=a2rl: +21.0")
    ends = [terminal_time(r) for r in runs]
    assert status["completionTime"] == max(e for e in ends if e).strftime("%Y-%m-%dT%H:%M:%SZ")
    for type_, want in (
        ("Ready", "True"),
        ("Finished", "True"),
        ("Succeeded", "True"),
        ("Failed", "False"),
        ("Reconciling", "False"),
        ("Stalled", "False"),
    ):
        c = condition({"status": status}, type_)
        assert c is not None and c["status"] == want, (type_, c)
        assert c["observedGeneration"] == current["metadata"]["generation"]
    # GitOps readers of the real objects: kstatus InProgress -> Current, Argo CD Progressing -> Healthy
    assert in_flight is not None
    assert gitops_reading(tools["kstatus"], in_flight) == ("InProgress", "Progressing")
    assert gitops_reading(tools["kstatus"], get_campaign(admin, ns, name)) == ("Current", "Healthy")
    # `kubectl get benchcampaigns`: done/total, the best cell, the cost (no driver: none)
    table = campaign_table(admin, ns)
    columns = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Phase", "Done", "Best", "Cost", "Age"]
    (row,) = table["rows"]
    assert row["cells"][:5] == [name, "Succeeded", "8/8", status["bestCell"], status.get("driverCostUSD")]
    # and the real kubectl
    kubectl = [str(tools["kubectl"]), "--kubeconfig", str(control_plane.kubeconfig), "-n", ns]
    got = subprocess.run([*kubectl, "get", "bcamp"], capture_output=True, text=True, timeout=30, check=True)
    print(got.stdout)
    header, line = got.stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "DONE", "BEST", "COST", "AGE"]
    assert re.split(r"\s{2,}", line)[:4] == [name, "Succeeded", "8/8", status["bestCell"]]  # no cost: blank

    # --- campaign.json in the store; the campaign report Job, played, sets status.reportUri
    layout = CampaignLayout(ns, name)
    record = store.get_json(layout.campaign_json)
    assert (
        record["kind"] == "BenchCampaign"
        and record["metadata"]["uid"] == uid
        and record["spec"] == current["spec"]
    )
    job = client.BatchV1Api(admin).read_namespaced_job(f"{name}-report", ns)
    assert job.metadata.owner_references[0].uid == uid
    container = job.spec.template.spec.containers[0]
    assert container.command == [
        "a2rl",
        "campaign",
        "report",
        name,
        "--namespace",
        ns,
        "--store",
        STORE_URI,
        "--json",
    ]
    # Its keys: the campaign's runs and campaign.json in, its report/ out, nothing else.
    secret = client.CoreV1Api(admin).read_namespaced_secret(f"{name}-report-store", ns)
    keys = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
    assert keys["AWS_ACCESS_KEY_ID"] != minio_env["AWS_ACCESS_KEY_ID"]
    bucket, root = STORE_URI.removeprefix("s3://").split("/", 1)
    scoped = S3Store(
        keys["AWS_ENDPOINT_URL"].removeprefix("http://"),
        keys["AWS_ACCESS_KEY_ID"],
        keys["AWS_SECRET_ACCESS_KEY"],
        bucket,
        root,
        create_bucket=False,
    )
    first = runs[0]["metadata"]
    assert scoped.get_json(RunLayout(ns, first["name"], first["uid"]).run_json)["name"] == first["name"]
    assert scoped.get_json(layout.campaign_json)["metadata"]["name"] == name
    with pytest.raises(Exception):  # noqa: B017 - any refusal: another namespace is not listed
        list(scoped.list("another-namespace"))
    with pytest.raises(Exception):  # noqa: B017 - any refusal: another prefix of the store
        scoped.get_bytes(
            cluster_baseline_cache_key(
                get_task("arith"), hash_tree(models["base"]).digest, EVAL_LIMIT, store, 0
            )
        )
    pod = wait_for(
        lambda: player._running_pod(f"batch.kubernetes.io/job-name={name}-report"),
        timeout=30,
        what="campaign report pod",
    )
    # The report container played for real: `a2rl campaign report` with the pod's environment
    # (those keys), reading campaign.json and the runs' records, writing the campaign's report/.
    reported = play(admin, pod, "report", {"/tmp": tmp_path / "campaign-report"})
    assert reported.returncode == 0, reported.stdout + reported.stderr
    summary = json.loads(reported.stdout)
    print("a2rl campaign report --json:", json.dumps(summary)[:300], "...")
    assert summary["progress"] == "8/8" and summary["runs"]["succeeded"] == 8
    report_cells = {c["key"]: c for c in summary["cells"]}
    for key, gains in by_cell.items():  # the report's roll-up agrees with the campaign's status
        assert report_cells[key]["improvement"]["n"] == 2
        assert report_cells[key]["improvement"]["mean"] == pytest.approx(sum(gains) / len(gains))
    finish_pod(admin, pod, reported)
    uri = wait_for(
        lambda: get_campaign(admin, ns, name)["status"].get("reportUri"), timeout=60, what="status.reportUri"
    )
    assert uri == store.url_for(f"{layout.report_dir}/report.json")

    # --- maxConcurrentRuns may change; template, matrix and repeats may not
    patch = custom(admin).patch_namespaced_custom_object
    patch(API_GROUP, API_VERSION, ns, BENCHCAMPAIGN_PLURAL, name, {"spec": {"maxConcurrentRuns": 4}})
    for field, value in (("repeats", 2), ("matrix", {"seeds": [5]}), ("template", {"seed": 3})):
        with pytest.raises(ApiException) as refused:
            patch(API_GROUP, API_VERSION, ns, BENCHCAMPAIGN_PLURAL, name, {"spec": {field: value}})
        assert refused.value.status == 422 and "immutable" in refused.value.body, field

    # --- deleting the campaign deletes its runs (garbage collector); their records stay
    prefixes = {
        r["metadata"]["name"]: RunLayout(ns, r["metadata"]["name"], r["metadata"]["uid"]) for r in runs
    }
    custom(admin).delete_namespaced_custom_object(API_GROUP, API_VERSION, ns, BENCHCAMPAIGN_PLURAL, name)
    wait_for(lambda: not list_runs(admin, ns, name), timeout=60, what="the campaign's runs deleted")
    for run_layout in prefixes.values():  # run.json, and the final record the finalizer wrote
        assert store.exists(run_layout.run_json), run_layout.run_json
        assert store.get_json(f"{run_layout.prefix}/{RECORD_NAME}")["metadata"]["name"] == run_layout.name
    print(f"whole campaign test: {time.monotonic() - started:.1f}s")


def test_a_campaign_that_cannot_be_expanded_fails_without_runs(
    operator: OperatorProcess, admin: client.ApiClient, namespace: str, tools: dict[str, Path]
) -> None:
    from tests.testenv.controlplane import wait_for

    spec = campaign_spec(matrix={"driverModels": ["m1", "m2"]})  # the template has no driver
    create_campaign(admin, namespace, "nodriver", spec)

    def failed() -> dict[str, Any] | None:
        obj = get_campaign(admin, namespace, "nodriver")
        return obj if (obj.get("status") or {}).get("phase") == "Failed" else None

    obj = wait_for(failed, timeout=30, what="campaign Failed")
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["status"] == "True" and stalled["reason"] == "InvalidSpec"
    assert "matrix.driverModels needs a driver" in stalled["message"]
    assert condition(obj, "Failed")["status"] == "True"  # type: ignore[index]
    assert not list_runs(admin, namespace, "nodriver")
    assert gitops_reading(tools["kstatus"], obj) == ("Failed", "Degraded")
