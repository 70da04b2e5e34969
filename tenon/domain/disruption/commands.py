"""What a disruption method decides (pure data): a :class:`Command` (candidates to remove, replacements to
launch first, what it saves, which pods move where) and the :class:`Replacement` nodes, as the scheduling
core planned them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenon.core import PlannedNodeClaim
from tenon.domain.disruption.candidates import Blocked, Candidate

EPSILON = 1e-9


@dataclass(frozen=True)
class Option:
    instance_type: str
    zone: str | None
    capacity_type: str
    price: float


@dataclass(frozen=True)
class Replacement:
    """A new node a command launches before its candidates go (the scheduler plans it, on request)."""

    nodepool: str
    choice: Option
    fallbacks: tuple[Option, ...]
    pods: tuple[str, ...]
    requirements: tuple[dict[str, Any], ...] = ()
    requests: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def price(self) -> float:
        return self.choice.price


def replacement_of(planned: PlannedNodeClaim, *, price_below: float | None = None) -> Replacement:
    """The core's new node as a replacement; fallbacks no cheaper than ``price_below`` are dropped (a
    fallback must still save money: Karpenter keeps only options cheaper than the candidates)."""
    prices = {c.instance_type: c.price for c in planned.considered if c.price is not None}
    fallbacks = []
    for name in planned.fallbacks:
        price = prices.get(name, planned.price)
        if price_below is None or price < price_below - EPSILON:
            fallbacks.append(Option(name, planned.zone, planned.capacity_type, round(price, 6)))
    return Replacement(
        nodepool=planned.node_pool,
        choice=Option(planned.instance_type, planned.zone, planned.capacity_type, round(planned.price, 6)),
        fallbacks=tuple(fallbacks),
        pods=planned.pods,
        requirements=tuple(r.to_json() for r in planned.requirements),
        requests=dict(planned.requests),
    )


@dataclass(frozen=True)
class Command:
    method: str
    """emptiness, drift, expiration or consolidation."""
    reason: str
    """The budget reason (Empty, Drifted, Underutilized) or Expired (no budget applies)."""
    candidates: tuple[Candidate, ...]
    why: dict[str, str] = field(default_factory=dict, hash=False)
    """Claim -> why it is a candidate."""
    replacements: tuple[Replacement, ...] = ()
    destinations: dict[str, str] = field(default_factory=dict, hash=False)
    budget: str = ""
    detail: str = ""
    blocked: tuple[Blocked, ...] = ()

    @property
    def kind(self) -> str:
        return "replace" if self.replacements else "delete"

    @property
    def price_before(self) -> float:
        return sum(c.price for c in self.candidates)

    @property
    def price_after(self) -> float:
        return sum(r.price for r in self.replacements)

    @property
    def savings(self) -> float:
        return self.price_before - self.price_after

    @property
    def pods_moved(self) -> tuple[str, ...]:
        return tuple(sorted(self.destinations))
