"""Emptiness as a queue kept at the budget (pure): settle many empty nodes at once, remove them as the budget
lets them go.

Karpenter's emptiness takes the empty candidates its budget allows *now*, waits out the validation period,
and then removes them; the next command begins after that. When a pool empties (a workload deleted), its
nodes go in as many settle-and-remove cycles as the budget is small: 500 empty nodes under a 10% budget need
about 43 generations, and a settle period in each is what bounds the pace, not the cloud or the budget.

Here the settle period is paid once, for every empty candidate of the pools whose budget is not zero (full
now is fine: the queue waits for room):

1. **Proposed**: one emptiness command with all of them (in consolidation order), beyond the budget, and
   the empty nodes that become consolidatable before it settles (:func:`empty_queue`).
2. **Confirmed** after settling: those still empty candidates, in the same order; the others drop out (none
   left: abandoned).
3. **Requested** one by one as the budget allows (:func:`queued_requests`): whenever a node finishes (its
   claim's ``NodeClaimTerminated`` is folded) or a tick comes, as many of the command's waiting candidates as
   the pool's allowance has room for, each checked again at that moment: still an empty candidate. A waiting
   candidate that is no longer one ends the command (abandoned, its requests already made go on), and the
   next round proposes again what is still empty.

The budget is counted as Karpenter counts it (:func:`.load.pool_load`): a pool's initialized
claims until they are Terminated (a claim whose Node is drained or deleted still holds its machine, and its
place in the budget, until the launcher removes that machine), and as disrupting those whose termination was
requested, or whose Node is deleting, not Ready or gone. Every method's view counts the same claims
(:func:`.load.budget_load`). The waiting candidates of a queue are not counted: they are not
disrupted yet, and while a queue holds them no other command starts on their pool (they are busy for every
round).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from proto import events as ev
from tenon.domain.disruption import emptiness
from tenon.domain.disruption.budgets import Allowance, allowance
from tenon.domain.disruption.candidates import PdbLedger, budget_mapping, candidates
from tenon.domain.disruption.commands import Command
from tenon.domain.disruption.rounds import pdb_safe
from tenon.domain.disruption.view import ClusterView
from tenon.services.disruption.load import PoolLoad, pool_load
from tenon.services.disruption.orchestration import request
from tenon.services.disruption.projection_view import Command as Underway
from tenon.services.disruption.projection_view import DisruptionState, build_view

QUEUED_METHOD = "emptiness"
"""The method whose commands are queues."""


def is_queue(underway: Underway) -> bool:
    return underway.method == QUEUED_METHOD and not underway.replacements


def empty_queue(view: ClusterView, settle: timedelta = timedelta(0)) -> Command | None:
    """Every empty candidate (PDB-safe) of the pools whose Empty budget is not zero, as one emptiness
    command; the budget it names is the pool's as it stands. A pool whose budget is full now (a queue
    draining it) is proposed for too: the new queue settles while the other drains and is requested as room
    frees, so the budget does not run dry between two queues (proposed only once room came, the settle
    period was a gap of 1-2 s at zero in every 500-node scale-down).

    The proposal also takes the empty nodes whose ``consolidateAfter`` ends within ``settle`` (the period it
    settles for), where Karpenter proposes only those consolidatable now: a workload deleted empties its
    nodes over a second or two, and the nodes that came just after the first proposal settled a period of
    their own, a queue later (the budget a tenth full for a second of a 500-node scale-down). Nothing goes
    sooner for it: each is confirmed only if consolidatable when the proposal settles, and it was empty
    through the whole settle period, as Karpenter's validation asks."""
    budgets = budget_mapping(view, emptiness.REASON)
    found, _ = candidates(view)
    open_pools = {pool for pool, a in budgets.items() if not a.invalid and _at_once(a) > 0}
    offered = [c for c in pdb_safe(found, PdbLedger(view), view) if c.pool in open_pools]
    if not offered:
        return None
    unlimited = {pool: Allowance(len(offered), budgets[pool].budget) for pool in open_pools}
    command, _ = emptiness.decide(view, offered, unlimited, within=settle)
    return command


def _at_once(allowance: Allowance) -> int:
    return allowance.allowed if allowance.at_once is None else allowance.at_once


def room(state: DisruptionState, pools: Iterable[str], now: datetime) -> dict[str, int]:
    """Pool -> how many more of its nodes the Empty budget lets go now."""
    load = pool_load(state)
    out: dict[str, int] = {}
    for pool in pools:
        nodepool = state.projection.nodepools.get(pool)
        counted = load.get(pool, PoolLoad(0, 0))
        if nodepool is None:
            out[pool] = 0
            continue
        out[pool] = allowance(
            nodepool, emptiness.REASON, total_nodes=counted.total, disrupting=counted.disrupting, now=now
        ).allowed
    return out


@dataclass(frozen=True)
class QueueStep:
    """What a queue does now: the requests the budget lets go, or why it stops."""

    requests: tuple[ev.DisruptionRequested, ...] = ()
    stopped: str | None = None
    """Why the command ends before its waiting candidates are all requested (None: it goes on)."""


def waiting(state: DisruptionState, underway: Underway) -> list[str]:
    """The queue's candidates not yet requested and not ended, in the command's order."""
    claims = state.projection.claims
    return [
        name
        for name in underway.candidates
        if (claim := claims.get(name)) is not None and claim.disruption is None and claim.live
    ]


def queued_requests(
    state: DisruptionState,
    underway: Underway,
    now: datetime,
    *,
    cause: str | None = None,
    spent: dict[str, int] | None = None,
) -> QueueStep:
    """The next requests of a confirmed queue: as many waiting candidates as their pools' budgets have room
    for, each still an empty candidate now (see the module docstring). ``spent``: pool -> requests already
    made in the same decision by other queues (not in ``state`` yet), taken off the room and added to."""
    queued = waiting(state, underway)
    if not queued:
        return QueueStep()
    pools = _pools_of(state, queued)
    spent = {} if spent is None else spent
    left = {pool: n - spent.get(pool, 0) for pool, n in room(state, set(pools.values()), now).items()}
    turn = _turn(queued, pools, left)
    if not turn:
        return QueueStep()
    view = build_view(state, now, settling=frozenset(underway.candidates), with_core=False, claims=turn)
    found, _ = candidates(view)
    still_empty = {c.name for c in emptiness.empty_candidates(view, found)}
    gone = [name for name in turn if name not in still_empty]
    if gone:
        return QueueStep(stopped=f"{gone[0]} is no longer an empty candidate")
    for name in turn:
        spent[pools[name]] = spent.get(pools[name], 0) + 1
    return QueueStep(
        tuple(
            request(
                name,
                method=underway.method,
                reason=underway.reason or underway.method,
                at=now,
                node=state.projection.claims[name].node_name,
                decision_id=underway.id,
                cause=cause,
            )
            for name in turn
        )
    )


def _pools_of(state: DisruptionState, names: Iterable[str]) -> dict[str, str]:
    claims = state.projection.claims
    out = {}
    for name in names:
        planned = claims[name].planned
        out[name] = planned.nodepool if planned is not None else ""
    return out


def _turn(queued: list[str], pools: Mapping[str, str], left: Mapping[str, int]) -> list[str]:
    """The waiting candidates whose turn it is: in order, as many per pool as it has room for."""
    remaining = dict(left)
    turn = []
    for name in queued:
        pool = pools[name]
        if remaining.get(pool, 0) > 0:
            remaining[pool] -= 1
            turn.append(name)
    return turn
