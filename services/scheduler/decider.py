"""The scheduler's whole decision function, as ``tenon replay scheduler`` runs it.

``decide`` answers a PendingBatch with NodeClaims (:mod:`.planner`), an abandoned claim by planning its pods
again, and Node and claim events with lifecycle steps (:mod:`.lifecycle`); ``evolve`` folds every event into
the :class:`ClusterProjection`. The live service runs exactly this, plus I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from proto import events as ev
from services.scheduler import lifecycle, planner
from shared.projection import ClusterProjection


class SchedulerDecider:
    name = planner.PRODUCER

    def initial_state(self) -> ClusterProjection:
        return ClusterProjection()

    def evolve(self, state: ClusterProjection, event: ev.Event, sequence: int = 0) -> ClusterProjection:
        return state.apply(event, sequence)

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.PendingBatch):
            return planner.plan_batch(state, event).events
        if isinstance(event, ev.NodeClaimAbandoned):
            return planner.replan_abandoned(state, event).events
        return lifecycle.decide(state, event)
