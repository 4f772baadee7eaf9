"""The whole cluster loop on the real control plane + real MinIO, with the real reference agent.

`kubectl apply` of a BenchRun → the operator (its own least-privilege ServiceAccount, grading
on) creates the workspace Job → the test plays every container of the generated pods as a local
process with exactly the pod spec's command, arguments, environment (env, envFrom Secrets,
secretKeyRefs) and working directory, each mount path mapped to a local directory standing in
for the volume, and the ServiceAccount token the kubelet would project turned into a kubeconfig
of the same ServiceAccount (kwok does not run containers):

- the workspace pod: `setup` (base model, train data, baseline BenchSubmission), the `recorder`
  sidecar in the background, then the `agent` — the SFT reference agent training the tiny model
  and submitting twice;
- every eval Job's pod (`fetch-heldout`, then `eval`) as soon as the operator creates it;
- the report Job's pod once the operator starts it.

Then: BenchSubmissions with the scores the operator copied from the eval results, the BenchRun's
best and improvement, the report in MinIO, one trace id across operator, setup, recorder, eval
and report — and the agent's own environment can neither read held-out data nor write a score.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2rl_gateway.app import READY_PREFIX
from kubernetes import client

from a2rl.constants import API_GROUP, API_VERSION, BENCHSUBMISSION_PLURAL, LABEL_COMPONENT, LABEL_RUN_UID
from a2rl.paths import cache_dir
from a2rl.records.driver_calls import iter_driver_calls
from a2rl.store.base import ObjectStore
from a2rl.store.layout import RunLayout
from a2rl.tracing.context import run_traceparent
from a2rl.tracing.spans import collect_spans
from tests.support.driver_server import DriverServer, Script
from tests.support.grading_support import (
    STORE_URI,
    TOKEN_DIR,
    Played,
    PodPlayer,
    create_run,
    finish_pod,
    get_sub,
    layout_of,
    run_name,
    running_pod,
    wait_state,
)
from tests.support.operator_install import OperatorProcess, serviceaccount_kubeconfig
from tests.support.operator_support import RESTRICTED, get_run, wait_run

# About a minute on 2 idle cores (two short training rounds); a loaded CI runner gets twice pyproject's 900 s.
pytestmark = [pytest.mark.cluster, pytest.mark.minio, pytest.mark.slow, pytest.mark.timeout(1800)]

EVAL_LIMIT = 40
#: The reference agent with its default SFT settings, in two rounds of a fixed number of steps (not
#: of seconds, so that a loaded machine changes the run's duration, not what the model learns).
#: Few steps: this test is about the loop's plumbing with played pods; that the training improves
#: the model (two rounds of 250 steps) is shown in real containers by
#: tests/node/test_benchrun_real_node.py.
AGENT_ENV = {
    "AGENT_MAX_ROUNDS": "2",
    "AGENT_ROUND_MAX_STEPS": "30",
    "AGENT_FIRST_ROUND_S": "600",
    "AGENT_ROUND_S": "600",
    "AGENT_EVAL_ESTIMATE_S": "40",
}
BUDGET_S = 1800


class EvalPodPlayer(threading.Thread):
    """Plays every eval pod of one run as the operator creates them (init container, then eval)."""

    def __init__(self, api: client.ApiClient, ns: str, run_uid: str, scratch: Path) -> None:
        super().__init__(name="eval-pod-player", daemon=True)
        self.api, self.ns, self.run_uid, self.scratch = api, ns, run_uid, scratch
        self.stop = threading.Event()
        self.played: dict[str, list[Played]] = {}
        self.errors: list[BaseException] = []

    def run(self) -> None:
        core = client.CoreV1Api(self.api)
        selector = f"{LABEL_RUN_UID}={self.run_uid},{LABEL_COMPONENT}=eval"
        while not self.stop.wait(0.5):
            try:
                for pod in core.list_namespaced_pod(self.ns, label_selector=selector).items:
                    name = pod.metadata.name
                    if pod.status.phase == "Running" and name not in self.played:
                        self._play(self.api.sanitize_for_serialization(pod))
            except BaseException as exc:  # reported by the test
                self.errors.append(exc)
                return

    def _play(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        root = self.scratch / name
        player = PodPlayer(self.api, pod, {"/var/run/a2rl/heldout": root / "heldout", "/tmp": root / "tmp"})
        self.played[name] = player.played
        fetched = player.run("fetch-heldout")
        done = player.run("eval") if fetched.returncode == 0 else fetched
        finish_pod(self.api, pod, subprocess.CompletedProcess([], done.returncode or 0))


@pytest.fixture
def eval_players() -> Iterator[list[EvalPodPlayer]]:
    players: list[EvalPodPlayer] = []
    yield players
    for p in players:
        p.stop.set()
        p.join(timeout=600)


def wait_healthy(recorder: dict[str, Any], proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Run the recorder container's startup probe until it passes (the kubelet starts the agent then)."""
    from tests.testenv.controlplane import wait_for

    probe = recorder["startupProbe"]["exec"]["command"]
    argv = [sys.executable if probe[0] == "python" else probe[0], *probe[1:]]

    def passes() -> bool:
        assert proc.poll() is None, "the recorder exited during start-up"
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0

    wait_for(passes, timeout=timeout, what="recorder startup probe")


