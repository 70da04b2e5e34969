"""The Cluster API launcher's whole decision function (pure), as the live service and ``tenon replay
launcher-capi`` run it.

* **inputs** (:func:`proto.registry.inputs_of`): every claim's story (``tenon.nodeclaim.>``), the
  ``NodeClassesSnapshot``, its own ``CatalogSnapshot`` (``tenon.catalog.*``, other launchers' ignored), and
  its own story of Cluster API (``tenon.capi.machinedeployment.*.*``, ``tenon.capi.machine.*.*``): what it
  observed, the evidence it gathered (``MachineLeakChecked``) and what it decided. Its executor publishes the
  observations and the evidence, so everything a decision depends on is in the log.
* ``evolve`` folds them into :class:`.state.LauncherState`.
* ``decide`` answers an input with :func:`.launching.plan` on the whole state (level-triggered), with the
  input as the decisions' cause and its ``decidedAt`` as their moment. It ``decides_on_batches``: the runtime
  folds a whole fetched batch of inputs and decides once, on its last input, so 200 claims planned at once
  cost one MachineDeployment patch per MachineDeployment, not 200 patches serialised on its
  resourceVersion. (Whatever the last input's type: a plan owes what the whole state owes.)
* ``lane``: the decisions of one plan on different claims and different Machines are carried out together
  (a claim's Launched is one append, a bind one Machine's patch, before its claim's Launched); a
  MachineDeployment's scale waits for everything before it (its decrements need their Machines marked first,
  its records the Machines bound first) and holds back everything after it.
* ``tick`` runs the same plan with no cause: whatever a dropped decision (a conflict, an API error) left to do
  is decided again there. The leak grace is not in the decider: the executor asks for evidence
  (:func:`.removal.leak_suspects`) and the decision follows from the recorded evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from proto import events as ev
from proto import registry
from tenon.domain.nodeclaim import ClaimBook
from tenon.runtime.decider import Lane
from tenon.services.launcher_capi.launching import plan
from tenon.services.launcher_capi.state import LauncherState, decode_state, encode_state

OBSERVATIONS: tuple[type[ev.Event], ...] = (
    ev.MachineDeploymentObserved,
    ev.MachineObserved,
    ev.MachineLeakChecked,
    ev.CatalogSnapshot,
)
"""What the executor writes about what it saw (no cause, no basis): inputs to decide on, not decisions."""


class CapiLauncherDecider:
    name = registry.LAUNCHER_CAPI
    inputs = registry.inputs_of(registry.LAUNCHER_CAPI)
    state_format = "launcher-capi/1"
    observations = OBSERVATIONS
    decides_on_batches = True

    def initial_state(self) -> LauncherState:
        return LauncherState()

    def evolve(self, state: LauncherState, event: ev.Event, sequence: int = 0) -> LauncherState:
        return state.apply(event, sequence)

    def decide(self, state: LauncherState, event: ev.Event) -> Sequence[ev.Event]:
        return plan(state, event, event.decided_at)

    def lane(self, decision: ev.Event) -> Lane:
        if isinstance(decision, ev.NodeClaimEvent | ev.MachineBound):
            return ("nodeclaim", decision.nodeclaim)  # a bind, then its claim's Launched
        if isinstance(decision, ev.MachineRemovalDecided | ev.MachineKept):
            return ("machine", decision.namespace, decision.machine)
        return None  # a MachineDeployment's scale: after what precedes it, before what follows

    def tick(self, state: LauncherState, now: datetime) -> Sequence[ev.Event]:
        return plan(state, None, now)

    def claims(self, state: LauncherState) -> ClaimBook:
        return state.claims

    def encode(self, state: LauncherState) -> bytes:
        return encode_state(state)

    def decode(self, data: bytes) -> LauncherState:
        return decode_state(data)
