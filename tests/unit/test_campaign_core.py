"""BenchCampaign's model, matrix expansion, t-intervals and roll-up (pure functions)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from a2rl.api.benchcampaign import MAX_CAMPAIGN_NAME, BenchCampaign
from a2rl.campaign.matrix import CampaignError, expand
from a2rl.campaign.rollup import RunOutcome, best_cell_line, rollup
from a2rl.campaign.stats import mean_ci, t95

ROOT = Path(__file__).resolve().parents[2]


def _template() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "examples" / "arith-sft.yaml").read_text())["spec"])


def _campaign(matrix: dict[str, Any], name: str = "camp", **spec: Any) -> BenchCampaign:
    return BenchCampaign.model_validate(
        {"metadata": {"name": name}, "spec": {"template": _template(), "matrix": matrix, **spec}}
    )


def test_expansion_is_every_cell_times_seeds_times_repeats_with_stable_unique_names() -> None:
    campaign = _campaign(
        {
            "protocols": ["a2rl", "reference"],
            "baseModels": [
                {"name": "tiny", "source": "builtin:tiny"},
                {"name": "other", "source": "builtin:tiny"},
            ],
            "seeds": [0, 7],
        },
        repeats=2,
    )
    runs = expand("camp", campaign.spec)
    assert len(runs) == 2 * 2 * 2 * 2
    assert len({r.name for r in runs}) == len(runs)
    assert all(len(r.name) <= 63 and r.name.startswith("camp-") for r in runs)
    assert {(r.spec.evaluation.protocol, r.spec.base_model.name, r.spec.seed) for r in runs} == {
        (p, b, s) for p in ("a2rl", "reference") for b in ("tiny", "other") for s in (0, 7)
    }
    # the same campaign expands to the same names (a restart creates no duplicate)
    assert [r.name for r in expand("camp", campaign.spec)] == [r.name for r in runs]
    assert {r.repeat for r in runs} == {1, 2}
    # the template's other settings are kept
    assert {r.spec.task for r in runs} == {"arith"}
    assert all(r.spec.budget == runs[0].spec.budget for r in runs)


def test_an_invalid_cell_is_named() -> None:
    campaign = _campaign({"stacks": ["codex"]})  # the template runs a command
    with pytest.raises(CampaignError, match=r"cell stack=codex: spec\.agent: set either command"):
        expand("camp", campaign.spec)


def test_a_long_name_and_duplicate_axis_values_are_refused() -> None:
    with pytest.raises(ValidationError, match="at most"):
        _campaign({}, name="c" * (MAX_CAMPAIGN_NAME + 1))
    with pytest.raises(ValidationError, match="distinct"):
        _campaign({"seeds": [1, 1]})
    longest = _campaign({"seeds": [2**31 - 1]}, name="c" * MAX_CAMPAIGN_NAME, repeats=20)
    assert max(len(r.name) for r in expand(longest.metadata.name, longest.spec)) <= 63


def test_t_interval_matches_the_textbook_values() -> None:
    assert t95(1) == pytest.approx(12.706, abs=1e-3)
    assert t95(40) == pytest.approx(2.021, abs=1e-3)
    assert t95(120) == pytest.approx(1.980, abs=1e-3)
    values = [10.0, 12.0, 17.0]
    interval = mean_ci(values)
    half = 4.303 * statistics.stdev(values) / 3**0.5
    assert interval.mean == pytest.approx(13.0)
    assert (interval.low, interval.high) == pytest.approx((13.0 - half, 13.0 + half))
    assert mean_ci([5.0]).low is None and mean_ci([]).mean is None


def test_rollup_counts_phases_and_summarises_each_cell() -> None:
    campaign = _campaign({"protocols": ["a2rl", "reference"], "seeds": [0, 1, 2]})
    runs = expand("camp", campaign.spec)
    a2rl_runs = [r.name for r in runs if r.spec.evaluation.protocol == "a2rl"]
    ref_runs = [r.name for r in runs if r.spec.evaluation.protocol == "reference"]
    outcomes = {
        a2rl_runs[0]: RunOutcome("Succeeded", baseline_score=1.0, best_score=31.0, improvement=30.0),
        a2rl_runs[1]: RunOutcome("Succeeded", baseline_score=1.0, best_score=41.0, improvement=40.0),
        # no valid submission: the base model is the result (improvement 0), not left out
        a2rl_runs[2]: RunOutcome("Failed", baseline_score=1.0, driver_cost_usd=0.5),
        ref_runs[0]: RunOutcome("Running", driver_cost_usd=0.25),
        ref_runs[1]: RunOutcome("Queued"),
    }
    result = rollup(runs, outcomes)
    counts = result.counts
    assert (
        counts.total,
        counts.succeeded,
        counts.failed,
        counts.running,
        counts.queued,
        counts.not_created,
    ) == (
        6,
        2,
        1,
        1,
        1,
        1,
    )
    assert not result.done
    first, second = result.cells
    assert (first.runs, first.finished, first.failed) == (3, 3, 1)
    assert first.improvement.mean == pytest.approx(70.0 / 3)
    assert first.best_score.mean == pytest.approx(73.0 / 3)
    assert first.success_rate == pytest.approx(2 / 3)
    assert first.driver_cost_usd == pytest.approx(0.5)
    assert second.finished == 0 and second.improvement.mean is None and second.success_rate is None
    assert result.driver_cost_usd == pytest.approx(0.75)
    assert result.best is first
    assert best_cell_line(result) is not None and best_cell_line(result).startswith("protocol=a2rl: +23.3 ± ")  # type: ignore[union-attr]
