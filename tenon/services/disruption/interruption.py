"""The disruption service's answer to an ``InterruptionNotice`` (pure): notices + the projection -> decisions.

A provider says a machine goes away (a spot interruption warning: two minutes; an AWS Health scheduled change;
an instance stopping or terminating). What Karpenter does (``pkg/controllers/interruption``) is delete the
NodeClaim: the node is tainted and drained while the provisioner launches room for its pods. tenon does the
same in a stricter order, every step on the claim's aggregate (so ``tenon explain`` tells it):

1. **The replacement first** (:func:`on_notice`): a ``DisruptionDecision`` (method ``interruption``, stage
   ``confirmed``, no budget: interruption is forceful, budgets do not hold it back) with one replacement claim
   for the node's pods, planned like any other through ``ReplacementsRequested`` (the scheduler plans it as
   given). Its choices are the interrupted claim's own, without the offering being reclaimed (a spot
   interruption of ``m5.large`` in ``us-east-1b`` does not buy spot ``m5.large`` in ``us-east-1b`` again);
   the EC2 launcher marks that spot offering unavailable for 3 minutes when it reads the notice, so nothing
   else buys it either. A node with no pods to move needs no replacement.
2. **Then the drain** (:func:`tick`): ``DisruptionRequested`` (method ``interruption``) once the replacement
   is Initialized (or ended without getting there), or once the notice's deadline is :data:`DRAIN_MARGIN`
   away, whichever comes first (a node that will vanish is drained while it can still be drained); at once
   when there is nothing to move, or for a state change (the instance is already stopping). Termination
   then taints the node ``karpenter.sh/disrupted:NoSchedule`` and evicts its pods (PodDisruptionBudgets hold
   until the deadline, :meth:`Interruptions.deadline_of`, and no longer: the machine goes then anyway).

A **rebalance recommendation** is only recorded (a ``DisruptionDecision`` of stage ``abandoned`` naming the
claim as blocked, with why: it starts nothing) unless the claim's NodePool opts in with the annotation
:data:`REBALANCE_OPT_IN` set to ``"true"``; then it is handled like a scheduled change without a deadline
(rebalance recommendations come far more often than interruptions: acting on every one churns nodes,
Karpenter #2813 / #2853).

Everything is idempotent: ids derive from the notice and the claim, and a claim already being disrupted is
left to that disruption. What answers the notice names it as its cause; the drain decided on a tick has no
cause (the runtime gives it its basis) and names its decision in ``decisionId``, so ``tenon replay
disruption`` decides both again from the log.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from proto import events as ev
from proto.ids import derive_id
from tenon.core.wellknown import REPLACE_ON_REBALANCE
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection

PRODUCER = "disruption"
DRAIN_MARGIN = timedelta(seconds=90)
"""How long before a notice's deadline the drain starts even if the replacement is not Initialized yet
(evicting a node's pods takes time; a spot warning gives two minutes in all)."""
REBALANCE_OPT_IN = REPLACE_ON_REBALANCE
"""NodePool annotation: ``"true"`` replaces nodes on a rebalance recommendation."""
ACTIONABLE = ("spot-interruption", "scheduled-change", "state-change")


@dataclass
class Interruptions:
    """The notices disruption acts on, by providerID (the first of each; a repeat changes nothing)."""

    notices: dict[str, ev.InterruptionNotice] = field(default_factory=dict)

    def fold(self, notice: ev.InterruptionNotice) -> None:
        self.notices.setdefault(notice.provider_id, notice)

    def forget_ended(self, projection: ClusterProjection) -> None:
        """Drop the notices of machines whose claims ended (or tenon never ran): nothing is left to do."""
        live = {c.launched.provider_id for c in projection.claims.values() if c.launched and not c.ended}
        for provider_id in [p for p in self.notices if p not in live]:
            del self.notices[provider_id]

    def deadline_of(self, claim: NodeClaim) -> datetime | None:
        """When the claim's machine goes away for an interruption it was noticed of (None: no such notice).
        Termination respects PodDisruptionBudgets until then, no longer."""
        if claim.launched is None:
            return None
        notice = self.notices.get(claim.launched.provider_id)
        return notice.deadline if notice is not None else None


def claim_of(projection: ClusterProjection, provider_id: str) -> NodeClaim | None:
    for claim in projection.claims.values():
        if claim.launched is not None and claim.launched.provider_id == provider_id and not claim.ended:
            return claim
    return None


def replacement_name(claim: NodeClaim, notice: ev.InterruptionNotice) -> str:
    digest = hashlib.sha256(f"{notice.id}/{claim.name}".encode()).digest()
    return f"{claim.nodepool or 'replacement'}-{base64.b32encode(digest).decode().lower()[:5]}"


def _opted_in(projection: ClusterProjection, claim: NodeClaim) -> bool:
    pool = projection.nodepools.get(claim.nodepool or "") or {}
    annotations = (pool.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(REBALANCE_OPT_IN, "")).lower() == "true"


def _choices(claim: NodeClaim) -> tuple[ev.InstanceChoice, ...]:
    """The claim's own choices without the offering being reclaimed."""
    launched = claim.launched
    assert launched is not None
    return tuple(
        c
        for c in claim.attempts
        if not (
            c.instance_type == launched.instance_type
            and c.capacity_type == (launched.capacity_type or c.capacity_type)
            and c.zone in (None, launched.zone)
        )
    )


def _pods(projection: ClusterProjection, claim: NodeClaim) -> tuple[str, ...]:
    node = claim.node_name
    if node is None:
        return ()
    out = []
    for pod in projection.pods_on(node):
        meta = pod.get("metadata") or {}
        if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
            continue
        out.append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    return tuple(sorted(out))


def _replacement(
    claim: NodeClaim, notice: ev.InterruptionNotice, pods: tuple[str, ...]
) -> ev.ReplacementClaim | None:
    planned = claim.planned
    choices = _choices(claim)
    if planned is None or not choices or not pods:
        return None
    return ev.ReplacementClaim(
        nodeclaim=replacement_name(claim, notice),
        nodepool=planned.nodepool,
        node_class=planned.node_class,
        choice=choices[0],
        fallbacks=choices[1:],
        pods=pods,
        requirements=planned.requirements,
        labels=dict(planned.labels),
        taints=planned.taints,
        startup_taints=planned.startup_taints,
    )


def _why(notice: ev.InterruptionNotice) -> str:
    deadline = notice.deadline.strftime("%H:%M:%SZ") if notice.deadline else "now"
    state = notice.detail.get("state")
    what = f"{notice.kind} ({state})" if state else notice.kind
    return f"{what} of {notice.provider_id}, gone by {deadline}"


def _candidate(claim: NodeClaim, notice: ev.InterruptionNotice) -> ev.DisruptionCandidate:
    return ev.DisruptionCandidate(claim.name, claim.node_name, claim.nodepool or "", _why(notice))


def _rebalance_recorded(claim: NodeClaim, notice: ev.InterruptionNotice) -> list[ev.Event]:
    blocked = ev.BlockedCandidate(
        claim.name,
        claim.node_name,
        f"rebalance recommendation recorded: NodePool {claim.nodepool} does not opt in "
        f'({REBALANCE_OPT_IN}: "true")',
    )
    return [
        ev.DisruptionDecision(
            id=derive_id(PRODUCER, "DisruptionDecision", "rebalance", notice.id, claim.name),
            decided_at=notice.decided_at,
            producer=PRODUCER,
            causation_id=notice.id,
            correlation_id=claim.name,
            method="interruption",
            candidates=(),
            reason=_why(notice),
            budget="none (interruption)",
            blocked=(blocked,),
            stage="abandoned",
        )
    ]


def on_notice(
    interruptions: Interruptions, projection: ClusterProjection, notice: ev.InterruptionNotice
) -> list[ev.Event]:
    """The decisions answering ``notice`` (already folded into ``interruptions``): the replacement first."""
    claim = claim_of(projection, notice.provider_id)
    if (
        claim is None
        or claim.disruption is not None
        or interruptions.notices.get(notice.provider_id) != notice
    ):
        return []
    if notice.kind == "rebalance-recommendation" and not _opted_in(projection, claim):
        return _rebalance_recorded(claim, notice)
    pods = _pods(projection, claim)
    replacement = _replacement(claim, notice, pods)
    decision_id = derive_id(PRODUCER, "DisruptionDecision", "interruption", notice.id, claim.name)
    decision = ev.DisruptionDecision(
        id=decision_id,
        decided_at=notice.decided_at,
        producer=PRODUCER,
        causation_id=notice.id,
        correlation_id=claim.name,
        method="interruption",
        candidates=(_candidate(claim, notice),),
        reason=_why(notice),
        budget="none: interruption is forceful (budgets do not hold it back)",
        replacements=(replacement.nodeclaim,) if replacement else (),
        stage="confirmed",
        command=decision_id,
        replacement_claims=(replacement,) if replacement else (),
        pods_moved=pods,
    )
    decisions: list[ev.Event] = [decision]
    if replacement is not None:
        decisions.append(
            ev.ReplacementsRequested(
                id=derive_id(PRODUCER, "ReplacementsRequested", decision_id),
                decided_at=notice.decided_at,
                producer=PRODUCER,
                causation_id=notice.id,
                correlation_id=claim.name,
                command=decision_id,
                candidates=(claim.name,),
                replacements=(replacement,),
                reason=_why(notice),
            )
        )
    else:
        drain = _drain(claim, notice, decision_id, notice.decided_at, "nothing to move first")
        decisions.append(msgspec.structs.replace(drain, causation_id=notice.id))
    return decisions


def _drain(
    claim: NodeClaim, notice: ev.InterruptionNotice, decision: str, at: datetime, why: str
) -> ev.Event:
    return ev.DisruptionRequested(
        id=derive_id(PRODUCER, "DisruptionRequested", claim.name),
        decided_at=at,
        producer=PRODUCER,
        correlation_id=claim.name,
        nodeclaim=claim.name,
        method="interruption",
        reason=f"{_why(notice)}: {why}",
        node=claim.node_name,
        decision_id=decision,
    )


def _drain_now(
    projection: ClusterProjection, claim: NodeClaim, notice: ev.InterruptionNotice, now: datetime
) -> str | None:
    """Why the drain starts now (None: not yet)."""
    if notice.kind == "state-change":
        return "the instance is already going"
    replacement = projection.claims.get(replacement_name(claim, notice))
    if replacement is not None and replacement.initialized is not None:
        return f"replacement {replacement.name} is Initialized"
    if replacement is not None and (replacement.ended or replacement.finally_failed):
        return f"replacement {replacement.name} ended before it was ready"
    if notice.deadline is not None and now >= notice.deadline - DRAIN_MARGIN:
        return f"{DRAIN_MARGIN.total_seconds():g}s before the deadline, replacement or not"
    return None


def tick(interruptions: Interruptions, projection: ClusterProjection, now: datetime) -> list[ev.Event]:
    """``DisruptionRequested`` for each interrupted claim whose drain is due (see the module docstring)."""
    decisions: list[ev.Event] = []
    for provider_id, notice in sorted(interruptions.notices.items()):
        claim = claim_of(projection, provider_id)
        if (
            claim is None
            or claim.disruption is not None
            or notice.kind not in ACTIONABLE + _opt_in(projection, claim, notice)
        ):
            continue
        why = _drain_now(projection, claim, notice, now)
        if why is not None:
            decision = derive_id(PRODUCER, "DisruptionDecision", "interruption", notice.id, claim.name)
            decisions.append(_drain(claim, notice, decision, now, why))
    return decisions


def _opt_in(
    projection: ClusterProjection, claim: NodeClaim, notice: ev.InterruptionNotice
) -> tuple[str, ...]:
    return ("rebalance-recommendation",) if _opted_in(projection, claim) else ()
