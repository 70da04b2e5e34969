"""Any Kubernetes kind as dicts: get, list, create, update, patch, delete, status, eviction, raw watch.

Errors become :class:`KubeApiError` carrying the HTTP status and the server's ``Status`` reason and message,
so callers branch on ``.status`` (404, 409, 429...) and logs say what the server said.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

_AUTH_SETTINGS = ["BearerToken"]
_decode_json = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class ResourceRef:
    api_version: str
    plural: str
    namespaced: bool

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


PODS = ResourceRef("v1", "pods", True)
NODES = ResourceRef("v1", "nodes", False)
EVENTS = ResourceRef("v1", "events", True)
DAEMONSETS = ResourceRef("apps/v1", "daemonsets", True)
DEPLOYMENTS = ResourceRef("apps/v1", "deployments", True)
PODDISRUPTIONBUDGETS = ResourceRef("policy/v1", "poddisruptionbudgets", True)
NODEPOOLS = ResourceRef("karpenter.sh/v1", "nodepools", False)
NODECLAIMS = ResourceRef("karpenter.sh/v1", "nodeclaims", False)
CLUSTERAPINODECLASSES = ResourceRef("karpenter.cluster.x-k8s.io/v1alpha1", "clusterapinodeclasses", False)
EC2NODECLASSES = ResourceRef("karpenter.k8s.aws/v1", "ec2nodeclasses", False)
MACHINEDEPLOYMENTS = ResourceRef("cluster.x-k8s.io/v1beta1", "machinedeployments", True)
MACHINES = ResourceRef("cluster.x-k8s.io/v1beta1", "machines", True)
LEASES = ResourceRef("coordination.k8s.io/v1", "leases", True)
SECRETS = ResourceRef("v1", "secrets", True)

BY_KIND: dict[str, ResourceRef] = {
    "Pod": PODS,
    "Node": NODES,
    "Event": EVENTS,
    "DaemonSet": DAEMONSETS,
    "Deployment": DEPLOYMENTS,
    "PodDisruptionBudget": PODDISRUPTIONBUDGETS,
    "NodePool": NODEPOOLS,
    "NodeClaim": NODECLAIMS,
    "ClusterAPINodeClass": CLUSTERAPINODECLASSES,
    "EC2NodeClass": EC2NODECLASSES,
    "MachineDeployment": MACHINEDEPLOYMENTS,
    "Machine": MACHINES,
    "Lease": LEASES,
    "Secret": SECRETS,
}
"""The kinds tenon reads and writes, by ``kind`` (for applying manifests)."""


class KubeApiError(RuntimeError):
    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{method} {path}: {status} {reason}: {message}".strip())

    @classmethod
    def from_exception(cls, exc: ApiException, method: str, path: str) -> KubeApiError:
        reason, message = exc.reason or "", ""
        text = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else exc.body
        try:
            body = json.loads(text) if text else {}
            reason = body.get("reason") or reason
            message = body.get("message") or ""
        except (TypeError, ValueError):
            message = str(text or "")[:200]
        return cls(int(exc.status or 0), str(reason), message, method, path)


class Kube:
    """One cluster. Every method takes and returns plain dicts."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = api_client

    async def close(self) -> None:
        await self.api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """One request, its JSON answer decoded (None when empty).

        It goes to the client's REST layer, past ``ApiClient.call_api``: what that adds is for OpenAPI
        models (sanitizing the body, headers and parameters for serialization, deserializing the answer),
        and it cost a fifth to a third of each request's CPU, which the scheduler pays for every pod it
        nominates and every Node it registers. Authentication (including a refreshed token), the default
        headers and the proxy are applied as ``call_api`` applies them."""
        api = self.api
        headers = {"Accept": "application/json", **api.default_headers}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        await api.update_params_for_auth(headers, params, _AUTH_SETTINGS)
        try:
            response = await api.rest_client.request(
                method,
                f"{api.configuration.host}{path}",
                query_params=params,  # type: ignore[arg-type]  # urlencoded: a list of pairs as well
                headers=headers,
                body=body,
            )
        except ApiException as exc:
            raise KubeApiError.from_exception(exc, method, path) from None
        data = response.data
        if not data:
            return None
        try:
            return _decode_json(data)
        except msgspec.DecodeError:
            return data.decode("utf-8", "replace")  # not JSON (as call_api did, the text itself)

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", ref.path(namespace, name))
        return result

    async def get_or_none(
        self, ref: ResourceRef, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return await self.get(ref, name, namespace)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """All items (following ``continue``) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = await self.request(
                "GET",
                ref.path(namespace),
                query={
                    "labelSelector": label_selector,
                    "fieldSelector": field_selector,
                    "limit": 500,
                    "continue": token,
                },
            )
            kind = ref.plural
            for item in page.get("items", []):
                item.setdefault("apiVersion", ref.api_version)
                item.setdefault("kind", page.get("kind", kind).removesuffix("List"))
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str((page.get("metadata") or {}).get("resourceVersion", ""))

    async def create(
        self, ref: ResourceRef, obj: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        namespace = namespace or (obj.get("metadata") or {}).get("namespace")
        result: dict[str, Any] = await self.request("POST", ref.path(namespace), body=dict(obj))
        return result

    async def replace(
        self, ref: ResourceRef, obj: Mapping[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        result: dict[str, Any] = await self.request(
            "PUT", ref.path(meta.get("namespace"), meta["name"], subresource), body=dict(obj)
        )
        return result

    async def patch(
        self,
        ref: ResourceRef,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            "PATCH", ref.path(namespace, name, subresource), body=body, content_type=content_type
        )
        return result

    async def delete(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete; False when it was already gone."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if resource_version is not None:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            await self.request("DELETE", ref.path(namespace, name), body=body)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def evict(self, name: str, namespace: str) -> None:
        """Evict a pod through the Eviction API; a 429 (a PodDisruptionBudget says no) raises KubeApiError."""
        await self.request(
            "POST",
            PODS.path(namespace, name, "eviction"),
            body={
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            },
        )

    async def open_watch(
        self,
        ref: ResourceRef,
        resource_version: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Any:
        """The raw streaming response of a watch (newline-delimited JSON events)."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        path = ref.path(namespace)
        try:
            return await self.api.call_api(
                path,
                "GET",
                query_params=[(k, v) for k, v in query.items() if v is not None],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout_seconds + 30,
            )
        except ApiException as exc:
            raise KubeApiError.from_exception(exc, "WATCH", path) from None
