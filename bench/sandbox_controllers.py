"""Sandbox controllers at end-to-end scale (``make bench``, suite ``sandbox_controllers``).

The sandbox must never be the bottleneck of an end-to-end run with 1,000 nodes and 10,000 pods (issue 4).
This suite runs every simulated controller (``devtools.sandbox.controllers.run_controllers``, ``fast``
profile) in-process on one store and measures, with an in-process watch that records when each pod was first
seen bound, Running, or marked Unschedulable:

``nodes first``
    N nodes (4 cpu each, booted by the simulated kubelet) exist, then a Deployment of P pods (100m each) is
    created: seconds until every pod is bound, and until every pod is Running; pods bound per second.
``pods first``
    The Deployment exists with no nodes: seconds until every pod carries ``PodScheduled=False/Unschedulable``
    (what an autoscaler reacts to); then the N nodes join: seconds until every pod is Running.

Full run: 1,000 nodes, 10,000 pods; ``--quick``: 100 nodes, 1,000 pods. Target (ours, so that the sandbox is
not what an end-to-end benchmark measures): 10,000 pods Running on 1,000 existing nodes within 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from bench.suite import Suite, Target
from devtools.sandbox.controllers import run_controllers
from devtools.sandbox.profiles import get_profile
from devtools.sandbox.store import Store


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }


def _deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "100m"}}}
                    ]
                },
            },
        },
    }


class _Tracker:
    """Counts pods bound / Running / Unschedulable from a watch, with the time each count was reached."""

    def __init__(self, store: Store) -> None:
        self.watch = store.watch(store.resource("v1", "Pod"))
        self.bound: set[str] = set()
        self.running: set[str] = set()
        self.unschedulable: set[str] = set()

    async def run(self) -> None:
        async for event in self.watch:
            pod = event.object
            name = pod["metadata"]["name"]
            if event.type == "DELETED":
                continue
            if pod.get("spec", {}).get("nodeName"):
                self.bound.add(name)
            if pod.get("status", {}).get("phase") == "Running":
                self.running.add(name)
            if any(c.get("reason") == "Unschedulable" for c in pod.get("status", {}).get("conditions") or []):
                self.unschedulable.add(name)

    async def until(self, which: set[str], count: int, timeout: float) -> float | None:
        start = time.perf_counter()
        while len(which) < count:
            if time.perf_counter() - start > timeout:
                return None
            await asyncio.sleep(0.05)
        return time.perf_counter() - start


async def _scenario(nodes: int, pods: int, nodes_first: bool, timeout: float) -> dict[str, float | None]:
    store = Store(history_size=max(10_000, pods * 4))
    controllers = asyncio.create_task(run_controllers(store, store, get_profile("fast")))
    tracker = _Tracker(store)
    watcher = asyncio.create_task(tracker.run())
    result: dict[str, float | None] = {}
    try:
        await asyncio.sleep(0.1)
        nodes_rt = store.resource("v1", "Node")
        deploy_rt = store.resource("apps/v1", "Deployment")
        if nodes_first:
            for i in range(nodes):
                store.create(nodes_rt, _node(f"n{i:04d}"))
            await asyncio.sleep(0.5)  # the kubelet makes them Ready
            start = time.perf_counter()
            store.create(deploy_rt, _deployment(pods))
            result["bound_s"] = await tracker.until(tracker.bound, pods, timeout)
            result["running_s"] = await tracker.until(tracker.running, pods, timeout)
            if result["running_s"] is not None:
                result["running_s"] = time.perf_counter() - start
        else:
            start = time.perf_counter()
            store.create(deploy_rt, _deployment(pods))
            result["unschedulable_s"] = await tracker.until(tracker.unschedulable, pods, timeout)
            start = time.perf_counter()
            for i in range(nodes):
                store.create(nodes_rt, _node(f"n{i:04d}"))
            running = await tracker.until(tracker.running, pods, timeout)
            result["running_after_join_s"] = None if running is None else time.perf_counter() - start
    finally:
        tracker.watch.close()
        for task in (controllers, watcher):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return result


def _fmt(value: float | None) -> str:
    return "timeout" if value is None else f"{value:.1f} s"


def run(quick: bool) -> Suite:
    nodes, pods = (100, 1_000) if quick else (1_000, 10_000)
    timeout = 300.0
    first = asyncio.run(_scenario(nodes, pods, nodes_first=True, timeout=timeout))
    backlog = asyncio.run(_scenario(nodes, pods, nodes_first=False, timeout=timeout))
    suite = Suite(
        title=f"Sandbox controllers: {pods:,} pods, {nodes:,} nodes (fast profile)",
        columns=["scenario", "measure", "value"],
    )
    bound = first.get("bound_s")
    suite.rows += [
        ["nodes first", "all pods bound", _fmt(bound)],
        ["nodes first", "pods bound per second", "-" if not bound else f"{pods / bound:,.0f}"],
        ["nodes first", "all pods Running", _fmt(first.get("running_s"))],
        ["pods first", "all pods Unschedulable", _fmt(backlog.get("unschedulable_s"))],
        ["pods first", "all Running after nodes joined", _fmt(backlog.get("running_after_join_s"))],
    ]
    suite.data = {"nodes": nodes, "pods": pods, "nodes_first": first, "pods_first": backlog}
    if not quick:
        running = first.get("running_s")
        suite.targets.append(
            Target(
                name="10,000 pods Running on 1,000 existing nodes",
                goal="< 60 s",
                measured=_fmt(running),
                met=running is not None and running < 60.0,
            )
        )
    return suite
