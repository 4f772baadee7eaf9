"""CRDs generated from the models: structural, defaults agree with the models, no drift in the repo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from a2rl_cli import main
from pydantic import BaseModel, Field

from a2rl.api import BenchRun, BenchSubmission
from a2rl.api.benchrun import SPEC_IMMUTABLE_MESSAGE
from a2rl.api.common import ApiModel, Quantity
from a2rl.api.crdgen import (
    BENCHRUN,
    BENCHSUBMISSION,
    KINDS,
    crd,
    generated_files,
    openapi_schema,
    to_structural,
    to_yaml,
)
from a2rl.api.docgen import api_reference
from a2rl.api.structural import apply_defaults, structural_problems, validate_value

REPO = Path(__file__).resolve().parents[2]


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    out = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        out += walk(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out += walk(node[key], f"{path}[]")
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind: Any) -> None:
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    text = yaml.safe_dump(schema)
    for banned in ("$ref", "$defs", "title:", "nullable", "additionalProperties: false", "const:"):
        assert banned not in text
    for path, node in walk(schema):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        for branch in node.get("anyOf", []):
            assert branch in ({"type": "integer"}, {"type": "string"}), path
        if path and path != ".metadata" and not path.endswith("[]"):
            assert node.get("description"), f"{path} has no description"
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["required"] == ["spec"]


def test_structural_checker_catches_what_the_api_server_refuses() -> None:
    assert structural_problems({"type": "object", "properties": {"a": {"$ref": "#/x"}}}) == [
        "a: unsupported key '$ref'",
        "a: no type",
    ]
    assert "x: anyOf outside x-kubernetes-int-or-string" in structural_problems(
        {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
    )
    assert structural_problems({"type": "integer", "minimum": 1, "default": 0}) == [
        "<root>: default <root>: must be >= 1"
    ]
    assert structural_problems({"type": "array"}) == ["<root>: array without items"]


def test_optional_fields_drop_null_and_are_not_required() -> None:
    spec = openapi_schema(BenchRun)["properties"]["spec"]
    budget = spec["properties"]["budget"]
    assert budget["required"] == ["wallTimeSeconds"]
    assert budget["properties"]["maxSubmissions"] == {
        "description": budget["properties"]["maxSubmissions"]["description"],
        "type": "integer",
        "minimum": 1,
        "maximum": 10000,
    }
    assert spec["properties"]["driver"]["type"] == "object"
    assert "driver" not in spec["required"]


def test_kubernetes_specific_shapes() -> None:
    schema = openapi_schema(BenchRun)
    spec, status = schema["properties"]["spec"]["properties"], schema["properties"]["status"]["properties"]
    cpu = spec["resources"]["properties"]["cpu"]
    assert cpu["x-kubernetes-int-or-string"] is True and "type" not in cpu and cpu["default"] == "2"
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert status["conditions"]["items"]["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert status["phase"]["enum"] == ["Pending", "Queued", "Running", "Grading", "Succeeded", "Failed"]
    assert spec["agent"]["properties"]["env"]["x-kubernetes-list-map-keys"] == ["name"]
    assert spec["evaluation"]["properties"]["backend"]["enum"] == ["auto", "transformers", "vllm"]


def test_dict_fields_become_additional_properties() -> None:
    class Labelled(ApiModel):
        labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
        size: Quantity | None = None

    raw = Labelled.model_json_schema(by_alias=True)
    node = to_structural(raw, raw.get("$defs", {}))
    assert node["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    assert "properties" not in node["properties"]["labels"]
    assert structural_problems(node) == []


@pytest.mark.parametrize(
    ("model", "doc"),
    [
        (
            BenchRun,
            {
                "apiVersion": "a2rl.dev/v1alpha1",
                "kind": "BenchRun",
                "metadata": {"name": "demo"},
                "spec": {
                    "task": "arith",
                    "baseModel": {"name": "tiny", "source": "builtin:tiny"},
                    "agent": {"command": ["x"], "env": [{"name": "A"}]},
                    "budget": {"wallTimeSeconds": 60},
                },
                "status": {
                    "conditions": [
                        {
                            "type": "Accepted",
                            "status": "True",
                            "reason": "Ok",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ]
                },
            },
        ),
        (
            BenchSubmission,
            {
                "apiVersion": "a2rl.dev/v1alpha1",
                "kind": "BenchSubmission",
                "metadata": {"name": "demo-00001"},
                "spec": {
                    "runName": "demo",
                    "index": 1,
                    "modelPath": "output/v1",
                    "modelDigest": "ab" * 32,
                    "manifestUri": "file:///s/m.json",
                    "submittedAt": "2026-01-01T00:00:00Z",
                },
                "status": {},
            },
        ),
    ],
)
def test_crd_defaults_agree_with_model_defaults(model: type[BaseModel], doc: dict[str, Any]) -> None:
    """What the API server would store equals what the model fills in."""
    schema = openapi_schema(model)
    assert validate_value(schema, doc) == []
    defaulted = apply_defaults(schema, doc)
    from_model = model.model_validate(doc).to_wire()  # type: ignore[attr-defined]
    assert defaulted["spec"] == from_model["spec"]
    assert defaulted["status"] == from_model["status"]
    assert validate_value(schema, defaulted) == []


def test_cel_rules() -> None:
    schema = openapi_schema(BenchRun)
    spec = schema["properties"]["spec"]
    # The whole spec is immutable (one transition rule, on spec; no field has one of its own).
    (spec_rule,) = [r for r in spec["x-kubernetes-validations"] if "oldSelf" in r["rule"]]
    assert spec_rule == {"rule": "self == oldSelf", "message": SPEC_IMMUTABLE_MESSAGE}
    assert "oldSelf" not in json.dumps(spec["properties"])
    env_rule = spec["properties"]["agent"]["properties"]["env"]["x-kubernetes-validations"][0]["rule"]
    assert "'TASK'" in env_rule and "'GRADING_SERVER_URL'" in env_rule
    assert "self.metadata.name" in schema["x-kubernetes-validations"][0]["rule"]
    sub_spec = openapi_schema(BenchSubmission)["properties"]["spec"]
    assert sub_spec["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    # CEL cost stays bounded: strings and lists under rules carry limits.
    for path, node in walk(spec):
        if node.get("type") == "string" and "enum" not in node and "format" not in node:
            assert "maxLength" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path


def _resolve(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    node = schema
    for part in json_path.lstrip(".").split("."):
        name = part.split("[")[0]
        node = node["properties"][name]
        if "[" in part:
            node = node["items"]
    return node


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_printer_columns_point_at_schema_fields_of_their_type(kind: Any) -> None:
    version = crd(kind)["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            assert column["type"] == "date"
            continue
        node = _resolve(schema, column["jsonPath"])
        assert node["type"] == column["type"], column
    for selectable in version.get("selectableFields", []):
        assert _resolve(schema, selectable["jsonPath"])["type"] in ("string", "integer", "boolean")


def test_crd_metadata() -> None:
    run = crd(BENCHRUN)
    assert run["metadata"]["name"] == "benchruns.a2rl.dev"
    assert run["spec"]["scope"] == "Namespaced"
    assert run["spec"]["names"]["shortNames"] == ["br"]
    assert run["spec"]["names"]["categories"] == ["a2rl"]
    assert run["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert [c["name"] for c in run["spec"]["versions"][0]["additionalPrinterColumns"]][:7] == [
        "Task", "Agent", "State", "Submissions", "Best", "Improvement", "Age",
    ]  # fmt: skip
    sub = crd(BENCHSUBMISSION)
    assert sub["spec"]["names"]["shortNames"] == ["bsub"]
    assert sub["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_yaml_is_deterministic_and_round_trips() -> None:
    for kind in KINDS:
        text = to_yaml(crd(kind))
        assert text == to_yaml(crd(kind))
        assert yaml.safe_load(text) == crd(kind)
        assert "&id" not in text and "*id" not in text


def test_committed_crds_match_the_models() -> None:
    for name, text in generated_files().items():
        committed = REPO / "crds" / name
        assert committed.is_file(), f"crds/{name} missing: run `a2rl crds generate`"
        assert committed.read_text(encoding="utf-8") == text, f"crds/{name} drifted: run `a2rl crds generate`"


def test_committed_api_reference_matches_the_models() -> None:
    docs = REPO / "docs" / "api.md"
    assert docs.read_text(encoding="utf-8") == api_reference(), "docs/api.md drifted: run `a2rl crds docs`"


def test_api_reference_documents_every_field() -> None:
    text = api_reference()
    for kind in KINDS:
        schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, _ in walk(schema):
            if path.startswith((".spec.", ".status.")) and not path.endswith("[]"):
                assert f"| `{path[1:]}` |" in text, path


def test_crds_cli_generate_check_and_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, docs = tmp_path / "crds", tmp_path / "api.md"
    assert main(["crds", "generate", "--out", str(out)]) == 0
    assert main(["crds", "docs", "--out", str(docs)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "a2rl.dev_benchcampaigns.yaml",
        "a2rl.dev_benchruns.yaml",
        "a2rl.dev_benchsubmissions.yaml",
    ]
    assert main(["crds", "check", "--dir", str(out), "--docs", str(docs)]) == 0
    stale = out / "a2rl.dev_benchruns.yaml"
    stale.write_text(stale.read_text().replace("maximum: 604800", "maximum: 1"))
    capsys.readouterr()
    assert main(["crds", "check", "--dir", str(out), "--docs", str(docs)]) == 1
    assert f"{stale}: out of date" in capsys.readouterr().out
    assert main(["crds", "check", "--dir", str(tmp_path / "nope"), "--docs", str(docs)]) == 2
    assert "no such directory" in capsys.readouterr().err
