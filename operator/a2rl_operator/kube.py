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


def discard(response: Any) -> None:
    """Finish a `_preload_content=False` call whose body is not needed: read it off the connection
    and hand the connection back to the pool. Dropped unread, the response keeps its connection
    until the garbage collector closes it, so the next call opens a new one (TCP and TLS)."""
    response.drain_conn()
    response.release_conn()


def owned_by(obj: Obj | None, owner_uid: str) -> Obj | None:
    """`obj` when `owner_uid` is one of its owners, else None."""
    owners = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return obj if any(o.get("uid") == owner_uid for o in owners) else None


def newest(objs: list[Obj]) -> Obj | None:
    """The object created last (by `creationTimestamp`); None when there is none."""
    if not objs:
        return None
    last: Obj = max(objs, key=lambda o: o["metadata"].get("creationTimestamp") or "")
    return last


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


#: The plural (URL path segment) of each kind the operator creates.
PLURALS = {
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "ServiceAccount": "serviceaccounts",
    "Secret": "secrets",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "NetworkPolicy": "networkpolicies",
    "Job": "jobs",
    "Service": "services",
}
#: Kinds the operator may create but not read (least privilege: a 409 is taken as ours).
UNREADABLE = frozenset({"Secret"})
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


def collection_path(api_version: str, namespace: str, plural: str) -> str:
    """The URL path of a namespaced collection: `/api/v1/...` for the core group, else `/apis/...`."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{root}/namespaces/{namespace}/{plural}"


def custom_path(namespace: str, plural: str, name: str) -> str:
    """The URL path of one of our custom objects (`plural` of the a2rl API group)."""
    return f"{collection_path(f'{API_GROUP}/{API_VERSION}', namespace, plural)}/{name}"


class Kube:
    """The operator's API calls. The hot ones (children, runs, their Jobs and pods, status) are
    plain JSON requests (`_call`): the generated client validates every call's arguments with
    pydantic and converts bodies to and from its models, which was a quarter of the operator's
    CPU at hundreds of runs; errors are the client's `ApiException` all the same."""

    def __init__(self, api: client.ApiClient, terminating: TerminatingNamespaces | None = None) -> None:
        self.api = api
        #: Namespaces being deleted: no status writes, no Events, no reconciling there.
        self.terminating = terminating if terminating is not None else TerminatingNamespaces()
        # The generated client, for the calls off the hot path (Job pods and their logs, lists of
        # our objects, campaigns' BenchRuns, Kueue's Workloads).
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _call(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        *,
        query: list[tuple[str, str]] | None = None,
        content_type: str = JSON,
    ) -> Any:
        """One request, its response read off the connection (which goes back to the pool);
        a non-2xx answer raises `ApiException` (`.status`, `.body`) as the generated client does."""
        headers = {"Accept": JSON, "Content-Type": content_type}
        method, url, headers, payload, _ = self.api.param_serialize(
            method, path, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self.api.call_api(method, url, header_params=headers, body=payload)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def _json(self, method: str, path: str, body: Obj | None = None, **kwargs: Any) -> Obj:
        data: Obj = json.loads(self._call(method, path, body, **kwargs).data)
        return data

    # --- children -------------------------------------------------------------------------

    def ensure(self, manifest: Obj, owner_uid: str) -> bool:
        """Create `manifest` unless it exists; True when this call created it."""
        return self._create_or_adopt(manifest, owner_uid) is not None

    def create_owned(self, manifest: Obj, owner_uid: str) -> Obj | None:
        """`ensure`, returning the object as the API server created it (None: it existed)."""
        response = self._create_or_adopt(manifest, owner_uid)
        return None if response is None else cast(Obj, json.loads(response.data))

    def _path(self, manifest: Obj) -> str:
        meta = manifest["metadata"]
        return collection_path(manifest["apiVersion"], meta["namespace"], PLURALS[manifest["kind"]])

    def _create_or_adopt(self, manifest: Obj, owner_uid: str) -> Any | None:
        """The response of creating `manifest`; None when it exists and `owner_uid` owns it
        (`NameConflictError` when someone else does)."""
        meta = manifest["metadata"]
        try:
            return self._call("POST", self._path(manifest), manifest)
        except ApiException as exc:
            if is_namespace_terminating(exc):
                self.terminating.mark(meta["namespace"])
                raise NamespaceTerminatingError(f"namespace {meta['namespace']} is being deleted") from None
            if exc.status != 409:
                raise
        if manifest["kind"] in UNREADABLE:
            return None
        existing = self._json("GET", f"{self._path(manifest)}/{meta['name']}")
        owners = (existing.get("metadata") or {}).get("ownerReferences") or []
        if not any(o.get("uid") == owner_uid for o in owners):
            raise NameConflictError(
                f"{manifest['kind']} {meta['name']} exists and is not owned by this BenchRun"
            )
        return None

    def get_owned(self, manifest: Obj, owner_uid: str) -> Obj | None:
        """The object `manifest` names when it exists and `owner_uid` owns it (not for Secrets)."""
        assert manifest["kind"] not in UNREADABLE, f"the operator does not read {manifest['kind']}s"
        path = f"{self._path(manifest)}/{manifest['metadata']['name']}"
        return owned_by(none_if_missing(lambda: self._json("GET", path)), owner_uid)

    # --- reads ----------------------------------------------------------------------------

    def service_cluster_ip(self, namespace: str, name: str) -> str | None:
        """A Service's ClusterIP; None when it is missing or headless."""
        path = f"{collection_path('v1', namespace, 'services')}/{name}"
        svc = none_if_missing(lambda: self._json("GET", path))
        ip = ((svc or {}).get("spec") or {}).get("clusterIP")
        return ip if ip and ip != "None" else None

    def get_custom(self, plural: str, namespace: str, name: str) -> Obj | None:
        """One of our custom objects (`plural` of the a2rl API group); None when it is gone."""
        return none_if_missing(lambda: self._json("GET", custom_path(namespace, plural, name)))

    def get_run(self, namespace: str, name: str) -> Obj | None:
        return self.get_custom(BENCHRUN_PLURAL, namespace, name)

    def get_job(self, namespace: str, name: str) -> Obj | None:
        path = f"{collection_path('batch/v1', namespace, 'jobs')}/{name}"
        return none_if_missing(lambda: self._json("GET", path))

    def newest_pod(self, namespace: str, run_uid: str, component: str) -> Obj | None:
        selector = f"{LABEL_RUN_UID}={run_uid},{LABEL_COMPONENT}={component}"
        query = [("labelSelector", selector)]
        pods = self._json("GET", collection_path("v1", namespace, "pods"), query=query)
        return newest(pods.get("items") or [])

    def patch_run(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Merge-patch the BenchRun itself (metadata only: annotations); returns it as patched."""
        path = custom_path(namespace, BENCHRUN_PLURAL, name)
        return self._json("PATCH", path, patch, content_type=MERGE_PATCH)

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
        *,
        attempts: int = 8,
        initial: Obj | None = None,
        written: Callable[[Obj], None] | None = None,
    ) -> Obj | None:
        """Read the run, let `mutate(run)` return its new status (None: nothing to write), replace
        the status subresource; retried on conflicts. Returns the written status (None: no write)."""
        return self.update_custom_status(
            BENCHRUN_PLURAL, BENCHRUN_KIND, namespace, name, mutate, attempts=attempts, initial=initial,
            written=written,
        )  # fmt: skip

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
        written: Callable[[Obj], None] | None = None,
    ) -> Obj | None:
        """Read the custom object (`initial` stands for the first read where given), let
        `mutate(obj)` return its new status (None: nothing to write), replace the status
        subresource guarded by resourceVersion; retried on conflicts (409). `written(obj)` gets
        the object as the API server returned it after the write. Returns the written status
        (None: no write, the object is gone, or its namespace is being deleted)."""
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
                response = self._call("PUT", f"{custom_path(namespace, plural, name)}/status", body)
                if written is not None:
                    written(json.loads(response.data))
                return status
            except ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status != 409:
                    raise
        raise RuntimeError(f"status of {kind} {namespace}/{name}: too many conflicting writers")
