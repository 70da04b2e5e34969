"""launcher-ec2's whole decision function (pure), as the live service and ``tenon replay launcher-ec2``
run it.

* **inputs** (:func:`proto.registry.inputs_of`): every claim's story, the ``NodeClassesSnapshot``, its own
  ``CatalogSnapshot``, the ``InterruptionNotice`` (a spot interruption marks the spot offering
  unavailable) and its own story of EC2 (``tenon.ec2.fleet.*``, ``tenon.ec2.instance.*``): what it asked, what
  EC2 answered, what it observed, the leak evidence it gathered and what it decided. Its executor publishes
  the answers, the observations and the evidence, so everything a decision depends on is in the log.
* ``evolve`` folds them into :class:`.state.Ec2State`.
* ``decide`` answers an input with :func:`.launching.plan` on the whole state, with the input as the
  decisions' cause and its ``decidedAt`` as their moment; ``tick`` runs the same plan with no cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from proto import events as ev
from proto import registry
from tenon.domain.nodeclaim import ClaimBook
from tenon.services.launcher_ec2.launching import plan
from tenon.services.launcher_ec2.state import Ec2State, decode_state, encode_state

NOTHING_TO_DECIDE = (
    ev.NodeClaimRegistered,
    ev.NodeClaimInitialized,
    ev.DisruptionRequested,
    ev.NodeClassesSnapshot,
    ev.Ec2FleetRequested,
    ev.Ec2InstanceTerminationDecided,
    ev.Ec2InstanceKept,
)
"""Inputs folded but not decided on: nothing the launcher decides reads what they change, or (its own
decisions coming back) what they change was folded, and decided on, when they were made."""

OBSERVATIONS: tuple[type[ev.Event], ...] = (
    ev.Ec2FleetAnswered,
    ev.Ec2InstanceObserved,
    ev.Ec2InstanceLeakChecked,
    ev.CatalogSnapshot,
)
"""What the executor writes about what it saw (no cause, no basis): inputs to decide on, not decisions."""


class Ec2LauncherDecider:
    name = registry.LAUNCHER_EC2
    inputs = registry.inputs_of(registry.LAUNCHER_EC2)
    state_format = "launcher-ec2/1"
    observations = OBSERVATIONS

    def __init__(self, cluster: str = "tenon") -> None:
        self.cluster = cluster

    def initial_state(self) -> Ec2State:
        return Ec2State()

    def evolve(self, state: Ec2State, event: ev.Event, sequence: int = 0) -> Ec2State:
        return state.apply(event, sequence)

    def decide(self, state: Ec2State, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, NOTHING_TO_DECIDE):
            return ()
        return plan(state, event, event.decided_at, self.cluster)

    def tick(self, state: Ec2State, now: datetime) -> Sequence[ev.Event]:
        return plan(state, None, now, self.cluster)

    def claims(self, state: Ec2State) -> ClaimBook:
        return state.claims

    def encode(self, state: Ec2State) -> bytes:
        return encode_state(state)

    def decode(self, data: bytes) -> Ec2State:
        return decode_state(data)
