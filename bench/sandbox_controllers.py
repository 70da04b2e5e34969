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

``anti-affine backlog``
    A apps, each running one pod on each of the N nodes that repels the app's pods on
    ``kubernetes.io/hostname``; then E more pods of each app, with no rule of their own and each with its
    own request (as the scale run's Deployments: no failure of one is reused for another), are created:
    seconds until every new pod is marked Unschedulable (the running pods' rules keep them off every node,
    the symmetric half of InterPodAffinity). Each is checked against the N pods that repel it on each of
    the N nodes, which a list of (key, hostname) pairs made quadratic (the scale run's churn waves: the
    sandbox's thread spent 84 % in its scheduler).

Full run: 1,000 nodes, 10,000 pods (the backlog: 10 apps on 1,000 nodes, 20 more pods each); ``--quick``:
100 nodes, 1,000 pods. Targets (ours, so that the sandbox is not what an end-to-end benchmark measures):
10,000 pods Running on 1,000 existing nodes within 60 s; the 200 repelled pods Unschedulable within 3 s
(1.0 s; 11.2 s before the pairs were grouped by key, 2026-12-04).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
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


@contextlib.asynccontextmanager
async def _controllers_running(history_size: int) -> AsyncIterator[tuple[Store, _Tracker]]:
    """A store with every simulated controller running on it, and a tracker of its pods."""
    store = Store(history_size=history_size)
    controllers = asyncio.create_task(run_controllers(store, store, get_profile("fast")))
    tracker = _Tracker(store)
    watcher = asyncio.create_task(tracker.run())
    try:
        await asyncio.sleep(0.1)
        yield store, tracker
    finally:
        tracker.watch.close()
        for task in (controllers, watcher):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _scenario(nodes: int, pods: int, nodes_first: bool, timeout: float) -> dict[str, float | None]:
    result: dict[str, float | None] = {}
    async with _controllers_running(max(10_000, pods * 4)) as (store, tracker):
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
    return result


def _repelling_pod(app: str, name: str, node: str | None, cpu: str = "100m") -> dict[str, Any]:
    """A pod of ``app`` bound to ``node`` that repels the pods of ``app`` on ``kubernetes.io/hostname``; with
    no node, a pending pod of ``app`` with no rule of its own: only the running pods' rules keep it off."""
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node is not None:
        term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": spec,
    }


async def _anti_affine_backlog(nodes: int, apps: int, extra: int, timeout: float) -> float | None:
    """Seconds until the ``apps x extra`` pods that no node can take are all marked Unschedulable, each of
    the ``apps`` already running one pod on every node."""
    async with _controllers_running(max(10_000, nodes * apps * 4)) as (store, tracker):
        nodes_rt, pods_rt = store.resource("v1", "Node"), store.resource("v1", "Pod")
        for i in range(nodes):
            store.create(nodes_rt, _node(f"n{i:04d}"))
        await asyncio.sleep(0.5)
        for app in range(apps):
            for i in range(nodes):
                store.create(pods_rt, _repelling_pod(f"repel-{app}", f"repel-{app}-n{i:04d}", f"n{i:04d}"))
        if await tracker.until(tracker.running, nodes * apps, timeout) is None:
            return None
        start = time.perf_counter()
        for app in range(apps):
            for e in range(extra):
                # each its own request: no two are one equivalence class, whose failure a cycle reuses
                extra_pod = _repelling_pod(f"repel-{app}", f"repel-{app}-extra-{e}", None, f"{101 + e}m")
                store.create(pods_rt, extra_pod)
        if await tracker.until(tracker.unschedulable, apps * extra, timeout) is None:
            return None
        return time.perf_counter() - start


def _fmt(value: float | None) -> str:
    return "timeout" if value is None else f"{value:.1f} s"


def run(quick: bool) -> Suite:
    nodes, pods = (100, 1_000) if quick else (1_000, 10_000)
    timeout = 300.0
    first = asyncio.run(_scenario(nodes, pods, nodes_first=True, timeout=timeout))
    backlog = asyncio.run(_scenario(nodes, pods, nodes_first=False, timeout=timeout))
    repelling, extra = (5, 10) if quick else (10, 20)
    repelled = asyncio.run(_anti_affine_backlog(nodes, repelling, extra, timeout))
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
        ["anti-affine backlog", f"{repelling * extra} repelled pods Unschedulable", _fmt(repelled)],
    ]
    suite.data = {
        "nodes": nodes,
        "pods": pods,
        "nodes_first": first,
        "pods_first": backlog,
        "anti_affine_backlog": {"apps": repelling, "extra": extra, "unschedulable_s": repelled},
    }
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
        suite.targets.append(
            Target(
                name=f"{repelling * extra} pods kept off every node by anti-affinity marked Unschedulable",
                goal="< 3 s",
                measured=_fmt(repelled),
                met=repelled is not None and repelled < 3.0,
            )
        )
    return suite
