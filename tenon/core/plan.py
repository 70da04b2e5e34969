"""The Plan: what the scheduler decided, and its JSON form (the ``tenon simulate -o json`` contract).

JSON shape (keys in camelCase, stable order of lists so two runs on the same input print the same bytes)::

    {
      "nodeClaims": [{
          "nodePool": "default", "instanceType": "c3-8", "zone": "eu-west-1a" | null,
          "capacityType": "on-demand", "pricePerHour": 0.08, "priceEstimated": false,
          "pods": ["default/web-0", ...],                     # namespace/name
          "fallbacks": ["c3-16", ...],                        # other types that also fit, cheaper first
          "requirements": [{"key": ..., "operator": "In", "values": [...]}, ...],  # the launcher must honour
          "requests": {"cpu": "3100m", ...},                  # pods + DaemonSets on this node
          "explanation": {"chosen": "...", "considered": [{"instanceType", "pricePerHour", "verdict"}, ...]}
      }],
      "existingNodes": [{"name": "node-a", "kind": "Node" | "NodeClaim", "pods": [...]}],
      "unschedulable": [{"pod": "ns/name", "reason": "default: no instance type has cpu=96 ...",
                         "reasons": {"default": "..."}}],
      "totalPricePerHour": 0.24,
      "skipped": ["file document 3: MachineDeployment ns/x skipped: annotation ... missing"],
      "nominated": [{"pod": "ns/name", "node": "node-a"}]     # the kube-scheduler is placing them
    }
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenon.core.requirements import Requirement


@dataclass(frozen=True)
class Considered:
    instance_type: str
    price: float | None
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return {"instanceType": self.instance_type, "pricePerHour": self.price, "verdict": self.verdict}


@dataclass(frozen=True)
class PlannedNodeClaim:
    node_pool: str
    instance_type: str
    zone: str | None
    capacity_type: str
    price: float
    price_estimated: bool
    pods: tuple[str, ...]
    fallbacks: tuple[str, ...]
    requirements: tuple[Requirement, ...]
    requests: dict[str, str] = field(hash=False)
    chosen_because: str = ""
    considered: tuple[Considered, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "nodePool": self.node_pool,
            "instanceType": self.instance_type,
            "zone": self.zone,
            "capacityType": self.capacity_type,
            "pricePerHour": round(self.price, 6),
            "priceEstimated": self.price_estimated,
            "pods": list(self.pods),
            "fallbacks": list(self.fallbacks),
            "requirements": [r.to_json() for r in self.requirements],
            "requests": dict(self.requests),
            "explanation": {
                "chosen": self.chosen_because,
                "considered": [c.to_json() for c in self.considered],
            },
        }


@dataclass(frozen=True)
class ExistingPlacement:
    name: str
    kind: str  # Node | NodeClaim
    pods: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "pods": list(self.pods)}


@dataclass(frozen=True)
class NominatedPod:
    """A pending pod the kube-scheduler is already placing (``status.nominatedNodeName``, after preemption):
    not provisioned for; its room on that node is taken."""

    pod: str
    node: str

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node}


@dataclass(frozen=True)
class Unschedulable:
    pod: str
    reasons: dict[str, str] = field(hash=False)  # NodePool (or "*") -> reason

    @property
    def reason(self) -> str:
        if list(self.reasons) == ["*"]:
            return self.reasons["*"]
        return "; ".join(f"{pool}: {why}" for pool, why in self.reasons.items())

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "reason": self.reason, "reasons": dict(self.reasons)}


@dataclass(frozen=True)
class Plan:
    node_claims: tuple[PlannedNodeClaim, ...] = ()
    existing: tuple[ExistingPlacement, ...] = ()
    unschedulable: tuple[Unschedulable, ...] = ()
    skipped: tuple[str, ...] = ()
    nominated: tuple[NominatedPod, ...] = ()

    @property
    def total_price(self) -> float:
        return sum(nc.price for nc in self.node_claims)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeClaims": [nc.to_json() for nc in self.node_claims],
            "existingNodes": [e.to_json() for e in self.existing],
            "unschedulable": [u.to_json() for u in self.unschedulable],
            "totalPricePerHour": round(self.total_price, 6),
            "skipped": list(self.skipped),
            "nominated": [n.to_json() for n in self.nominated],
        }

    def placement(self) -> dict[str, str]:
        """pod key -> where it goes (``new:<i>`` for the i-th NodeClaim, else the existing name)."""
        out = {}
        for i, nc in enumerate(self.node_claims):
            for pod in nc.pods:
                out[pod] = f"new:{i}"
        for e in self.existing:
            for pod in e.pods:
                out[pod] = e.name
        return out
