"""Consolidation under ``WhenEmptyOrUnderutilized`` (pure): remove nodes whose pods fit elsewhere, or replace
them with cheaper ones, as Karpenter's multi-node then single-node consolidation, searching further.

Candidates are the non-empty nodes consolidatable for ``consolidateAfter`` in pools with that policy, whose
price is known, ordered as Karpenter orders them (price per reschedule cost, highest first), within the
``Underutilized`` budget of each pool. A move is **valid** when every candidate pod finds a place
(:mod:`.simulation`) and the replacements cost strictly less than the candidates; with a single replacement
(Karpenter's limit), also when it is not the same instance type as a candidate at no saving (keeping that
node is the cheaper move). A move whose replacements cannot cost less than its candidates, by the price floor
of :mod:`.simulation`, is refused without a solve (:func:`probe`): what is decided is the same, sooner.

* **Multi-node** (Karpenter: at most 100 candidates, one replacement, the largest valid prefix by binary
  search). tenon allows as many replacements as pay (:data:`TENON`), so a round can reach the repacking
  optimum rather than one node at a time; it tries the whole budgeted prefix first (the biggest saving when
  it is valid), then searches down, keeping the valid prefix that saves most.
* **Single-node** when multi-node finds nothing: candidates interleaved across NodePools as Karpenter does,
  screened by a resource-only bound (their pods' requests against the free room elsewhere, or against the
  cheapest rate per CPU and per byte of the pool's types), then confirmed by the core in screened order,
  at most :data:`SINGLE_CONFIRMATIONS` of them.
* **Spot to spot** (Karpenter's ``SpotToSpotConsolidation``, on here, with its rule): replacing spot
  candidates with a spot node needs, for a single node, at least :data:`SPOT_TO_SPOT_MIN_TYPES` instance type
  options cheaper than the candidate, and the launch list is cut to the cheapest 15, so the launched type is
  always among them and the move does not repeat itself.

:data:`KARPENTER` runs the same search with Karpenter's limits (one replacement, the binary search from the
middle): ``make bench`` compares the two on the same clusters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tenon.domain.disruption.budgets import Allowance
from tenon.domain.disruption.candidates import (
    Candidate,
    consolidatable,
    consolidation_policy,
)
from tenon.domain.disruption.commands import EPSILON, Command, Replacement, replacement_of
from tenon.domain.disruption.simulation import Outcome, Repacker
from tenon.domain.disruption.view import ClusterView

REASON = "Underutilized"
SPOT = "spot"
POLICY = "WhenEmptyOrUnderutilized"
MULTI_MAX_CANDIDATES = 100
SPOT_TO_SPOT_MIN_TYPES = 15
SINGLE_CONFIRMATIONS = 3
MULTI_PROBES = 5
"""Simulations one multi-node search makes at most (bounded by count, never by time: a replay decides the
same), and single-node confirmations: together they bound a round to about eight solves."""


@dataclass(frozen=True)
class Rules:
    name: str
    max_replacements: int | None
    """None: as many replacements as pay."""
    whole_prefix_first: bool


TENON = Rules("tenon", None, True)
KARPENTER = Rules("karpenter", 1, False)


def eligible(view: ClusterView, candidates: Sequence[Candidate]) -> list[Candidate]:
    return [
        c
        for c in candidates
        if not c.empty
        and c.price > 0
        and consolidation_policy(c.nodepool) == POLICY
        and consolidatable(view, c)
    ]


def within_budgets(ordered: Sequence[Candidate], budgets: Mapping[str, Allowance]) -> list[Candidate]:
    left = {pool: a.allowed for pool, a in budgets.items()}
    kept = []
    for candidate in ordered:
        if left.get(candidate.pool, 0) > 0:
            left[candidate.pool] -= 1
            kept.append(candidate)
    return kept


def _same_type_refusal(candidates: Sequence[Candidate], outcome: Outcome) -> str | None:
    cheapest: dict[tuple[str, str], float] = {}
    for c in candidates:
        key = (c.claim.instance_type, c.claim.capacity_type)
        cheapest[key] = min(cheapest.get(key, c.price), c.price)
    for replacement in outcome.replacements:
        kept = cheapest.get((replacement.instance_type, replacement.capacity_type))
        if kept is not None and replacement.price >= kept - EPSILON:
            return (
                f"a replacement is the same {replacement.instance_type} as a candidate: keep that one instead"
            )
    return None


def _spot_refusal(candidates: Sequence[Candidate], outcome: Outcome) -> str | None:
    if len(candidates) != 1 or candidates[0].claim.capacity_type != SPOT:
        return None
    for replacement in outcome.replacements:
        if replacement.capacity_type != SPOT:
            continue
        cheaper = [
            c
            for c in replacement.considered
            if c.price is not None and c.price < candidates[0].price - EPSILON
        ]
        if len(cheaper) < SPOT_TO_SPOT_MIN_TYPES:
            return (
                f"spot to spot needs {SPOT_TO_SPOT_MIN_TYPES} cheaper instance types than the candidate, "
                f"found {len(cheaper)}"
            )
    return None


def judge(candidates: Sequence[Candidate], outcome: Outcome, rules: Rules) -> tuple[Command | None, str]:
    """The command a simulated move makes, or (None, why not)."""
    if not outcome.feasible:
        return None, outcome.why
    if rules.max_replacements is not None and len(outcome.replacements) > rules.max_replacements:
        return None, f"would need {len(outcome.replacements)} new nodes"
    before = sum(c.price for c in candidates)
    if outcome.replacements and outcome.price >= before - EPSILON:
        return None, f"no cheaper: {outcome.price:.4f}/h of new nodes for {before:.4f}/h"
    refusal = _spot_refusal(candidates, outcome)
    if rules.max_replacements == 1:  # Karpenter's filterOutSameInstanceType (with many replacements, a
        # replacement of a candidate's type can be part of a cheaper repacking: the saving decides)
        refusal = refusal or _same_type_refusal(candidates, outcome)
    if refusal:
        return None, refusal
    budget_for_each = before - outcome.price
    replacements = []
    for planned in outcome.replacements:
        replacement = replacement_of(planned, price_below=planned.price + budget_for_each)
        if planned.capacity_type == SPOT and len(candidates) == 1:
            replacement = _cut_to_cheapest(replacement, SPOT_TO_SPOT_MIN_TYPES)
        replacements.append(replacement)
    kind = "multi-node" if len(candidates) > 1 else "single-node"
    return (
        Command(
            method="consolidation",
            reason=REASON,
            candidates=tuple(candidates),
            why={c.name: f"{kind} consolidation: its pods fit elsewhere" for c in candidates},
            replacements=tuple(replacements),
            destinations=outcome.destinations,
            detail=f"{kind}: {len(candidates)} node(s) -> {len(replacements)} new, saves "
            f"{before - outcome.price:.4f}/h",
        ),
        "",
    )


def _cut_to_cheapest(replacement: Replacement, count: int) -> Replacement:
    return dataclasses.replace(replacement, fallbacks=replacement.fallbacks[: max(0, count - 1)])


def probe(repacker: Repacker, candidates: Sequence[Candidate], rules: Rules) -> Command | None:
    """The command moving ``candidates`` makes, or None; without a solve when the replacements of any valid
    move cost at least what the candidates do (:meth:`Repacker.price_floor`: judged, it would be refused as
    no cheaper). Half of :data:`EPSILON` is kept for the floor's and the judge's rounding."""
    before = sum(c.price for c in candidates)
    floor = repacker.price_floor(candidates)
    if floor > 0 and floor >= before - EPSILON / 2:
        return None
    return judge(candidates, repacker.simulate(candidates), rules)[0]


def multi_node(repacker: Repacker, ordered: Sequence[Candidate], rules: Rules) -> Command | None:
    """The best valid prefix of ``ordered`` (at least 2 candidates)."""
    ordered = list(ordered[:MULTI_MAX_CANDIDATES])
    if len(ordered) < 2:
        return None
    best: Command | None = None
    low, high = 1, len(ordered) - 1  # prefix = ordered[: mid + 1]
    if rules.whole_prefix_first:
        command = probe(repacker, ordered, rules)
        if command is not None:
            return command
        high -= 1
    probes = 1 if rules.whole_prefix_first else 0
    while low <= high and probes < MULTI_PROBES:
        probes += 1
        mid = (low + high) // 2
        prefix = ordered[: mid + 1]
        command = probe(repacker, prefix, rules)
        if command is not None:
            if best is None or command.savings > best.savings + EPSILON or rules.max_replacements == 1:
                best = command
            low = mid + 1
        else:
            high = mid - 1
    return best


def interleave(ordered: Sequence[Candidate]) -> list[Candidate]:
    """Karpenter's single-node order: round-robin across NodePools, each pool in consolidation order."""
    by_pool: dict[str, list[Candidate]] = {}
    for candidate in ordered:
        by_pool.setdefault(candidate.pool, []).append(candidate)
    longest = max((len(v) for v in by_pool.values()), default=0)
    return [by_pool[p][i] for i in range(longest) for p in sorted(by_pool) if i < len(by_pool[p])]


