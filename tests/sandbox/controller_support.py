"""Helpers for the controller tests: a store with the controllers running, manifests, and polling."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from devtools.sandbox.controllers import run_controllers
from devtools.sandbox.profiles import get_profile
from devtools.sandbox.store import Store


@contextlib.asynccontextmanager
async def running_controllers(profile: str = "fast", scale: float = 1.0) -> AsyncIterator[Store]:
    """One in-process store serving as both workload and management cluster, controllers running."""
    store = Store()
    task = asyncio.create_task(run_controllers(store, store, get_profile(profile, scale)))
    try:
        yield store
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def wait_for(check: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def node(
    name: str,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    ready: bool = False,
) -> dict[str, Any]:
    """A Node; ``ready=False`` leaves it for the simulated kubelet to register and make Ready."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": pods}},
    }
    if ready:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return obj


def pod(
    name: str,
    cpu: str = "100m",
    memory: str = "64Mi",
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [
                {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            **spec,
        },
    }


def deployment(
    name: str, replicas: int, cpu: str = "1", labels: dict[str, str] | None = None, **pod_spec: Any
) -> dict[str, Any]:
    labels = labels or {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu}}}
                    ],
                    **pod_spec,
                },
            },
        },
    }


def condition(obj: dict[str, Any], cond_type: str) -> dict[str, Any] | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == cond_type:
            return item  # type: ignore[no-any-return]
    return None


def rt(store: Store, api_version: str, kind: str) -> Any:
    return store.resource(api_version, kind)


def pods_of(store: Store, label: str | None = None) -> list[dict[str, Any]]:
    return store.list(store.resource("v1", "Pod"), label_selector=label)[0]
