"""Building Kubernetes objects and the demo cluster's facts, the same way in every test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from proto import events as ev
from tests.support.events import T0, build_event

DEMO = Path(__file__).parents[2] / "deploy" / "examples" / "capi-demo"


def demo_documents(name: str) -> list[dict[str, Any]]:
    """The objects of one file of the Cluster API demo (``deploy/examples/capi-demo``)."""
    return [doc for doc in yaml.safe_load_all((DEMO / name).read_text()) if doc]


def pending_pod(name: str, cpu: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    """A pod the kube-scheduler could not place, as the pod-watcher publishes it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": labels or {"app": "x"},
        },
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def demo_facts() -> list[ev.Event]:
    """What the pod-watcher and launcher-capi publish for the demo: NodePools, NodeClasses, DaemonSets,
    catalog."""
    pools = demo_documents("nodepool.yaml")
    return [
        build_event(ev.NodePoolsSnapshot, "np", nodepools=tuple(o for o in pools if o["kind"] == "NodePool")),
        build_event(
            ev.NodeClassesSnapshot,
            "nc",
            nodeclasses=tuple(o for o in pools if o["kind"] == "ClusterAPINodeClass"),
        ),
        build_event(ev.DaemonSetsSnapshot, "ds", daemonsets=tuple(demo_documents("daemonset.yaml"))),
        build_event(
            ev.CatalogSnapshot,
            "catalog",
            provider="cluster-api",
            node_class="default",
            instance_types=(),
            sources=tuple(demo_documents("machinedeployments.yaml")),
        ),
    ]


def pending_batch(batch_id: str, *pods: dict[str, Any], at: Any = None) -> ev.PendingBatch:
    return build_event(
        ev.PendingBatch,
        f"batch-{batch_id}",
        at=at,
        batch_id=batch_id,
        pods=pods,
        window_opened_at=at or T0,
        window_closed_by="idle",
    )
