"""A command's life, as decisions (pure): Karpenter's orchestration queue on the event log.

1. **Proposed** (emptiness, consolidation): a ``DisruptionDecision`` with ``stage=proposed``; nothing is
   done. After :data:`SETTLE` (Karpenter's 15 s ``commandValidationDelay``) the same candidates are judged
   again on the state then: still candidates, still within budgets, the same kind of move at no higher price.
   While a proposal settles no new round starts (Karpenter's loop waits for its validation too).
2. **Confirmed**: ``stage=confirmed`` (the executor taints the candidates ``karpenter.sh/disrupted``). With
   replacements, ``ReplacementsRequested`` asks the scheduler for exactly those claims (again after
   :data:`REQUEST_AGAIN_AFTER` while it has planned none of them); once every one is
   Initialized, each candidate gets ``DisruptionRequested`` (termination drains it). Without replacements
   (a delete, an expiration), ``DisruptionRequested`` at once. Drift is confirmed at once (no settling, as
   Karpenter's drift).
3. **Abandoned**: the second judgement disagreed, or a replacement ended before it was Initialized, or
   none came within :data:`REPLACEMENT_TIMEOUT`: ``stage=abandoned`` (the executor untaints the candidates).

Ids are derived from the command's content and the moment it was decided, so a replay decides the same ids
and a repeated decision is recorded once.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta

from proto import events as ev
from proto import registry
from proto.ids import derive_id
from tenon.domain.disruption.commands import Command, Option, Replacement
from tenon.domain.disruption.view import ClusterView
from tenon.services.disruption.projection_view import Command as Underway
from tenon.services.disruption.projection_view import DisruptionState

PRODUCER = registry.DISRUPTION
SETTLE = timedelta(seconds=15)
REPLACEMENT_TIMEOUT = timedelta(minutes=20)
"""A replacement not Initialized this long after its command was confirmed fails the command (the
scheduler's own launch and registration timeouts, 5 + 15 minutes, abandon it first)."""
REQUEST_AGAIN_AFTER = timedelta(seconds=30)
"""A confirmed command none of whose replacements the scheduler has planned this long after the
confirmation asks for them again: the request may never have been recorded (the 10,000-pod scale run lost
one to a leader that lost its lease between recording the confirmation and the request, and 100 nodes
waited for replacements nobody had asked for). The request keeps its id and the scheduler plans only the
claims it does not have, so asking again is harmless."""


def request(
    claim_name: str,
    *,
    method: str,
    reason: str,
    at: datetime,
    node: str | None,
    decision_id: str | None = None,
    cause: str | None = None,
) -> ev.DisruptionRequested:
    """The request that starts a claim's termination (one per claim: its id is the claim's)."""
    return ev.DisruptionRequested(
        id=derive_id(PRODUCER, "DisruptionRequested", claim_name),
        decided_at=at,
        producer=PRODUCER,
        causation_id=cause,
        correlation_id=claim_name,
        nodeclaim=claim_name,
        method=method,
        reason=reason,
        node=node,
        decision_id=decision_id,
    )


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16]


def replacement_name(nodepool: str, command_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{command_id}/{index}".encode()).digest()
    return f"{nodepool}-{base64.b32encode(digest).decode().lower()[:5]}"


def _choice(option: Option) -> ev.InstanceChoice:
    return ev.InstanceChoice(option.instance_type, option.zone, option.capacity_type, option.price)


def replacement_claims(
    view: ClusterView, replacements: Iterable[Replacement], command_id: str
) -> tuple[ev.ReplacementClaim, ...]:
    out = []
    for index, r in enumerate(replacements):
        pool = view.nodepools.get(r.nodepool) or {}
        template = (pool.get("spec") or {}).get("template") or {}
        tspec = template.get("spec") or {}
        labels = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
        out.append(
            ev.ReplacementClaim(
                nodeclaim=replacement_name(r.nodepool, command_id, index),
                nodepool=r.nodepool,
                node_class=str((tspec.get("nodeClassRef") or {}).get("name", "")),
                choice=_choice(r.choice),
                fallbacks=tuple(_choice(o) for o in r.fallbacks),
                pods=r.pods,
                requirements=r.requirements,
                labels=labels,
                taints=tuple(tspec.get("taints") or ()),
                startup_taints=tuple(tspec.get("startupTaints") or ()),
                requests=dict(r.requests),
            )
        )
    return tuple(out)


def decision(
    command: Command,
    now: datetime,
    *,
    stage: str,
    continues: str | None = None,
    claims: tuple[ev.ReplacementClaim, ...] = (),
    id_parts: tuple[object, ...] = (),
    reason: str | None = None,
) -> ev.DisruptionDecision:
    names = sorted(c.name for c in command.candidates)
    decision_id = derive_id(
        PRODUCER,
        "DisruptionDecision",
        stage,
        command.method,
        continues or "",
        _digest(*names, now, *id_parts),
    )
    return ev.DisruptionDecision(
        id=decision_id,
        decided_at=now,
        producer=PRODUCER,
        correlation_id=continues or decision_id,
        method=command.method,  # type: ignore[arg-type]
        candidates=tuple(
            ev.DisruptionCandidate(
                nodeclaim=c.name, node=c.claim.node, nodepool=c.pool, reason=command.why.get(c.name, "")
            )
            for c in command.candidates
        ),
        reason=reason or command.detail,
        budget=command.budget,
        blocked=tuple(
            ev.BlockedCandidate(nodeclaim=b.claim, node=b.node, blocked_by=b.why) for b in command.blocked
        ),
        replacements=tuple(c.nodeclaim for c in claims),
        stage=stage,  # type: ignore[arg-type]
        command=continues,
        replacement_claims=claims,
        savings_per_hour=round(command.savings, 6),
        pods_moved=command.pods_moved,
    )


def confirm(state: DisruptionState, underway: Underway, command_id: str, now: datetime) -> list[ev.Event]:
    """What follows a confirmation: the replacement request, or the terminations."""
    if underway.replacements:
        return [
            ev.ReplacementsRequested(
                id=derive_id(PRODUCER, "ReplacementsRequested", command_id),
                decided_at=now,
                producer=PRODUCER,
                correlation_id=command_id,
                command=command_id,
                candidates=underway.candidates,
                replacements=underway.replacements,
                reason=underway.reason,
            )
        ]
    return terminations(state, underway, command_id, now)


def terminations(
    state: DisruptionState, underway: Underway, command_id: str, now: datetime
) -> list[ev.Event]:
    out: list[ev.Event] = []
    for name in underway.candidates:
        claim = state.projection.claims.get(name)
        if claim is None or claim.disruption is not None or not claim.live:
            continue
        out.append(
            request(
                name,
                method=underway.method,
                reason=underway.reason or underway.method,
                at=now,
                node=claim.node_name,
                decision_id=command_id,
            )
        )
    return out
