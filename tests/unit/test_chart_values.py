"""The Helm chart's values have one source, `a2rl.api.chart_values`: the committed values.yaml,
values.schema.json, the chart's CRDs and RBAC and the value table of docs/install.md are what
`a2rl chart generate` writes (helm itself is exercised in tests/cluster/test_chart.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli import main
from a2rl_cli.chart_cmd import expected_files

from a2rl.api.chart_values import ChartValues
from a2rl.api.chartgen import TABLE_BEGIN, TABLE_END, default_values, values_schema, values_table

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "a2rl"
DOCS = ROOT / "docs" / "install.md"
#: Objects of the schema that are Kubernetes' or a parent chart's, not ours: any keys.
FREE_FORM = {"global", "affinity"}


def test_committed_chart_files_are_generated_from_the_model() -> None:
    stale = [
        str(p.relative_to(ROOT))
        for p, text in expected_files(CHART, DOCS).items()
        if not p.is_file() or p.read_text(encoding="utf-8") != text
    ]
    assert stale == [], "run: .venv/bin/a2rl chart generate"


def test_values_yaml_is_the_models_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values == default_values()
    assert ChartValues.model_validate(values) == ChartValues()


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], path + "[]")
    return out


def test_every_object_we_own_refuses_unknown_keys_and_every_leaf_has_a_type() -> None:
    schema = values_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    for path, node in _walk(schema):
        leaf = path.rsplit(".", 1)[-1].removesuffix("[]")
        if node.get("type") == "object" and leaf not in FREE_FORM:
            assert node.get("additionalProperties") is not True, path
            if "properties" in node:
                assert node["additionalProperties"] is False, path
        assert "type" in node or "enum" in node, path
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
    assert "description" in schema["properties"]["operator"]["properties"]["healthPort"]


def _leaves(schema: dict[str, Any], values: dict[str, Any], path: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, sub in schema["properties"].items():
        key = f"{path}.{name}" if path else name
        if "properties" in sub:
            out.update(_leaves(sub, values.get(name, {}), key))
        else:
            out[key] = values.get(name, "<unset>")
    return out


def test_the_full_values_file_sets_every_value_to_something_else() -> None:
    """charts/a2rl/ci/full-values.yaml is the 'everything set' case of the helm tests."""
    full = yaml.safe_load((CHART / "ci" / "full-values.yaml").read_text())
    ChartValues.model_validate(full)
    schema = values_schema()
    defaults, given = _leaves(schema, default_values()), _leaves(schema, full)
    same = [k for k in defaults if given[k] in ("<unset>", defaults[k])]
    assert same == []


def test_the_table_documents_every_value() -> None:
    table = values_table()
    assert table.startswith(TABLE_BEGIN) and table.rstrip().endswith(TABLE_END)
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    for key in _leaves(values_schema(), default_values()):
        if not key.startswith("podDefaults."):
            assert key in rows, key
    assert "podDefaults.<workspace\\|eval\\|report\\|gateway>.nodeSelector" in rows


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"foo": {"bar": 1}}, "Extra inputs are not permitted"),
        ({"operator": {"healthPort": "abc"}}, "valid integer"),
        ({"podDefaults": {"eval": {"nodeSelektor": {}}}}, "Extra inputs are not permitted"),
        ({"store": {"egress": ["storage.example:9000"]}}, "pattern"),
        ({"imagePullSecrets": ["regcred"]}, "valid dictionary"),
    ],
)
def test_the_model_refuses_what_the_schema_refuses(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChartValues.model_validate(values)


def test_chart_cli_generate_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    docs = tmp_path / "install.md"
    docs.write_text(f"# Install\n\n{TABLE_BEGIN}\nold\n{TABLE_END}\n\nafter\n")
    assert main(["chart", "check", "--chart", str(chart), "--docs", str(docs)]) == 1
    assert "out of date" in capsys.readouterr().out
    assert main(["chart", "generate", "--chart", str(chart), "--docs", str(docs)]) == 0
    assert main(["chart", "check", "--chart", str(chart), "--docs", str(docs)]) == 0
    assert docs.read_text().endswith("\n\nafter\n") and "| `store.uri` |" in docs.read_text()
    assert json.loads((chart / "values.schema.json").read_text())["additionalProperties"] is False
    assert sorted(p.name for p in (chart / "crds").iterdir()) == sorted(
        p.name for p in (ROOT / "crds").glob("*.yaml")
    )
    docs.write_text("no table here\n")
    assert main(["chart", "check", "--chart", str(chart), "--docs", str(docs)]) == 2
