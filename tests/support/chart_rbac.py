"""The operator's RBAC rules as the Helm chart's generated template holds them (drift test)."""

from __future__ import annotations

import yaml
from a2rl_operator.rbac import Rule


def rules_from_chart(text: str) -> list[Rule]:
    """The rules in a rendered chart template (`a2rl_operator.rbac.chart_template`)."""
    start = text.index("\nrules:")
    end = text.index("\n---", start)
    rules: list[Rule] = yaml.safe_load(text[start:end])["rules"]
    return rules
