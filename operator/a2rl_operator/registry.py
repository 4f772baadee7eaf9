"""The operator's kopf registry: every handler, registered explicitly, and kopf's settings.

`a2rl operator` reads its configuration once (`OperatorConfig`, grading included), builds the
registry with `build_registry(config)` and passes it to `kopf.run(registry=...)`, with the
config in `memo.config`. Nothing registers itself on import: the order handlers run in is the
order written in `benchrun.register`, `benchsubmission.register` and `campaign.register`.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from a2rl.constants import (
    API_GROUP,
    API_VERSION,
    BENCHRUN_PLURAL,
    BENCHSUBMISSION_PLURAL,
    FINALIZER,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from a2rl_operator import benchrun, benchsubmission, campaign, kopf_state, metrics
from a2rl_operator.config import OperatorConfig
from a2rl_operator.manifests.grading_network import egress_problems

Logger = logging.Logger | logging.LoggerAdapter[Any]
MAX_WORKERS = 16  # threads for sync handlers (and pooled API connections)


def configure(settings: kopf.OperatorSettings) -> None:
    """Our names for kopf's state (finalizer and annotations under the a2rl.dev group) and its settings."""
    settings.persistence.finalizer = FINALIZER
    # kopf's per-object state, kept so that a handled run needs no PATCH of kopf's own (`kopf_state`).
    settings.persistence.progress_storage = kopf_state.progress_storage()
    settings.persistence.diffbase_storage = kopf_state.diffbase_storage()
    # Watches filtered by the API server: only our Jobs and pods (every handler's label filter
    # includes this one), only the Job controller's pod-creation failures among the Events
    # (`on_quota_event`). Unfiltered, kopf decodes and queues every Job, pod and Event in scope.
    ours = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    settings.watching.label_selectors["batch", "v1", "jobs"] = ours
    settings.watching.label_selectors["", "v1", "pods"] = ours
    settings.watching.field_selectors["", "v1", "events"] = benchrun.QUOTA_EVENT_FIELDS
    # Only our explicit Events (and kopf's warnings) reach users; no "Handler succeeded" noise.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = MAX_WORKERS


def _startup(settings: kopf.OperatorSettings, memo: Any, logger: Logger, **_: Any) -> None:
    configure(settings)
    config: OperatorConfig = memo.config
    grading = config.grading
    if grading.enabled:
        logger.info("grading on: eval and report Jobs use %s", grading.grader_image)
        for problem in egress_problems(grading):
            logger.error("%s: runs of judge-based tasks without spec.evaluation.judge will fail", problem)
    else:
        logger.info("grading off (no A2RL_GRADER_IMAGE): runs end when their agent does")


def on_namespace(body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
    memo.kube.terminating.observe(body, type)


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    """A registry with every handler of the operator (BenchRuns, BenchSubmissions, BenchCampaigns)."""
    registry = kopf.OperatorRegistry()
    # kopf's default registry would add this on its own: the credentials the kubernetes client
    # loaded (the kubeconfig, or the pod's ServiceAccount), as `a2rl operator` set them up.
    kopf.on.login(id="login_via_client", registry=registry)(kopf.login_via_client)
    kopf.on.startup(registry=registry)(_startup)
    # First: which namespaces are being deleted (no status writes, Events or reconciles there).
    kopf.on.event("", "v1", "namespaces", id="terminating", registry=registry)(on_namespace)
    benchrun.register(registry, config)
    benchsubmission.register(registry)
    campaign.register(registry, config)
    # /metrics: every run's and submission's state, from the watch kopf keeps anyway.
    for plural, observe in (
        (BENCHRUN_PLURAL, metrics.on_run_event),
        (BENCHSUBMISSION_PLURAL, metrics.on_submission_event),
    ):
        kopf.on.event(API_GROUP, API_VERSION, plural, id="metrics", registry=registry)(observe)
    return registry
