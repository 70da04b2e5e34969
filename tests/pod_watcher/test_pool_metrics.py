"""A NodePool's usage is the capacity of its Nodes, in base units, as they come and go; its limits are its
``spec.limits``."""

from __future__ import annotations

from typing import Any

from tenon.runtime.observability import metrics
from tenon.services.pod_watcher.pool_metrics import PoolMetrics


def usage(pool: str, resource: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "karpenter_nodepools_usage", {"resource_type": resource, "nodepool": pool}
    )


def node(name: str, pool: str | None, cpu: str, memory: str) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": pool} if pool else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def test_usage_follows_the_pools_nodes_and_ignores_heartbeats_and_other_nodes() -> None:
    pools = PoolMetrics()
    pools.node(node("pm-a", "pm-pool", "4", "16Gi"))
    pools.node(node("pm-b", "pm-pool", "8", "32Gi"))
    pools.node(node("pm-c", None, "64", "256Gi"))  # not a pool's node
    assert usage("pm-pool", "cpu") == 12 and usage("pm-pool", "memory") == 48 * 2**30
    assert usage("pm-pool", "pods") == 220
    pools.node(node("pm-a", "pm-pool", "4", "16Gi"))  # the same capacity again: a heartbeat
    assert usage("pm-pool", "cpu") == 12
    pools.node(node("pm-b", "pm-pool", "8", "32Gi"), deleted=True)
    assert usage("pm-pool", "cpu") == 4 and usage("pm-pool", "memory") == 16 * 2**30


def test_limits_are_the_pools_spec_limits_and_a_removed_pool_has_none() -> None:
    pools = PoolMetrics()
    pool = {"metadata": {"name": "pm-limited"}, "spec": {"limits": {"cpu": "1000", "memory": "1000Gi"}}}
    pools.nodepools([pool])
    limit = {"resource_type": "cpu", "nodepool": "pm-limited"}
    assert metrics.REGISTRY.get_sample_value("karpenter_nodepools_limit", limit) == 1000
    pools.nodepools([])
    assert metrics.REGISTRY.get_sample_value("karpenter_nodepools_limit", limit) is None