SUBMIT_LINE = re.compile(r"submission (\d+), score (\S+), baseline (\S+),")


def agent_submissions(output: str) -> dict[int, tuple[str, str]]:
    """The grading API's answers as the agent logged them: index → (score, baseline) as printed."""
    return {int(m[1]): (m[2], m[3]) for m in SUBMIT_LINE.finditer(output)}


def test_reference_agent_trains_submits_twice_and_the_run_is_graded_in_the_cluster(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    make_namespace: Any,
    eval_players: list[EvalPodPlayer],
    tmp_path: Path,
) -> None:
    ns = make_namespace(labels=RESTRICTED)
    name = run_name()
    run = create_run(
        admin,
        ns,
        name,
        agent={
            "image": "ghcr.io/a2rl/agents:test",
            "command": ["python", "-m", "a2rl_agents.sft_baseline"],
            "env": [{"name": k, "value": v} for k, v in AGENT_ENV.items()],
        },
        budget={"wallTimeSeconds": BUDGET_S, "graceSeconds": 10, "maxSubmissions": 3},
        evaluation={"cpu": "1", "memory": "2Gi", "backend": "transformers", "limit": EVAL_LIMIT},
    )
    uid = run["metadata"]["uid"]
    run = wait_run(admin, ns, name, "AgentRunning")
    layout: RunLayout = layout_of(run)
    player_thread = EvalPodPlayer(admin, ns, uid, tmp_path / "eval")
    eval_players.append(player_thread)
    player_thread.start()

    pod = running_pod(admin, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent")
    kubeconfig = serviceaccount_kubeconfig(
        admin, ns, pod["spec"]["serviceAccountName"], tmp_path / "sa.kubeconfig"
    )
    ws = PodPlayer(
        admin,
        pod,
        {
            "/workspace": tmp_path / "workspace",
            "/var/run/a2rl/spool": tmp_path / "spool",
            "/tmp": tmp_path / "setup-scratch",
            TOKEN_DIR: tmp_path / "token",
        },
        kubeconfig=kubeconfig,
    )
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["setup", "recorder"]

    # 1. setup: the workspace volume and the baseline submission.
    setup = ws.run("setup", timeout=600)
    assert setup.returncode == 0, setup.output
    assert (tmp_path / "workspace" / "models" / "tiny" / "config.json").is_file()
    assert get_sub(admin, ns, f"{name}-00000")["spec"]["identicalToBase"] is True

    # 2. the recorder sidecar, then the agent (it trains and submits twice), then SIGTERM.
    _, rproc = ws.start("recorder", tmp_path / "recorder.log")
    try:
        wait_healthy(ws.container("recorder"), rproc)  # what the startup probe waits for
        agent = ws.run("agent", timeout=900)
    finally:
        rproc.send_signal(signal.SIGTERM)
        rcode = rproc.wait(timeout=300)
    recorder_log = (tmp_path / "recorder.log").read_text()
    assert agent.returncode == 0, agent.output[-3000:]
    assert rcode == 0, recorder_log[-3000:]
    answers = agent_submissions(agent.output)
    assert sorted(answers) == [1, 2], agent.output[-3000:]
    finish_pod(admin, pod, None)

    # 3. every submission a BenchSubmission, scored by the operator from its eval's result.json.
    subs = {i: wait_state(admin, ns, f"{name}-{i:05d}", "Succeeded", timeout=600) for i in (0, 1, 2)}
    for i, sub in subs.items():
        result = store.get_json(layout.submission_result(i))
        assert sub["status"]["score"] == result["score"] and result["n"] == EVAL_LIMIT
        manifest = store.get_json(layout.submission_manifest(i))
        assert sub["spec"]["modelDigest"] == manifest["model_digest"]
    for i, (score, baseline) in answers.items():  # the agent was told what the operator recorded
        assert score == f"{subs[i]['status']['score']:.1f}"
        assert baseline in ("None", f"{subs[0]['status']['score']:.1f}")
    assert all(store.get_json(layout.submission_manifest(i))["code_revision"] is not None for i in (1, 2))
    assert not player_thread.errors, player_thread.errors

    # 4. end of run: the report Job, played; then the run's status.
    rpod = running_pod(admin, ns, f"batch.kubernetes.io/job-name={name}-report", timeout=120)
    reporter = PodPlayer(admin, rpod, {"/tmp": tmp_path / "report-scratch"})
    report = reporter.run("report")
    assert report.returncode == 0, report.output[-3000:]
    finish_pod(admin, rpod, None)
    run = wait_run(admin, ns, name, "Succeeded", reason="AgentCompleted", timeout=120)
    st = run["status"]
    base = subs[0]["status"]["score"]
    best = max(subs[1]["status"]["score"], subs[2]["status"]["score"])
    assert st["submissionCount"] == 2 and st["baselineScore"] == base and st["bestScore"] == best
    assert st["improvement"] == pytest.approx(best - base)
    stored = store.get_json(f"{layout.report_dir}/report.json")
    assert st["report"]["uri"] == store.url_for(f"{layout.report_dir}/report.json")
    assert stored["best_score"] == best and stored["baseline_score"] == base
    assert len(stored["submissions"]) >= 2
    print("report summary:", st["report"]["summary"])

    # 5. one trace: operator, setup, recorder, eval and report spans under the run's trace id.
    root = run_traceparent(run["metadata"])
    assert root is not None
    spans = collect_spans(store, layout)
    assert {s["trace_id"] for s in spans} == {root.trace_id}
    services = {s["service"] for s in spans}
    assert {"a2rl-operator", "a2rl-setup", "a2rl-recorder", "a2rl-eval", "a2rl-report"} <= services
    submitted = sorted(
        s["attributes"].get("a2rl.submission.index") for s in spans if s["name"] == "submission"
    )
    assert submitted == [1, 2]
    merged = store.get_bytes(f"{layout.prefix}/traces.jsonl").decode().splitlines()
    assert {json.loads(line)["trace_id"] for line in merged} == {root.trace_id}

    # 6. the agent's own environment holds no credentials: it cannot read held-out data from the
    # store, and the API server refuses it a score.
    agent_env = ws.prepare("agent").env
    assert not {k for k in agent_env if k.startswith(("AWS_", "A2RL_")) or k == "KUBECONFIG"}
    heldout_key = next(k for k in store.list("data/arith") if "/heldout/" in k)
    probe = (
        "import sys; from a2rl.store.open import open_store\n"
        "try:\n    open_store(sys.argv[1]).get_bytes(sys.argv[2])\n"
        "except Exception as exc:\n    print('refused:', type(exc).__name__); sys.exit(3)\n"
    )
    minio_url = os.environ["AWS_ENDPOINT_URL"]
    read = subprocess.run(
        [sys.executable, "-c", probe, STORE_URI, heldout_key],
        env={**agent_env, "AWS_ENDPOINT_URL": minio_url},  # even knowing where the store is
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert read.returncode == 3, read.stdout + read.stderr
    anonymous = client.Configuration()
    anonymous.host = admin.configuration.host
    anonymous.ssl_ca_cert = admin.configuration.ssl_ca_cert
    forged = {"status": {"score": 100.0}}
    with client.ApiClient(anonymous) as anon, pytest.raises(client.exceptions.ApiException) as refused:
        client.CustomObjectsApi(anon).patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, ns, BENCHSUBMISSION_PLURAL, f"{name}-00001", forged
        )
    assert refused.value.status in (401, 403)
    assert get_sub(admin, ns, f"{name}-00001")["status"]["score"] == subs[1]["status"]["score"]
    assert get_run(admin, ns, name)["status"]["bestScore"] == best


# --- a stack run: the driver gateway pod, played, and the real Claude Code through it -------------

UPSTREAM_KEY = "sk-upstream-marker-c1u5t3r"  # stands for a real provider key
STACK = "claude-code"


def _read_line(log: Path, prefix: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    from tests.testenv.controlplane import wait_for

    def line() -> str | None:
        assert proc.poll() is None, log.read_text()[-3000:]
        return next((x for x in log.read_text().splitlines() if x.startswith(prefix)), None)

    found: str = wait_for(line, timeout=timeout, what=prefix)
    return found


def test_a_stack_run_drives_claude_code_through_its_gateway_pod_and_the_budget_ends_it(
    operator: OperatorProcess,
    admin: client.ApiClient,
    store: ObjectStore,
    make_namespace: Any,
    tmp_path: Path,
) -> None:
    """Claude Code (the real CLI) in the agent container, the gateway in its own pod, both played
    with their pod specs; the scripted driver is the upstream. The first call spends the driver
    budget (1000 tokens), so the stack is refused its next call and stops: the run's AgentFinished
    is `DriverBudgetExhausted`, `status.driverTokens` the gateway's total, the calls in MinIO
    under the run's prefix (written with the run's own scoped keys) and the key nowhere."""
    installed = cache_dir() / "agents" / f"{STACK}-2.1.331"
    if not (installed / "node_modules" / ".bin" / "claude").exists():
        pytest.skip(f"{STACK} is not installed in {installed} (a2rl run installs it on first use)")
    ns = make_namespace(labels=RESTRICTED)
    core = client.CoreV1Api(admin)
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "driver-key"}, "stringData": {"key": UPSTREAM_KEY}}
    )
    script = Script.of(["echo played > code/hello.txt", "echo again > code/again.txt"])
    with DriverServer(script, api_key=UPSTREAM_KEY) as driver:
        name = run_name()
        run = create_run(
            admin,
            ns,
            name,
            agent={"stack": STACK},
            driver={
                "provider": "anthropic",
                "model": "scripted-1",
                "baseUrl": driver.url,
                "secretRef": {"name": "driver-key", "key": "key"},
            },
            budget={"wallTimeSeconds": 600, "graceSeconds": 5, "driverTokens": 1000},
        )
        uid = run["metadata"]["uid"]
        layout = layout_of(run)

        # The gateway pod: its container as a local process (the key file as the kubelet
        # projects the Secret; any free port instead of 8080 on this shared machine).
        gw_pod = running_pod(admin, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=gateway")
        key_dir = tmp_path / "driver-key"
        key_dir.mkdir()
        (key_dir / "key").write_text(UPSTREAM_KEY)
        gw = PodPlayer(admin, gw_pod, {"/tmp": tmp_path / "gw-tmp", "/var/run/secrets/driver": key_dir})
        played_gw = gw.prepare("gateway")
        assert played_gw.env["A2RL_GATEWAY_KEY_SOURCE"] == "file:/var/run/secrets/driver/key"
        assert UPSTREAM_KEY not in json.dumps(played_gw.env)
        env = {
            **played_gw.env,
            "A2RL_GATEWAY_KEY_SOURCE": f"file:{key_dir / 'key'}",
            "A2RL_GATEWAY_PORT": "0",
        }
        gw_log = tmp_path / "gateway.log"
        with gw_log.open("wb") as out:
            gproc = subprocess.Popen(played_gw.argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            ready = _read_line(gw_log, READY_PREFIX, gproc)
            port = int(ready.rsplit(":", 1)[1].split()[0])

            # The workspace pod: set-up, then the agent container's generated command, with the
            # Service's name resolved to the played gateway and the image's install directory.
            pod = running_pod(admin, ns, f"{LABEL_RUN_UID}={uid},{LABEL_COMPONENT}=agent")
            kubeconfig = serviceaccount_kubeconfig(
                admin, ns, pod["spec"]["serviceAccountName"], tmp_path / "sa.kubeconfig"
            )
            ws_dir = tmp_path / "workspace"
            ws = PodPlayer(
                admin,
                pod,
                {"/workspace": ws_dir, "/tmp": tmp_path / "setup-scratch", TOKEN_DIR: tmp_path / "token"},
                kubeconfig=kubeconfig,
            )
            setup = ws.run("setup", timeout=600)
            assert setup.returncode == 0, setup.output
            agent = ws.prepare("agent")
            params = json.loads(agent.argv[3])
            assert params["gateway"] == f"http://{name}-gateway.{ns}.svc:8080"
            params.update(gateway=f"http://127.0.0.1:{port}", install_dir=str(installed))
            argv = [*agent.argv[:3], json.dumps(params)]
            agent_env = {**agent.env, "HOME": str(ws_dir / ".agent-home")}  # the image's ENV
            assert UPSTREAM_KEY not in json.dumps(agent_env) and "AWS_SECRET_ACCESS_KEY" not in agent_env
            done = subprocess.run(
                argv, env=agent_env, cwd=agent.cwd, capture_output=True, text=True, timeout=300, check=False
            )
            output = done.stdout + done.stderr
            assert (ws_dir / "code" / "hello.txt").read_text() == "played\n", output[-3000:]
            assert "driver budget" in output, output[-3000:]  # the stack saw the gateway's refusal
            finish_pod(admin, pod, subprocess.CompletedProcess([], done.returncode))
            upstream_calls = len(driver.model_calls())
            assert driver.header_values("x-api-key") == {UPSTREAM_KEY}  # the key, added by the gateway

            # The operator reads the gateway's summary: the end's reason and the totals.
            run = wait_run(admin, ns, name, "AgentFinished", reason="DriverBudgetExhausted", timeout=120)
        finally:
            gproc.send_signal(signal.SIGTERM)
            gcode = gproc.wait(timeout=60)
    assert gcode == 0, gw_log.read_text()[-3000:]
    summary = store.get_json(layout.driver_summary)
    assert summary["budget"]["exhausted"] is True and summary["budget"]["refused_calls"] >= 1
    assert run["status"]["driverTokens"] == summary["total_tokens"] >= 1000
    assert run["status"]["driverCostUSD"] == pytest.approx(summary["cost_usd"])
    calls = list(iter_driver_calls(store, layout))
    assert [c.index for c in calls] == list(range(1, summary["calls"] + 1))
    assert len(calls) > upstream_calls  # the refused ones are recorded too
    assert calls[0].upstream_url.startswith(driver.url) and calls[0].status == 200
    for key in store.list(layout.prefix):
        assert UPSTREAM_KEY.encode() not in store.get_bytes(key), key
