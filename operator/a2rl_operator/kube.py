"""Kubernetes I/O of the operator: idempotent creation of children, reads, status writes, Events.

Creation is create-first: a 409 AlreadyExists means a previous attempt (or a previous operator
process) created it; the existing object is accepted when the BenchRun owns it. Status is
written with `replace` guarded by resourceVersion, retried on 409, so concurrent handlers
(Job, Pod and Event watchers of one run) never lose each other's conditions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from a2rl.constants import (
    API_GROUP,
    API_VERSION,
    BENCHRUN_KIND,
    BENCHRUN_PLURAL,
    LABEL_COMPONENT,
    LABEL_RUN_UID,
)
from a2rl_operator.namespaces import TerminatingNamespaces

Obj = dict[str, Any]
T = TypeVar("T")


def none_if_missing(call: Callable[[], T]) -> T | None:
    """`call()`, or None when the API server answers 404 Not Found."""
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def raw(response: Any) -> Obj:
    """The JSON body of a `_preload_content=False` call: the typed models of the kubernetes
    client cost CPU per object on every read, and the operator works with wire dicts anyway."""
    data: Obj = json.loads(response.data)
    return data


def plain(body: Mapping[str, Any]) -> Obj:
    """A handler's kopf.Body as a wire dict (what the manifest builders and decisions take)."""
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": dict(body["metadata"]),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


class NameConflictError(Exception):
    """A child's name is taken by an object the BenchRun does not own."""


class NamespaceTerminatingError(Exception):
    """The namespace is being deleted: nothing can be created in it (the run goes with it)."""


def is_namespace_terminating(exc: ApiException) -> bool:
    """A 403 the API server answers to a create in a namespace that is being deleted."""
    if exc.status != 403:
        return False
    try:
        details = (json.loads(exc.body or "{}") or {}).get("details") or {}
    except ValueError:
        return False
    return any(c.get("reason") == "NamespaceTerminating" for c in details.get("causes") or [])


