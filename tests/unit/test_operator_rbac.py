"""The operator's RBAC has one source (a2rl_operator.rbac); the chart template must match it."""

from __future__ import annotations

from pathlib import Path

from a2rl_operator.rbac import RULES, chart_template

from tests.support.chart_rbac import rules_from_chart

CHART_RBAC = Path(__file__).resolve().parents[2] / "charts" / "a2rl" / "templates" / "rbac.yaml"


def test_chart_rbac_template_is_generated_from_the_rules() -> None:
    text = CHART_RBAC.read_text()
    assert text == chart_template(), "run: python -m a2rl_operator.rbac > charts/a2rl/templates/rbac.yaml"
    assert rules_from_chart(text) == RULES


def test_operator_never_reads_secrets_nor_updates_or_deletes_children() -> None:
    for rule in RULES:
        if "secrets" in rule["resources"]:
            assert rule["verbs"] == ["create"]
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"]
        if rule["apiGroups"] == ["coordination.k8s.io"] and "update" in rule["verbs"]:
            # Leader election renews its own Lease, that one only.
            assert rule["resources"] == ["leases"] and rule["resourceNames"] == ["a2rl-operator"]
            assert rule["verbs"] == ["get", "update"]
        elif rule["apiGroups"] != ["a2rl.dev"]:
            assert "delete" not in rule["verbs"] and "update" not in rule["verbs"]


def test_chart_crds_are_the_generated_crds() -> None:
    root = CHART_RBAC.parents[2].parent
    generated = sorted((root / "crds").glob("*.yaml"))
    assert generated
    for crd in generated:
        copy = root / "charts" / "a2rl" / "crds" / crd.name
        assert copy.exists() and copy.read_text() == crd.read_text(), f"cp crds/{crd.name} charts/a2rl/crds/"
