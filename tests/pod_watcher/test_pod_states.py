"""``karpenter_pods_state`` as the pod-watcher keeps it: one series per pod that exists, saying where it runs
as its Node tells it; a change replaces the series, a deletion removes it."""

from __future__ import annotations

from typing import Any

from tenon.runtime.observability import metrics
from tenon.services.pod_watcher.pod_states import PodStates


def series(pod: str) -> list[dict[str, str]]:
    """The label sets of ``pod``'s series now exposed."""
    [family] = [f for f in metrics.REGISTRY.collect() if f.name == "karpenter_pods_state"]
    return [dict(s.labels) for s in family.samples if s.labels.get("name") == pod and s.value == 1]


def pod(name: str, node: str = "", phase: str = "Pending", ready: str = "False") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9"}],
        },
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True" if node else "False"},
                {"type": "Ready", "status": ready},
            ],
        },
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_a_pod_on_a_pools_node_is_one_series_saying_where_it_runs() -> None:
    states = PodStates()
    states.node(
        node(
            "n-ps1",
            **{
                "karpenter.sh/nodepool": "default",
                "topology.kubernetes.io/zone": "z1",
                "kubernetes.io/arch": "amd64",
                "karpenter.sh/capacity-type": "spot",
                "node.kubernetes.io/instance-type": "c3-8",
            },
        )
    )
    states.pod(pod("web-ps1"))
    assert [(s["phase"], s["scheduled"], s["node"]) for s in series("web-ps1")] == [("Pending", "false", "")]

    states.pod(pod("web-ps1", node="n-ps1", phase="Running", ready="True"))
    [running] = series("web-ps1")  # replaced, not added
    assert running == {
        "name": "web-ps1",
        "namespace": "shop",
        "owner": "/apis/apps/v1/namespaces/shop/replicasets/web-7d9",
        "node": "n-ps1",
        "scheduled": "true",
        "nodepool": "default",
        "zone": "z1",
        "arch": "amd64",
        "capacity_type": "spot",
        "instance_type": "c3-8",
        "phase": "Running",
        "ready": "true",
        "managed": "true",
    }


def test_a_node_relabelled_relabels_its_pods_and_a_deleted_pod_has_no_series() -> None:
    states = PodStates()
    states.node(node("n-ps2"))
    states.pod(pod("web-ps2", node="n-ps2", phase="Running"))
    assert [s["managed"] for s in series("web-ps2")] == ["false"]
    states.node(node("n-ps2", **{"karpenter.sh/nodepool": "batch"}))
    assert [(s["nodepool"], s["managed"]) for s in series("web-ps2")] == [("batch", "true")]
    states.pod(pod("web-ps2", node="n-ps2"), deleted=True)
    assert series("web-ps2") == []


def test_a_relist_drops_the_pods_that_are_gone() -> None:
    states = PodStates()
    states.relisted([pod("kept-ps3"), pod("gone-ps3")])
    states.relisted([pod("kept-ps3")])
    assert len(series("kept-ps3")) == 1 and series("gone-ps3") == []
