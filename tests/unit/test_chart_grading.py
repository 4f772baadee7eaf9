"""The Helm chart's grading settings reach the operator as the variables it reads, with the same
defaults as the code (no helm binary in CI: the template and values are read as text/YAML)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from a2rl_operator.grading import config as gc

from a2rl import constants as c

CHART = Path(__file__).resolve().parents[2] / "charts" / "a2rl"


def test_deployment_passes_every_grading_setting_the_operator_reads() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"\{name: (A2RL_[A-Z_]+),", template))
    read = {c.ENV_GRADER_IMAGE, c.ENV_EVAL_TIMEOUT, c.ENV_REPORT_TIMEOUT, c.ENV_GRADING_DRAIN_TIMEOUT,
            c.ENV_SUBMIT_ALLOWANCE, c.ENV_HELDOUT_PVC, *gc.FORWARDED_EVAL_ENV}  # fmt: skip
    # Besides grading, the chart passes the child pods' defaults (a2rl_operator.config).
    assert names == read | {c.ENV_POD_DEFAULTS, c.ENV_IMAGE_PULL_SECRETS}
    # Set from the chart, GradingConfig parses them into the same values as its defaults.
    grading = yaml.safe_load((CHART / "values.yaml").read_text())["grading"]
    env = {
        c.ENV_GRADER_IMAGE: "ghcr.io/a2rl/grader:0.1.0",
        c.ENV_EVAL_TIMEOUT: str(grading["evalTimeoutSeconds"]),
        c.ENV_REPORT_TIMEOUT: str(grading["reportTimeoutSeconds"]),
        c.ENV_GRADING_DRAIN_TIMEOUT: str(grading["drainTimeoutSeconds"]),
        c.ENV_SUBMIT_ALLOWANCE: str(grading["submitAllowanceSeconds"]),
        c.ENV_JUDGE_BASE_URL: "http://judge:8000/v1",
    }
    cfg = gc.GradingConfig.from_env(env)
    assert cfg.enabled and cfg.grader_image == "ghcr.io/a2rl/grader:0.1.0"
    assert (cfg.eval_timeout_s, cfg.report_timeout_s, cfg.drain_timeout_s, cfg.submit_allowance_s) == (
        c.DEFAULT_EVAL_TIMEOUT_S,
        gc.DEFAULT_REPORT_TIMEOUT_S,
        gc.DEFAULT_DRAIN_TIMEOUT_S,
        gc.DEFAULT_SUBMIT_ALLOWANCE_S,
    )
    assert dict(cfg.eval_env) == {c.ENV_JUDGE_BASE_URL: "http://judge:8000/v1"}
    assert grading["graderImage"] == ""  # grading is opt-in


def test_deployment_args_are_operator_flags_and_image_defaults_match_the_code() -> None:
    from a2rl_cli import build_parser
    from a2rl_operator.config import DEFAULT_RECORDER_IMAGE, DEFAULT_SETUP_IMAGE

    template = (CHART / "templates" / "deployment.yaml").read_text()
    flags = set(re.findall(r"^\s+- (--[a-z-]+)=", template, flags=re.M))
    assert {"--recorder-image", "--setup-image", "--store-egress"} <= flags
    operator = build_parser()._subparsers._group_actions[0].choices["operator"]  # type: ignore[union-attr]
    known = {opt for action in operator._actions for opt in action.option_strings}
    assert flags <= known, flags - known
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["recorder"]["image"] == DEFAULT_RECORDER_IMAGE
    assert values["recorder"]["setupImage"] == DEFAULT_SETUP_IMAGE
