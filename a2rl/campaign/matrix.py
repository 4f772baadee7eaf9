"""A campaign's runs: every combination of its matrix's axes (a *cell*) x seeds x repeats, each
with a deterministic name and the BenchRun spec it runs.

Names are `<campaign>-<cell key>-s<seed>` (`-r<n>` added when `repeats` > 1): the same campaign
always expands to the same names, so creating them again after a restart is a no-op, and a local
`a2rl campaign run` finds the runs it already did.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from a2rl.api.benchcampaign import MAX_RUNS, BenchCampaignSpec, CampaignMatrix
from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import LABEL_CAMPAIGN, LABEL_CAMPAIGN_CELL
from a2rl.errors import A2rlError

Wire = dict[str, Any]


class CampaignError(A2rlError):
    """The campaign cannot be expanded (a cell's spec is invalid, too many runs, …)."""


@dataclass(frozen=True)
class Cell:
    """One combination of axis values, e.g. `(("stack", "codex"), ("protocol", "a2rl"))`."""

    axes: tuple[tuple[str, str], ...]

    @property
    def key(self) -> str:
        """8 hex digits naming the cell in run names and labels (stable for the same axis values)."""
        canonical = json.dumps(list(self.axes), separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:8]

    @property
    def label(self) -> str:
        """`stack=codex, protocol=a2rl` (`all runs` for a matrix without axes)."""
        return ", ".join(f"{axis}={value}" for axis, value in self.axes) or "all runs"

    def as_dict(self) -> dict[str, str]:
        return dict(self.axes)


@dataclass(frozen=True)
class PlannedRun:
    """One run of a campaign: its cell, seed, repeat, name and spec."""

    cell: Cell
    seed: int
    repeat: int
    name: str
    spec: BenchRunSpec


def run_labels(campaign: str, cell: Cell) -> dict[str, str]:
    """The labels a campaign puts on each of its runs (and its run.json keeps)."""
    return {LABEL_CAMPAIGN: campaign, LABEL_CAMPAIGN_CELL: cell.key}


def run_name(campaign: str, cell: Cell, seed: int, repeat: int, repeats: int) -> str:
    suffix = f"-r{repeat}" if repeats > 1 else ""
    return f"{campaign}-{cell.key}-s{seed}{suffix}"


# --- axes: (name in cell keys, values, how a value is displayed, how it changes the spec) -------


def _set_task(spec: Wire, value: Any) -> None:
    spec["task"] = value


def _set_agent(spec: Wire, value: Any) -> None:
    spec["agent"] = value.agent.to_wire()
    if value.driver is not None:
        spec["driver"] = value.driver.to_wire()
    else:
        spec.pop("driver", None)


def _set_stack(spec: Wire, value: Any) -> None:
    spec.setdefault("agent", {})["stack"] = value


def _set_driver_model(spec: Wire, value: Any) -> None:
    if "driver" not in spec:
        raise CampaignError("matrix.driverModels needs a driver in the template (spec.template.driver)")
    spec["driver"]["model"] = value


def _set_mode(spec: Wire, value: Any) -> None:
    spec.setdefault("agent", {})["mode"] = value


def _set_base_model(spec: Wire, value: Any) -> None:
    spec["baseModel"] = value.to_wire()


def _set_protocol(spec: Wire, value: Any) -> None:
    spec.setdefault("evaluation", {})["protocol"] = value


@dataclass(frozen=True)
class _Axis:
    name: str
    values: list[Any]
    show: Callable[[Any], str]
    apply: Callable[[Wire, Any], None]


def _axes(matrix: CampaignMatrix) -> list[_Axis]:
    """The matrix's given axes, in a fixed order (agents before stacks: a stack overrides a
    variant's agent)."""
    candidates: list[tuple[str, Sequence[Any] | None, Callable[[Any], str], Callable[[Wire, Any], None]]] = [
        ("task", matrix.tasks, str, _set_task),
        ("agent", matrix.agents, lambda v: v.name, _set_agent),
        ("stack", matrix.stacks, str, _set_stack),
        ("driverModel", matrix.driver_models, str, _set_driver_model),
        ("mode", matrix.modes, str, _set_mode),
        ("baseModel", matrix.base_models, lambda v: v.name, _set_base_model),
        ("protocol", matrix.protocols, str, _set_protocol),
    ]
    return [_Axis(name, list(values), show, apply) for name, values, show, apply in candidates if values]


def _combinations(axes: list[_Axis]) -> list[list[tuple[_Axis, Any]]]:
    combos: list[list[tuple[_Axis, Any]]] = [[]]
    for axis in axes:
        combos = [[*combo, (axis, value)] for combo in combos for value in axis.values]
    return combos


def expand(campaign: str, spec: BenchCampaignSpec) -> list[PlannedRun]:
    """Every run of the campaign, cell by cell, seed by seed, repeat by repeat.

    Raises `CampaignError` naming the cell when a combination is not a valid BenchRun spec, or
    when the campaign has more than `MAX_RUNS` runs.
    """
    axes = _axes(spec.matrix)
    combos = _combinations(axes)
    total = len(combos) * len(spec.matrix.seeds) * spec.repeats
    if total > MAX_RUNS:
        raise CampaignError(f"the campaign has {total} runs; at most {MAX_RUNS} are allowed")
    template = spec.template.to_wire()
    planned: list[PlannedRun] = []
    for combo in combos:
        cell = Cell(tuple((axis.name, axis.show(value)) for axis, value in combo))
        cell_spec = copy.deepcopy(template)
        for axis, value in combo:
            axis.apply(cell_spec, value)
        for seed in spec.matrix.seeds:
            cell_spec["seed"] = seed
            try:
                run_spec = BenchRunSpec.model_validate(copy.deepcopy(cell_spec))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise CampaignError(f"cell {cell.label}: spec.{where}: {first['msg']}") from exc
            for repeat in range(1, spec.repeats + 1):
                name = run_name(campaign, cell, seed, repeat, spec.repeats)
                planned.append(PlannedRun(cell, seed, repeat, name, run_spec))
    return planned


def cells_of(planned: list[PlannedRun]) -> list[Cell]:
    """The distinct cells, in matrix order."""
    seen: dict[str, Cell] = {}
    for run in planned:
        seen.setdefault(run.cell.key, run.cell)
    return list(seen.values())
