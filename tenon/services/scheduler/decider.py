"""The scheduler's whole decision function, as the live service and ``tenon replay scheduler`` run it.

``evolve`` folds every event into the :class:`ClusterProjection`; ``decide`` then looks at the state *with*
the event folded in and answers: a PendingBatch with NodeClaims (:mod:`.planner`), an abandoned claim by
planning its pods again, Node and claim events with lifecycle steps (:mod:`.lifecycle`). ``tick`` abandons
claims that waited too long for their machine or their node.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from proto import events as ev
from proto import registry
from tenon.domain.nodeclaim import ClaimBook
from tenon.domain.projection import ClusterProjection, decode_projection, encode_projection
from tenon.services.scheduler import lifecycle, planner, replacements


class SchedulerDecider:
    name = registry.SCHEDULER
    inputs = registry.inputs_of(registry.SCHEDULER)
    state_format = "scheduler/1"

    def __init__(
        self,
        *,
        launch_timeout: timedelta = lifecycle.LAUNCH_TIMEOUT,
        registration_timeout: timedelta = lifecycle.REGISTRATION_TIMEOUT,
    ) -> None:
        self.launch_timeout = launch_timeout
        self.registration_timeout = registration_timeout

    def initial_state(self) -> ClusterProjection:
        return ClusterProjection()

    def evolve(self, state: ClusterProjection, event: ev.Event, sequence: int = 0) -> ClusterProjection:
        return state.apply(event, sequence)

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.PendingBatch):
            return planner.plan_batch(state, event).events
        if isinstance(event, ev.ReplacementsRequested):
            return replacements.plan_replacements(state, event)
        decisions: list[ev.Event] = []
        if isinstance(event, ev.NodeClaimAbandoned):
            decisions += planner.replan_abandoned(state, event).events
        return decisions + lifecycle.decide(state, event)

    def tick(self, state: ClusterProjection, now: datetime) -> Sequence[ev.Event]:
        return lifecycle.expired_claims(
            state, now, launch_timeout=self.launch_timeout, registration_timeout=self.registration_timeout
        )

    def claims(self, state: ClusterProjection) -> ClaimBook:
        return state.claims

    def encode(self, state: ClusterProjection) -> bytes:
        return encode_projection(state)

    def decode(self, data: bytes) -> ClusterProjection:
        return decode_projection(data)