def single_node(
    repacker: Repacker, ordered: Sequence[Candidate], screen: ResourceScreen, rules: Rules
) -> Command | None:
    hopeful = [(screen.bound(c), i, c) for i, c in enumerate(interleave(ordered))]
    hopeful = [h for h in hopeful if h[0] > EPSILON]
    hopeful.sort(key=lambda h: (-h[0], h[1]))
    for _, _, candidate in hopeful[:SINGLE_CONFIRMATIONS]:
        command = probe(repacker, [candidate], rules)
        if command is not None:
            return command
    return None


class ResourceScreen:
    """An optimistic bound of what removing one node saves, from requests alone (no placement rules): its
    price if its pods' requests fit the free room of the other nodes, else its price minus the least new
    nodes could cost (requests at the pool's cheapest rate per CPU and per byte). The core confirms."""

    def __init__(self, view: ClusterView, prices_by_pool: Mapping[str, Sequence[tuple[int, int, float]]]):
        self.view = view
        self.types = prices_by_pool
        self.free = {"cpu": 0, "memory": 0}
        self.node_free: dict[str, tuple[int, int]] = {}
        self.roomiest = (0, 0)
        core = view.core
        if core is None:
            return
        used: dict[str, list[int]] = {}
        for pod in core.pods:
            if pod.node_name:
                entry = used.setdefault(pod.node_name, [0, 0])
                entry[0] += pod.requests.get("cpu", 0)
                entry[1] += pod.requests.get("memory", 0)
        for node in core.nodes:
            if node.unschedulable:
                continue
            cpu = node.allocatable.get("cpu", 0) - used.get(node.name, [0, 0])[0]
            memory = node.allocatable.get("memory", 0) - used.get(node.name, [0, 0])[1]
            self.node_free[node.name] = (max(0, cpu), max(0, memory))
            self.free["cpu"] += max(0, cpu)
            self.free["memory"] += max(0, memory)
        self.requests = {p.key: (p.requests.get("cpu", 0), p.requests.get("memory", 0)) for p in core.pods}
        self.roomiest = (
            max((f[0] for f in self.node_free.values()), default=0),
            max((f[1] for f in self.node_free.values()), default=0),
        )

    def _requests_of(self, candidate: Candidate) -> list[tuple[int, int]]:
        from tenon.domain.disruption.view import pod_key

        return [self.requests.get(pod_key(p), (0, 0)) for p in candidate.reschedulable]

    def bound(self, candidate: Candidate) -> float:
        from tenon.domain.disruption.view import pod_key

        cpu = memory = 0
        for pod in candidate.reschedulable:
            c, m = self.requests.get(pod_key(pod), (0, 0))
            cpu, memory = cpu + c, memory + m
        own = self.node_free.get(candidate.node_name, (0, 0))
        largest = max((pod_request for pod_request in self._requests_of(candidate)), default=(0, 0))
        fits_somewhere = largest[0] <= self.roomiest[0] and largest[1] <= self.roomiest[1]
        if fits_somewhere and cpu <= self.free["cpu"] - own[0] and memory <= self.free["memory"] - own[1]:
            return candidate.price
        types = [(c, m, p) for c, m, p in self.types.get(candidate.pool, ()) if c > 0 and m > 0]
        if not types:
            return 0.0
        # what new nodes must cost at least (fractional: cpu and memory at their cheapest rates), one or many
        floor = max(cpu * min(p / c for c, _, p in types), memory * min(p / m for _, m, p in types))
        return max(0.0, candidate.price - floor)