class Kube:
    def __init__(self, api: client.ApiClient, terminating: TerminatingNamespaces | None = None) -> None:
        self.api = api
        #: Namespaces being deleted: no status writes, no Events, no reconciling there.
        self.terminating = terminating if terminating is not None else TerminatingNamespaces()
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.net = client.NetworkingV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # --- children -------------------------------------------------------------------------

    def _ops(self, kind: str) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
        """(create, read) for a kind; read is None where the operator may not read (Secrets)."""
        ops: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {
            "PersistentVolumeClaim": (
                self.core.create_namespaced_persistent_volume_claim,
                self.core.read_namespaced_persistent_volume_claim,
            ),
            "ServiceAccount": (
                self.core.create_namespaced_service_account,
                self.core.read_namespaced_service_account,
            ),
            # The operator has no `get` on Secrets (least privilege): a 409 is taken as ours.
            "Secret": (self.core.create_namespaced_secret, None),
            "Role": (self.rbac.create_namespaced_role, self.rbac.read_namespaced_role),
            "RoleBinding": (self.rbac.create_namespaced_role_binding, self.rbac.read_namespaced_role_binding),
            "NetworkPolicy": (
                self.net.create_namespaced_network_policy,
                self.net.read_namespaced_network_policy,
            ),
            "Job": (self.batch.create_namespaced_job, self.batch.read_namespaced_job),
            "Service": (self.core.create_namespaced_service, self.core.read_namespaced_service),
        }
        return ops[kind]

    def ensure(self, manifest: Obj, owner_uid: str) -> bool:
        """Create `manifest` unless it exists; True when this call created it."""
        meta = manifest["metadata"]
        create, read = self._ops(manifest["kind"])
        try:
            create(meta["namespace"], manifest, _preload_content=False)
            return True
        except ApiException as exc:
            if is_namespace_terminating(exc):
                self.terminating.mark(meta["namespace"])
                raise NamespaceTerminatingError(f"namespace {meta['namespace']} is being deleted") from None
            if exc.status != 409:
                raise
        if read is None:
            return False
        existing = raw(read(meta["name"], meta["namespace"], _preload_content=False))
        owners = (existing.get("metadata") or {}).get("ownerReferences") or []
        if not any(o.get("uid") == owner_uid for o in owners):
            raise NameConflictError(
                f"{manifest['kind']} {meta['name']} exists and is not owned by this BenchRun"
            )
        return False

    def get_owned(self, manifest: Obj, owner_uid: str) -> Obj | None:
        """The object `manifest` names when it exists and `owner_uid` owns it (not for Secrets)."""
        meta = manifest["metadata"]
        read = self._ops(manifest["kind"])[1]
        assert read is not None, f"the operator does not read {manifest['kind']}s"
        existing = none_if_missing(lambda: raw(read(meta["name"], meta["namespace"], _preload_content=False)))
        owners = ((existing or {}).get("metadata") or {}).get("ownerReferences") or []
        return existing if any(o.get("uid") == owner_uid for o in owners) else None

    # --- reads ----------------------------------------------------------------------------

    def service_cluster_ip(self, namespace: str, name: str) -> str | None:
        """A Service's ClusterIP; None when it is missing or headless."""
        svc = none_if_missing(
            lambda: raw(self.core.read_namespaced_service(name, namespace, _preload_content=False))
        )
        ip = ((svc or {}).get("spec") or {}).get("clusterIP")
        return ip if ip and ip != "None" else None

    def get_custom(self, plural: str, namespace: str, name: str) -> Obj | None:
        """One of our custom objects (`plural` of the a2rl API group); None when it is gone."""
        obj = none_if_missing(
            lambda: self.custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, plural, name)
        )
        assert obj is None or isinstance(obj, dict)
        return obj

    def get_run(self, namespace: str, name: str) -> Obj | None:
        return self.get_custom(BENCHRUN_PLURAL, namespace, name)

    def get_job(self, namespace: str, name: str) -> Obj | None:
        return none_if_missing(
            lambda: raw(self.batch.read_namespaced_job(name, namespace, _preload_content=False))
        )

    def newest_pod(self, namespace: str, run_uid: str, component: str) -> Obj | None:
        pods = raw(
            self.core.list_namespaced_pod(
                namespace,
                label_selector=f"{LABEL_RUN_UID}={run_uid},{LABEL_COMPONENT}={component}",
                _preload_content=False,
            )
        )
        items: list[Obj] = pods.get("items") or []
        if not items:
            return None
        newest: Obj = max(items, key=lambda p: p["metadata"].get("creationTimestamp") or "")
        return newest

    def patch_run(self, namespace: str, name: str, patch: Obj) -> None:
        """Merge-patch the BenchRun itself (metadata only: annotations such as the trace context)."""
        self.custom.patch_namespaced_custom_object(
            API_GROUP, API_VERSION, namespace, BENCHRUN_PLURAL, name, patch
        )

    # --- events ---------------------------------------------------------------------------

    def post_event(self, ref: Obj, type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event about `ref` (kopf posts it in the background), unless its namespace
        is being deleted: the API server would refuse it."""
        if ref["metadata"].get("namespace") in self.terminating:
            return
        kopf.event(cast(Any, ref), type=type_, reason=reason, message=message)

    # --- status ---------------------------------------------------------------------------

    def update_status(
        self,
        namespace: str,
        name: str,
        mutate: Callable[[Obj], Obj | None],
        attempts: int = 8,
        initial: Obj | None = None,
    ) -> Obj | None:
        """Read the run, let `mutate(run)` return its new status (None: nothing to write), replace
        the status subresource; retried on conflicts. Returns the written status (None: no write)."""
        return self.update_custom_status(
            BENCHRUN_PLURAL, BENCHRUN_KIND, namespace, name, mutate, attempts=attempts, initial=initial
        )

    def update_custom_status(
        self,
        plural: str,
        kind: str,
        namespace: str,
        name: str,
        mutate: Callable[[Obj], Obj | None],
        *,
        attempts: int = 8,
        initial: Obj | None = None,
    ) -> Obj | None:
        """Read the custom object (`initial` stands for the first read where given), let
        `mutate(obj)` return its new status (None: nothing to write), replace the status
        subresource guarded by resourceVersion; retried on conflicts (409). Returns the written
        status (None: no write, the object is gone, or its namespace is being deleted)."""
        for attempt in range(attempts):
            if namespace in self.terminating:
                return None
            obj = (
                initial if attempt == 0 and initial is not None else self.get_custom(plural, namespace, name)
            )
            if obj is None:
                return None
            status = mutate(obj)
            if status is None:
                return None
            body = {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "metadata": {"name": name, "namespace": namespace,
                             "resourceVersion": obj["metadata"]["resourceVersion"]},
                "status": status,
            }  # fmt: skip
            try:
                self.custom.replace_namespaced_custom_object_status(
                    API_GROUP, API_VERSION, namespace, plural, name, body
                )
                return status
            except ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status != 409:
                    raise
        raise RuntimeError(f"status of {kind} {namespace}/{name}: too many conflicting writers")
