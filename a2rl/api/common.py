"""Building blocks shared by the BenchRun and BenchSubmission models.

Kubernetes-only schema facts (CEL rules, list types, int-or-string) are attached to the models
with `json_schema_extra`, so `a2rl.api.crdgen` can turn the models into CRDs without a second
description of the API.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

# Extension keys of the Kubernetes structural schema (apiextensions.k8s.io/v1).
X_VALIDATIONS = "x-kubernetes-validations"
X_INT_OR_STRING = "x-kubernetes-int-or-string"
X_LIST_TYPE = "x-kubernetes-list-type"
X_LIST_MAP_KEYS = "x-kubernetes-list-map-keys"


class ApiModel(BaseModel):
    """Kubernetes-style model: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )

    def to_wire(self, *, only_set: bool = False) -> dict[str, Any]:
        """The JSON-ready dict as Kubernetes stores it (aliases, no None fields); with `only_set`,
        also without the fields left at their defaults (what was read or assigned, nothing more)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=only_set)


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, Any]:
    """One `x-kubernetes-validations` entry (a CEL rule the API server evaluates)."""
    entry: dict[str, Any] = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def immutable(what: str) -> dict[str, Any]:
    """`json_schema_extra` making a field immutable once created (a CEL transition rule)."""
    return {X_VALIDATIONS: [cel("self == oldSelf", f"{what} is immutable; create a new object instead")]}


def rule_error(message: str, subpath: str = "") -> PydanticCustomError:
    """A validation error of a model rule; `subpath` (e.g. `[2].name`) locates it below the field."""
    return PydanticCustomError("a2rl_rule", "{message}", {"message": message, "subpath": subpath})


def map_list(*keys: str) -> dict[str, Any]:
    """`json_schema_extra` for a list of objects merged by key (like metav1.Condition lists)."""
    return {X_LIST_TYPE: "map", X_LIST_MAP_KEYS: list(keys)}


# DNS-1123 label: what Kubernetes accepts as a label value, Job name prefix or Service name.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# DNS-1123 subdomain: what Kubernetes accepts as the name of any custom resource.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

Name = Annotated[
    str,
    Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL,
        description="A lowercase DNS-1123 label: at most 63 of `a-z`, `0-9`, `-`.",
    ),
]
SubdomainName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="A lowercase DNS-1123 subdomain: at most 253 of `a-z`, `0-9`, `-`, `.`.",
    ),
]


def _quantity_from_int(value: Any) -> Any:
    # YAML `cpu: 2` is an integer; Kubernetes accepts it for a quantity, and so do we.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"
Quantity = Annotated[
    str,
    BeforeValidator(_quantity_from_int),
    Field(
        max_length=64,
        pattern=QUANTITY_PATTERN,
        description="A Kubernetes quantity, e.g. `2`, `500m`, `16Gi`.",
        json_schema_extra={X_INT_OR_STRING: True},
    ),
]


_QUANTITY_UNITS = {
    "": 1, "m": 0.001, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}  # fmt: skip


def quantity_value(quantity: str) -> float:
    """A Kubernetes quantity (`QUANTITY_PATTERN`) as a number: `8Gi` → 8589934592, `500m` → 0.5."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(m|k|Ki|Mi|Gi|Ti|M|G|T)?", quantity.strip())
    if match is None:
        raise ValueError(f"not a quantity: {quantity!r}")
    return float(match.group(1)) * _QUANTITY_UNITS[match.group(2) or ""]


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A metav1.Condition: one observation of the object's state."""

    type: str = Field(
        min_length=1,
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="CamelCase condition type, e.g. `AgentRunning` (one entry per type).",
    )
    status: ConditionStatus = Field(description="Whether the condition holds: `True`, `False` or `Unknown`.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="CamelCase reason of the last transition, e.g. `DeadlineExceeded`.",
    )
    message: str = Field(default="", max_length=32768, description="Human-readable detail of the transition.")
    last_transition_time: datetime = Field(description="When `status` last changed.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The `metadata.generation` the condition was computed from."
    )


class EnvVar(ApiModel):
    """One environment variable."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Variable name.",
    )
    value: str = Field(default="", max_length=32768, description="Variable value.")


class SecretKeyRef(ApiModel):
    """A key of a Secret in the object's namespace."""

    name: Name = Field(description="Name of a Secret in the BenchRun's namespace.")
    key: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key inside the Secret.",
    )
