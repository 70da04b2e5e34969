"""The scheduler's whole decision function, as the live service and ``tenon replay scheduler`` run it.

``evolve`` folds every event into the :class:`ClusterProjection`; ``decide`` then looks at the state *with*
the event folded in and answers: a PendingBatch with NodeClaims (:mod:`.planner`), an abandoned claim by
planning its pods again, a disruption's replacements with their claims; and, whatever the input, every claim
with the lifecycle step now true and not yet recorded (:mod:`.lifecycle`, level-triggered). ``tick``
abandons claims that waited too long for their machine or their node.

It ``decides_on_batches`` (:mod:`tenon.runtime.decider`): a fetched batch of Node observations and claim
events is folded whole and decided once, so the 100 claims whose Nodes joined meanwhile are registered by one
decision (their Node patches and appends carried out together), not one after another; and those lifecycle
steps are carried out behind the deciding (:data:`CARRIED_OUT_BEHIND`), so the next Nodes do not wait for
them. An input whose answer
is about itself (:func:`decided_alone`: a batch to plan, an abandoned claim, replacements) is decided on the
state as of itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import msgspec

from proto import events as ev
from proto import registry
from tenon.domain.nodeclaim import ClaimBook
from tenon.domain.projection import ClusterProjection, decode_projection, encode_projection
from tenon.services.scheduler import lifecycle, nominations, planner, reoffers, replacements

ANSWERED_ALONE = (ev.PendingBatch, ev.ReplacementsRequested, ev.NodeClaimAbandoned)
"""Inputs whose answer is about the input itself: each is decided on the state as of itself."""
CARRIED_OUT_BEHIND = (ev.NodeClaimRegistered, ev.NodeClaimInitialized)
"""Decisions whose carrying out (the pods' nominations and the Node's patch, then the append) goes on while
the next inputs are decided: a Node that joins while a hundred registrations are carried out is registered
at once, not after them and then its own batch's (``Launched -> Registered``'s p99 was the length of two
such batches). A step decided again for a claim still being carried out waits behind it and is found
recorded."""


class SchedulerDecider:
    name = registry.SCHEDULER
    inputs = registry.inputs_of(registry.SCHEDULER)
    state_format = "scheduler/1"
    decides_on_batches = True
    ticks_by_lane = True
    """Its tick (:func:`.lifecycle.expired_claims`) judges each claim by its own phase and age alone."""

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

    def decided_alone(self, event: ev.Event) -> bool:
        return isinstance(event, ANSWERED_ALONE)

    def carried_out_behind(self, decision: ev.Event) -> bool:
        return isinstance(decision, CARRIED_OUT_BEHIND)

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        decisions: list[ev.Event] = []
        if isinstance(event, ev.PendingBatch):
            offered = tuple(
                nominations.without_own_nomination(state, pod)
                for pod in reoffers.to_plan_again(state, event.pods, event.window_opened_at)
            )
            decisions += planner.plan_batch(state, msgspec.structs.replace(event, pods=offered)).events
        elif isinstance(event, ev.ReplacementsRequested):
            decisions += replacements.plan_replacements(state, event)
        elif isinstance(event, ev.NodeClaimAbandoned):
            decisions += planner.replan_abandoned(state, event).events
        return decisions + lifecycle.due_everywhere(state, event)

    def tick(self, state: ClusterProjection, now: datetime) -> Sequence[ev.Event]:
        return lifecycle.expired_claims(
            state, now, launch_timeout=self.launch_timeout, registration_timeout=self.registration_timeout
        )

    def warm(self, state: ClusterProjection) -> None:
        """What a standby does before it may lead: read the cluster as a decision reads it, so the first
        decision of its term finds every Node and bound pod parsed already (seconds on a large cluster)."""
        planner.cluster_input(state, [], datetime.now(UTC))

    def claims(self, state: ClusterProjection) -> ClaimBook:
        return state.claims

    def encode(self, state: ClusterProjection) -> bytes:
        return encode_projection(state)

    def decode(self, data: bytes) -> ClusterProjection:
        return decode_projection(data)
