"""One disruption round (pure), Karpenter's loop: the methods in order, emptiness, drift, multi-node then
single-node consolidation, and the first that finds something to do acts alone this round. Expiration is
not part of the round (it is forceful, outside budgets): :func:`tenon.domain.disruption.expiration.decide`.

A round never plans more than the budgets allow for its reason, never moves a pod with an active
``do-not-disrupt``, and never evicts more pods under a PodDisruptionBudget than it allows: candidates are
charged against the PDBs as they are taken, so any prefix a method chooses is safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tenon.core import instance_types_for_node_pool
from tenon.domain.disruption import consolidation, drift, emptiness
from tenon.domain.disruption.budgets import Allowance
from tenon.domain.disruption.candidates import (
    Blocked,
    Candidate,
    PdbLedger,
    budget_mapping,
    candidates,
)
from tenon.domain.disruption.commands import Command
from tenon.domain.disruption.consolidation import TENON, ResourceScreen, Rules
from tenon.domain.disruption.simulation import Repacker
from tenon.domain.disruption.view import ClusterView


@dataclass(frozen=True)
class Round:
    command: Command | None
    blocked: tuple[Blocked, ...] = ()
    drifted: dict[str, tuple[str, str]] = field(default_factory=dict, hash=False)
    solves: int = 0


def pdb_safe(ordered: Sequence[Candidate], ledger: PdbLedger, view: ClusterView) -> list[Candidate]:
    """``ordered`` without the candidates whose pods, together with those taken before, a PDB refuses."""
    kept = []
    for candidate in ordered:
        if ledger.refusal(candidate.pods, view.now) is None:
            ledger.charge(candidate.pods, view.now)
            kept.append(candidate)
    return kept


def type_prices(view: ClusterView) -> dict[str, list[tuple[int, int, float]]]:
    """NodePool -> (allocatable cpu, memory, cheapest offering price) of each instance type it may launch."""
    out: dict[str, list[tuple[int, int, float]]] = {}
    if view.core is None:
        return out
    for pool in view.core.node_pools:
        types = instance_types_for_node_pool(view.core, pool)[0]
        out[pool.name] = [
            (t.allocatable.get("cpu", 0), t.allocatable.get("memory", 0), min(o.price for o in t.offerings))
            for t in types
            if any(o.available for o in t.offerings)
        ]
    return out


class _Lazy:
    """The repacker is made once per round, only when a method needs it."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._repacker: Repacker | None = None

    def get(self) -> Repacker | None:
        if self._repacker is None and self.view.core is not None:
            self._repacker = Repacker(self.view)
        return self._repacker

    @property
    def solves(self) -> int:
        return self._repacker.solves if self._repacker is not None else 0


def _with_budget(command: Command, budgets: Mapping[str, Allowance]) -> Command:
    from dataclasses import replace

    pools = sorted({c.pool for c in command.candidates})
    return replace(command, budget="; ".join(budgets[p].budget for p in pools if p in budgets))


def _consolidate(
    view: ClusterView, found: list[Candidate], lazy: _Lazy, rules: Rules
) -> tuple[Command | None, list[Blocked]]:
    eligible = consolidation.eligible(view, found)
    repacker = lazy.get()
    if not eligible or repacker is None:
        return None, []
    budgets = budget_mapping(view, consolidation.REASON)
    ordered = emptiness.order(eligible)
    budgeted = consolidation.within_budgets(ordered, budgets)
    taken = {c.name for c in budgeted}  # by name: comparing candidates compares all their pods
    blocked = [
        Blocked(c.name, c.node_name, f"budget: {budgets[c.pool].budget}")
        for c in ordered
        if c.name not in taken and c.pool in budgets
    ]
    safe = pdb_safe(budgeted, PdbLedger(view), view)
    command = consolidation.multi_node(repacker, safe, rules)
    if command is None:
        command = consolidation.single_node(repacker, safe, ResourceScreen(view, type_prices(view)), rules)
    return (_with_budget(command, budgets) if command else None), blocked


def decide_round(
    view: ClusterView,
    rules: Rules = TENON,
    *,
    known: tuple[list[Candidate], list[Blocked]] | None = None,
) -> Round:
    """One round on ``view``. ``known``: ``candidates(view)`` when the caller has it already, from a view of
    the same state at the same moment (candidates do not read the core's input), so the cluster is not
    walked for them twice."""
    lazy = _Lazy(view)
    found, blocked = known if known is not None else candidates(view)
    blocked = list(blocked)
    command, empty_blocked = emptiness.decide(
        view, pdb_safe(found, PdbLedger(view), view), budget_mapping(view, "Empty")
    )
    blocked += empty_blocked
    if command is not None:
        return Round(command, tuple(blocked))
    reasons = drift.drifted(view)
    if reasons:
        eventual, _ = candidates(view, eventual=True)
        command, drift_blocked = drift.decide(
            view, eventual, budget_mapping(view, drift.REASON), lazy.get(), reasons
        )
        blocked += drift_blocked
        if command is not None:
            return Round(command, tuple(blocked), reasons, lazy.solves)
    command, consolidation_blocked = _consolidate(view, found, lazy, rules)
    return Round(command, tuple(blocked + consolidation_blocked), reasons, lazy.solves)
