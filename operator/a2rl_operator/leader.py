"""Leader election: two or more operator replicas, one reconciling (`a2rl operator --leader-elect`).

A `coordination.k8s.io/v1` Lease, as Kubernetes' own controllers hold theirs:

- a candidate takes the Lease when it does not exist, names no holder, or its record (holder,
  renew time, transitions) has not changed for `lease_duration_s` of the candidate's OWN clock
  since it first saw that record — so clock skew between replicas does not matter;
- the leader renews it every `retry_period_s`; each write carries the resourceVersion read just
  before, so of two candidates writing at once one gets 409 Conflict and stays a candidate;
- a leader that cannot renew for `renew_deadline_s` (< `lease_duration_s`) stops at once: the
  process exits, so it has stopped acting before any standby may take the Lease;
- on a clean stop (SIGTERM) the leader clears the holder, and a standby takes over at its next try.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import OPERATOR_LEASE
from a2rl_operator.kube import discard, none_if_missing, raw

log = logging.getLogger("a2rl.operator.leader")

SERVICEACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_identity() -> str:
    """The pod's name (its hostname in a cluster) and a random suffix: unique per process."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_namespace() -> str:
    """$POD_NAMESPACE (the chart sets it), the pod's ServiceAccount namespace, else `default`."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICEACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    identity: str
    name: str = OPERATOR_LEASE
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def problems(self) -> list[str]:
        out = []
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            out.append(
                "leader election needs 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_period_s:g} s, {self.renew_deadline_s:g} s, {self.lease_duration_s:g} s)"
            )
        return out


class Action(StrEnum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # ours
    TAKE = "take"  # free or expired
    WAIT = "wait"  # another holder's, still fresh


def record_of(spec: dict[str, Any]) -> tuple[Any, ...]:
    """What must change for a Lease to count as renewed."""
    return (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))


@dataclass
class Observation:
    """The last Lease record seen and when (the candidate's monotonic clock)."""

    record: tuple[Any, ...] | None = None
    at: float = 0.0


def decide(
    spec: dict[str, Any] | None, identity: str, seen: Observation, now: float, lease_duration_s: float
) -> Action:
    """What to do with the Lease `spec` (None: there is none). Updates `seen` when the record changed."""
    if spec is None:
        return Action.CREATE
    record = record_of(spec)
    if record != seen.record:
        seen.record, seen.at = record, now
    holder = spec.get("holderIdentity") or ""
    if holder == identity:
        return Action.RENEW
    if not holder or now - seen.at >= lease_duration_s:
        return Action.TAKE
    return Action.WAIT


def _micro_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(
    settings: LeaseSettings, current: dict[str, Any] | None, *, holder: str, now: datetime
) -> dict[str, Any]:
    """The Lease to write: ours renewed, taken over (transitions + 1), or released (no holder)."""
    spec = dict((current or {}).get("spec") or {})
    previous = spec.get("holderIdentity") or ""
    transitions = int(spec.get("leaseTransitions") or 0)
    if holder and holder != previous:
        spec["acquireTime"] = _micro_time(now)
        transitions += 1 if current is not None else 0
    spec.update(
        holderIdentity=holder or None,
        leaseDurationSeconds=max(1, round(settings.lease_duration_s)),
        renewTime=_micro_time(now),
        leaseTransitions=transitions,
    )
    meta: dict[str, Any] = {"name": settings.name, "namespace": settings.namespace}
    if current is not None:
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


class LeaseClient:
    """The Lease's reads and writes (blocking; the elector runs them in threads), as wire dicts."""

    def __init__(self, api: client.ApiClient, settings: LeaseSettings) -> None:
        leases = client.CoordinationV1Api(api)
        self._read: Callable[..., Any] = leases.read_namespaced_lease
        self._create: Callable[..., Any] = leases.create_namespaced_lease
        self._replace: Callable[..., Any] = leases.replace_namespaced_lease
        self._settings = settings

    def read(self) -> dict[str, Any] | None:
        s = self._settings
        response = none_if_missing(lambda: self._read(s.name, s.namespace, _preload_content=False))
        return None if response is None else raw(response)

    def write(self, body: dict[str, Any]) -> bool:
        """Create or replace; False when another replica wrote first (409)."""
        s = self._settings
        try:
            if "resourceVersion" in body["metadata"]:
                discard(self._replace(s.name, s.namespace, body, _preload_content=False))
            else:
                discard(self._create(s.namespace, body, _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


@dataclass
class LeaderElector:
    """`await acquire()` until this process leads, then `await hold()`, which returns only when the
    Lease is lost (`renew_deadline_s` without a successful renewal); `release()` on a clean stop."""

    lease: LeaseClient
    settings: LeaseSettings
    on_change: Callable[[bool], None] = lambda leading: None
    clock: Callable[[], float] = time.monotonic
    holder: str = ""  # the last holder seen (for /readyz and logs)
    _seen: Observation = field(default_factory=Observation)

    def _try(self) -> bool:
        """One round: True when this process holds the Lease afterwards."""
        current = self.lease.read()
        spec = (current or {}).get("spec") or None
        action = decide(
            spec, self.settings.identity, self._seen, self.clock(), self.settings.lease_duration_s
        )
        self.holder = str((spec or {}).get("holderIdentity") or "")
        if action == Action.WAIT:
            return False
        body = lease_body(self.settings, current, holder=self.settings.identity, now=datetime.now(UTC))
        if self.lease.write(body):
            self.holder = self.settings.identity
            return True
        return False

    async def acquire(self) -> None:
        waiting_logged = False
        while True:
            try:
                if await asyncio.to_thread(self._try):
                    log.info("leading: holds Lease %s/%s", self.settings.namespace, self.settings.name)
                    self.on_change(True)
                    return
                if not waiting_logged:
                    log.info("standby: Lease %s/%s is held by %s", self.settings.namespace,
                             self.settings.name, self.holder or "?")  # fmt: skip
                    waiting_logged = True
            except Exception as exc:  # the API server unreachable: keep trying
                log.warning("leader election: %s", exc)
            await asyncio.sleep(self.settings.retry_period_s)

    async def hold(self) -> None:
        last_renewed = self.clock()
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            try:
                if await asyncio.to_thread(self._try):
                    last_renewed = self.clock()
                    continue
                reason = f"the Lease is now held by {self.holder or 'nobody'}"
            except Exception as exc:
                reason = f"renewing failed: {exc}"
            if self.clock() - last_renewed >= self.settings.renew_deadline_s or self.holder not in (
                "",
                self.settings.identity,
            ):
                log.error("lost the leader Lease (%s)", reason)
                self.on_change(False)
                return
            log.warning("leader election: %s; retrying", reason)

    def release(self) -> None:
        """Clear the holder if it is still us, so a standby takes over at once."""
        try:
            current = self.lease.read()
            if current and (current.get("spec") or {}).get("holderIdentity") == self.settings.identity:
                self.lease.write(lease_body(self.settings, current, holder="", now=datetime.now(UTC)))
                log.info("released Lease %s/%s", self.settings.namespace, self.settings.name)
        except Exception as exc:  # the standby takes over when the Lease expires instead
            log.warning("could not release the leader Lease: %s", exc)
        self.on_change(False)
