"""``karpenter_nodepools_usage`` and ``karpenter_nodepools_limit``, from what the pod-watcher watches anyway.

Usage is the capacity of the Nodes that carry a pool's label (``karpenter.sh/nodepool``), summed per resource
in base units (cores, bytes, pods), as Karpenter counts what has been provisioned for a pool; claims still
launching count once their Node registers. Limits are the NodePools' ``spec.limits``; a value that is not a
quantity is left out (the NodePool's own validation says why).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from tenon.core.quantities import QuantityError, parse_quantity
from tenon.core.wellknown import NODEPOOL
from tenon.runtime.observability import metrics


class PoolMetrics:
    def __init__(self) -> None:
        self._nodes: dict[str, tuple[str, dict[str, float]]] = {}
        """Node name -> (its pool, its capacity): what it adds to its pool's usage."""
        self._usage: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))

    def node(self, node: Mapping[str, Any], deleted: bool = False) -> None:
        metadata = node.get("metadata") or {}
        name = str(metadata.get("name") or "")
        pool = str((metadata.get("labels") or {}).get(NODEPOOL) or "")
        capacity = _quantities((node.get("status") or {}).get("capacity"))
        counted = None if deleted or not pool else (pool, capacity)
        before = self._nodes.pop(name, None)
        if counted is not None:
            self._nodes[name] = counted
        if before == counted:
            return  # a heartbeat, a condition: the usage is the same
        if before is not None:
            self._add(*before, sign=-1)
        if counted is not None:
            self._add(*counted, sign=1)

    def nodepools(self, nodepools: Iterable[Mapping[str, Any]]) -> None:
        metrics.NODEPOOL_LIMIT.clear()
        for pool in nodepools:
            name = str((pool.get("metadata") or {}).get("name") or "")
            for resource, amount in _quantities((pool.get("spec") or {}).get("limits")).items():
                metrics.NODEPOOL_LIMIT.labels(resource_type=resource, nodepool=name).set(amount)

    def _add(self, pool: str, capacity: Mapping[str, float], sign: int) -> None:
        usage = self._usage[pool]
        for resource, amount in capacity.items():
            usage[resource] += sign * amount
            metrics.NODEPOOL_USAGE.labels(resource_type=resource, nodepool=pool).set(usage[resource])


def _quantities(values: object) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    out: dict[str, float] = {}
    for resource, value in values.items():
        try:
            out[str(resource)] = float(parse_quantity(value))
        except (QuantityError, ValueError, TypeError):
            continue
    return out
