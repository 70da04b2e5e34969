"""The scheduler's whole decision function, as ``tenon replay scheduler`` runs it.

``evolve`` folds every event into the :class:`ClusterProjection`; ``decide`` then looks at the state *with* the
event folded in and answers: a PendingBatch with NodeClaims (:mod:`.planner`), an abandoned claim by planning
its pods again, Node and claim events with lifecycle steps (:mod:`.lifecycle`). The live service runs exactly
this, plus I/O, and so does ``tenon replay scheduler``.
"""

from __future__ import annotations

from collections.abc import Sequence

from proto import events as ev
from tenon.domain.projection import ClusterProjection
from tenon.services.scheduler import lifecycle, planner


class SchedulerDecider:
    name = planner.PRODUCER

    def initial_state(self) -> ClusterProjection:
        return ClusterProjection()

    def evolve(self, state: ClusterProjection, event: ev.Event, sequence: int = 0) -> ClusterProjection:
        return state.apply(event, sequence)

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.PendingBatch):
            return planner.plan_batch(state, event).events
        decisions: list[ev.Event] = []
        if isinstance(event, ev.NodeClaimAbandoned):
            decisions += planner.replan_abandoned(state, event).events
        return decisions + lifecycle.decide(state, event)
