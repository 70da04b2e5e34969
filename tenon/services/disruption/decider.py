"""The disruption service's decision function (pure), as the live service and ``tenon replay disruption`` run
it.

* ``tick``: what the disruption methods decide now (emptiness, for now: :mod:`.emptiness`): one
  ``DisruptionDecision`` per NodePool with candidates or blocked candidates, and ``DisruptionRequested`` for
  each chosen claim.
* ``decide``: a Node deleted by a user (a deletion timestamp held by tenon's finalizer) becomes
  ``DisruptionRequested`` with method ``delete``, so it takes the same graceful path as every other removal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from proto import events as ev
from proto import registry
from proto.ids import derive_id
from tenon.domain.nodeclaim import ClaimBook
from tenon.domain.projection import ClusterProjection, decode_projection, encode_projection
from tenon.services.disruption import emptiness

PRODUCER = registry.DISRUPTION


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
        causation_id=cause or decision_id,
        correlation_id=claim_name,
        nodeclaim=claim_name,
        method=method,
        reason=reason,
        node=node,
        decision_id=decision_id,
    )


def node_deleted_by_user(state: ClusterProjection, event: ev.NodeObserved) -> list[ev.Event]:
    meta = event.node.get("metadata") or {}
    if event.change == "removed" or not meta.get("deletionTimestamp"):
        return []
    name = meta.get("name")
    return [
        request(
            claim.name,
            method="delete",
            reason=f"Node {name} deleted by a user",
            at=event.decided_at,
            node=name,
            cause=event.id,
        )
        for claim in state.claims.values()
        if claim.registered is not None
        and claim.registered.node == name
        and claim.disruption is None
        and not claim.ended
    ]


class DisruptionDecider:
    name = PRODUCER
    inputs = registry.inputs_of(PRODUCER)
    state_format = "disruption/1"
    observations = (ev.NodeClaimDrained,)
    """What it writes about the world rather than decides: a drain finished (the executor's termination)."""

    def initial_state(self) -> ClusterProjection:
        return ClusterProjection()

    def evolve(self, state: ClusterProjection, event: ev.Event, sequence: int = 0) -> ClusterProjection:
        return state.apply(event, sequence)

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.NodeObserved):
            return node_deleted_by_user(state, event)
        return ()

    def tick(self, state: ClusterProjection, now: datetime) -> Sequence[ev.Event]:
        return emptiness.decide(state, now)

    def claims(self, state: ClusterProjection) -> ClaimBook:
        return state.claims

    def encode(self, state: ClusterProjection) -> bytes:
        return encode_projection(state)

    def decode(self, data: bytes) -> ClusterProjection:
        return decode_projection(data)
