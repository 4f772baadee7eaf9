"""The operator's BenchCampaign decisions (pure) and the campaign report's manifests (no cluster)."""

from __future__ import annotations

from typing import Any

from a2rl_operator import campaign_decisions as cd
from a2rl_operator.config import Egress, OperatorConfig
from a2rl_operator.grading.config import GradingConfig
from a2rl_operator.manifests import campaign_report as cr

from a2rl.api.benchcampaign import BenchCampaignSpec
from a2rl.campaign.matrix import expand
from a2rl.campaign.rollup import rollup
from a2rl.constants import LABEL_CAMPAIGN, LABEL_CAMPAIGN_CELL

Body = dict[str, Any]
NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def spec(**matrix: Any) -> BenchCampaignSpec:
    return BenchCampaignSpec.model_validate(
        {
            "template": {
                "task": "arith",
                "baseModel": {"name": "tiny", "source": "builtin:tiny"},
                "agent": {"command": ["python", "-m", "a2rl_agents.sft"]},
                "budget": {"wallTimeSeconds": 60},
            },
            "matrix": {"protocols": ["a2rl", "reference"], "seeds": [0, 1], **matrix},
            "maxConcurrentRuns": 2,
        }
    )


def campaign() -> Body:
    return {
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "uid": "cu",
            "generation": 1,
            "labels": {"team": "x", "a2rl.dev/campaign": "spoof"},
        }
    }


def run(name: str, phase: str | None, **status: Any) -> Body:
    return {"metadata": {"name": name}, "status": {"phase": phase, **status} if phase else {}}


def test_next_runs_fill_the_free_slots_in_plan_order() -> None:
    planned = expand("c", spec())
    names = [p.name for p in planned]
    assert [p.name for p in cd.next_runs(planned, {}, 2)] == names[:2]
    # One of two in flight finished: one slot; the created ones are never created again.
    existing = {names[0]: run(names[0], "Succeeded"), names[1]: run(names[1], "Running")}
    assert [p.name for p in cd.next_runs(planned, existing, 2)] == [names[2]]
    assert cd.next_runs(planned, {**existing, names[2]: run(names[2], None)}, 2) == []
    # maxConcurrentRuns raised: at once more room.
    assert [p.name for p in cd.next_runs(planned, existing, 4)] == names[2:4]


def test_a_run_manifest_is_the_planned_run_owned_by_the_campaign() -> None:
    planned = expand("c", spec())[0]
    body = cd.run_manifest(campaign(), planned)
    assert body["metadata"]["name"] == planned.name and body["spec"] == planned.spec.to_wire()
    assert body["metadata"]["labels"] == {
        "team": "x",
        LABEL_CAMPAIGN: "c",
        LABEL_CAMPAIGN_CELL: planned.cell.key,
    }
    (owner,) = body["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "a2rl.dev/v1alpha1",
        "kind": "BenchCampaign",
        "name": "c",
        "uid": "cu",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_verdict_and_status() -> None:
    planned = expand("c", spec())
    names = [p.name for p in planned]
    outcomes = {names[0]: cd.run_outcome(run(names[0], "Running"))}
    judged = cd.verdict(rollup(planned, outcomes), planned, outcomes)
    assert (judged.phase, judged.reason, judged.over) == ("Running", cd.R_RUNNING, False)
    status, _ = cd.campaign_status(cd.status_of({}), None, judged, 1, NOW)
    conds = {c.type: c.status for c in status.conditions}
    assert conds == {"Reconciling": "True", "Stalled": "False", "Ready": "False", "Finished": "False"}
    assert status.completion_time is None and status.observed_generation == 1

    done = {
        n: run(n, "Succeeded", baselineScore=10.0, bestScore=15.0 + i, improvement=5.0 + i)
        for i, n in enumerate(names)
    }
    done[names[3]] = run(names[3], "Failed", baselineScore=10.0)
    outcomes = {n: cd.run_outcome(r) for n, r in done.items()}
    result = rollup(planned, outcomes)
    judged = cd.verdict(result, planned, outcomes)
    assert (judged.phase, judged.reason) == ("Failed", cd.R_RUNS_FAILED)
    assert judged.message == f"1 of 4 runs failed: {names[3]}"
    old = status.model_copy()
    status, transitions = cd.campaign_status(old, None, judged, 1, LATER)
    conds = {c.type: c.status for c in status.conditions}
    assert conds["Stalled"] == conds["Failed"] == conds["Finished"] == "True" and conds["Ready"] == "False"
    assert {c.type for c in transitions} >= {"Reconciling", "Stalled", "Finished", "Failed"}
    assert status.completion_time is not None
    # Nothing changed: the same status (no write).
    again, _ = cd.campaign_status(status, None, judged, 1, "2026-01-01T00:09:00Z")
    assert cd.same_status(status, again)


def test_an_invalid_campaign_is_over_at_once() -> None:
    judged = cd.invalid_verdict("matrix.driverModels needs a driver")
    status, _ = cd.campaign_status(cd.status_of({}), None, judged, 1, NOW)
    stalled = next(c for c in status.conditions if c.type == "Stalled")
    assert (status.phase, stalled.status, stalled.reason) == ("Failed", "True", "InvalidSpec")


def test_the_campaign_report_job_and_its_policy() -> None:
    config = OperatorConfig(
        store_egress=(Egress("10.0.0.0/8", 9000),), grading=GradingConfig(grader_image="grader:1")
    )
    owner = cd.owner_reference({"metadata": {**campaign()["metadata"]}})
    body = {"metadata": {"name": "c", "namespace": "ns", "uid": "cu"}}
    job = cr.report_job(body, owner, "s3://b/r", config.grading)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == [
        "a2rl",
        "campaign",
        "report",
        "c",
        "--namespace",
        "ns",
        "--store",
        "s3://b/r",
        "--json",
    ]
    assert container["envFrom"] == [{"secretRef": {"name": "c-report-store"}}]
    assert pod["automountServiceAccountToken"] is False and pod["dnsPolicy"] == "None"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert job["metadata"]["ownerReferences"] == [owner]
    policy = cr.report_network_policy(body, owner, config)
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    assert policy["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    ]
    assert policy["spec"]["ingress"] == []
