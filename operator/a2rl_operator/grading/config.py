"""Settings of grading in a cluster (eval Jobs, the end of a run, the report Job).

Read once at start-up from the operator's environment (the Helm chart sets them), as the
`grading` part of `OperatorConfig`; never at import. Grading is on
when a grader image is named (`A2RL_GRADER_IMAGE`); without one the operator reconciles
workspaces only and a run ends when its agent does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from a2rl.api.benchrun import BenchRunSpec
from a2rl.constants import (
    DEFAULT_EVAL_TIMEOUT_S,
    ENV_EVAL_TIMEOUT,
    ENV_GRADER_IMAGE,
    ENV_GRADING_DRAIN_TIMEOUT,
    ENV_GRADING_RESYNC,
    ENV_HELDOUT_PVC,
    ENV_JUDGE_BASE_URL,
    ENV_JUDGE_MODEL,
    ENV_REPORT_TIMEOUT,
    ENV_SEARCH_URL,
    ENV_SUBMIT_ALLOWANCE,
)
from a2rl.errors import A2rlError

DEFAULT_REPORT_TIMEOUT_S = 1800
DEFAULT_DRAIN_TIMEOUT_S = 1800
DEFAULT_RESYNC_S = 30.0
DEFAULT_SUBMIT_ALLOWANCE_S = 600
#: Non-secret settings of judge-based tasks forwarded from the operator to every eval Job.
FORWARDED_EVAL_ENV = (ENV_JUDGE_BASE_URL, ENV_JUDGE_MODEL, ENV_SEARCH_URL)
#: Those of them that are URLs of services the eval pods call (their NetworkPolicy allows them).
ENDPOINT_ENV = (ENV_JUDGE_BASE_URL, ENV_SEARCH_URL)


@dataclass(frozen=True)
class GradingConfig:
    #: Image of eval and report Jobs (`a2rl eval …`, `a2rl report …`); None: grading is off.
    grader_image: str | None = None
    #: activeDeadlineSeconds of one eval Job.
    eval_timeout_s: int = DEFAULT_EVAL_TIMEOUT_S
    #: activeDeadlineSeconds of the report Job.
    report_timeout_s: int = DEFAULT_REPORT_TIMEOUT_S
    #: How long the end of a run waits for in-flight evaluations before it writes the report.
    drain_timeout_s: int = DEFAULT_DRAIN_TIMEOUT_S
    #: Seconds between re-observations of a run being graded (safety net for missed events).
    resync_s: float = DEFAULT_RESYNC_S
    #: A BenchSubmission created this long after the run's deadline (+ grace) is refused even
    #: when its `submittedAt` is in time (the snapshot upload happens between the two).
    submit_allowance_s: int = DEFAULT_SUBMIT_ALLOWANCE_S
    #: PVC holding staged held-out data (`data/<task>/<version>-seed<seed>/heldout`); None: the
    #: eval Job's init container fetches it from the run's store.
    heldout_pvc: str | None = None
    #: Extra (non-secret) environment of eval Jobs, e.g. the judge's base URL and model.
    eval_env: Mapping[str, str] = field(default_factory=dict)
    eval_fetch_cpu: str = "500m"
    eval_fetch_memory: str = "1Gi"
    #: Ephemeral storage of the held-out fetch (request = limit) and the size of the held-out emptyDir.
    eval_fetch_ephemeral_storage: str = "5Gi"
    report_cpu: str = "1"
    report_memory: str = "2Gi"
    #: Ephemeral storage of the report container (request = limit) and the size of its scratch.
    report_ephemeral_storage: str = "5Gi"

    @property
    def enabled(self) -> bool:
        return bool(self.grader_image)

    def run_eval_env(self, spec: BenchRunSpec) -> dict[str, str]:
        """The non-secret settings of the run's evaluations: the operator's, overridden by the
        run's own judge (`spec.evaluation.judge`)."""
        return {**dict(self.eval_env), **spec.evaluation.settings_env()}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GradingConfig:
        e = os.environ if env is None else env
        return cls(
            grader_image=e.get(ENV_GRADER_IMAGE, "").strip() or None,
            eval_timeout_s=_int(e, ENV_EVAL_TIMEOUT, DEFAULT_EVAL_TIMEOUT_S),
            report_timeout_s=_int(e, ENV_REPORT_TIMEOUT, DEFAULT_REPORT_TIMEOUT_S),
            drain_timeout_s=_int(e, ENV_GRADING_DRAIN_TIMEOUT, DEFAULT_DRAIN_TIMEOUT_S, minimum=0),
            resync_s=float(_int(e, ENV_GRADING_RESYNC, int(DEFAULT_RESYNC_S))),
            submit_allowance_s=_int(e, ENV_SUBMIT_ALLOWANCE, DEFAULT_SUBMIT_ALLOWANCE_S, minimum=0),
            heldout_pvc=e.get(ENV_HELDOUT_PVC, "").strip() or None,
            eval_env={k: e[k] for k in FORWARDED_EVAL_ENV if e.get(k, "").strip()},
        )


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(float(raw))
    except ValueError:
        raise A2rlError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value < minimum:
        raise A2rlError(f"{name} must be at least {minimum}, got {value}")
    return value
