"""What the Cluster API launcher should do now (pure): claims + MachineDeployments + Machines -> actions.

The launcher is level-triggered: every time something changes (a claim event, an MD, a Machine) it calls
:func:`decide` on the whole current state and carries out the :class:`Decision`. Acting twice on the same
state therefore decides nothing new, which is what makes a redelivered ``NodeClaimPlanned`` or a restart
harmless. Nothing here reads a clock or a socket; time enters as ``now`` and each Machine's ``first_seen``.

**The durable record lives on the MachineDeployment.** A crash can fall between two writes, so every write
that changes ``spec.replicas`` also records *why* in annotations on the same object, in the same merge patch
(with a ``metadata.resourceVersion`` precondition, so a concurrent writer makes it fail with 409 and the
launcher decides again from fresh state):

* ``tenon.sh/scaled-up-for``: the claims a replica was added for that have no Machine bound yet. A claim on
  that list is never scaled for again; when its Machine appears it is bound and the claim leaves the list.
* ``tenon.sh/scaled-down-for``: the Machines whose replica was removed. A Machine annotated
  ``cluster.x-k8s.io/delete-machine`` (by us, first) but missing from this list still needs its decrement.

So the rule "scale up by exactly the claims it owes" reads: a claim is *owed* a replica when it is live, not
launched, its current choice maps to this MD, no Machine is bound to it and it is not on the scaled-up list.
Owed claims first take over list entries of claims that went away before their Machine appeared (no new
replica needed); the rest scale the MD up, and go on the list in the same patch. Counting Machines alone
would double-scale after a restart in the moment between the replicas patch and the Machine's creation; the
list makes that moment safe.

**Binding** annotates a Machine ``tenon.sh/nodeclaim: <claim>`` and labels it ``karpenter.sh/nodepool``. Only
claims on the scaled-up list take unbound Machines (in list order, newest Machine first): the Machines an MD
already had are someone's running nodes, not new machines (Karpenter's provider binds any "unclaimed" Machine,
which hands a claim a node that may already be full). Live claims come first; a claim that went away still
takes the Machine its replica produced, which is then removed like any Machine bound to a gone claim.

**Launched**: a live claim with a bound Machine that has ``spec.providerID`` gets ``NodeClaimLaunched``.

**Max size**: an owed claim beyond ``max-size - replicas`` (or on a paused MD, or whose choice no MD offers)
gets ``NodeClaimLaunchFailed``: ``retryable=True`` while the claim has another choice (the scheduler's
fallbacks, in order), ``False`` on the last. The claim's current choice is the one after as many choices as it
has LaunchFailed events, so the projection alone says where it stands.

**Removal**: a Machine bound to a claim that was abandoned, drained, terminated or finally failed is removed at
once; one bound to a claim the log never had is removed after ``leak_grace`` seconds from when it was first
seen (the grace covers a Planned event not yet read). Removal is the delete-machine annotation on exactly that
Machine, then one replica fewer, so Cluster API never picks another Machine.

**Terminated**: the disruption service drains a node and appends ``NodeClaimDrained``; the launcher removes the
claim's Machine and, once no Machine bound to the claim exists any more, appends ``NodeClaimTerminated``
(``services/disruption/termination.py`` counts on this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proto.events import (
    DisruptionRequested,
    Event,
    InstanceChoice,
    NodeClaimAbandoned,
    NodeClaimDrained,
    NodeClaimEvent,
    NodeClaimLaunched,
    NodeClaimLaunchFailed,
    NodeClaimPlanned,
    NodeClaimTerminated,
)
from tenon.core.wellknown import (
    DELETE_MACHINE,
    DEPLOYMENT_NAME,
    MAX_SIZE,
    NODECLAIM,
    PAUSED,
    SCALED_DOWN_FOR,
    SCALED_UP_FOR,
)
from tenon.runtime.eventlog.factories import make_event
from tenon.services.launcher_capi.catalog import MachineDeploymentKey

PRODUCER = "launcher-capi"

Targets = Mapping[str, Mapping[tuple[str, str | None], MachineDeploymentKey]]
"""NodeClass name -> (instance type, zone) -> the MD launching it (from ``catalog.build_catalog``)."""


# -- the claim projection ----------------------------------------------------------------------------------


@dataclass
class ClaimState:
    """One NodeClaim as its aggregate subject tells it."""

    name: str
    planned: NodeClaimPlanned
    first_sequence: int
    last_sequence: int
    failed_attempts: int = 0
    final_failure: bool = False
    launched: NodeClaimLaunched | None = None
    ended: str | None = None
    """The event type that ended it (NodeClaimAbandoned, NodeClaimTerminated), else None."""
    drained: NodeClaimDrained | None = None
    """The disruption service drained its node: the Machine goes, then the launcher appends Terminated."""

    @property
    def attempts(self) -> tuple[InstanceChoice, ...]:
        return (self.planned.choice, *self.planned.fallbacks)

    @property
    def current_choice(self) -> InstanceChoice | None:
        attempts = self.attempts
        return attempts[self.failed_attempts] if self.failed_attempts < len(attempts) else None

    @property
    def live(self) -> bool:
        return self.ended is None and not self.final_failure and self.drained is None


ENDING_EVENTS = (NodeClaimAbandoned, NodeClaimTerminated)


def apply_claim_event(claims: dict[str, ClaimState], event: Event, sequence: int) -> bool:
    """Fold one event from ``tenon.nodeclaim.*`` into the projection; False when it was already folded in.

    Every event on a claim's subject moves its ``last_sequence`` (the expected-last-sequence of our next
    append), whoever wrote it. ``DisruptionRequested`` is the disruption service's business: it only moves the
    sequence here.
    """
    if not isinstance(event, NodeClaimEvent):
        return False
    claim = claims.get(event.nodeclaim)
    if claim is not None and sequence <= claim.last_sequence:
        return False
    if isinstance(event, NodeClaimPlanned):
        if claim is None:
            claims[event.nodeclaim] = ClaimState(event.nodeclaim, event, sequence, sequence)
        else:
            claim.last_sequence = sequence
        return True
    if claim is None:
        return False  # a claim whose Planned we never saw (trimmed from the log): nothing to launch
    claim.last_sequence = sequence
    if isinstance(event, NodeClaimLaunchFailed):
        claim.failed_attempts += 1
        if not event.retryable:
            claim.final_failure = True
    elif isinstance(event, NodeClaimLaunched):
        claim.launched = event
    elif isinstance(event, ENDING_EVENTS):
        claim.ended = type(event).__name__
    elif isinstance(event, NodeClaimDrained):
        claim.drained = event
    elif isinstance(event, DisruptionRequested):
        pass
    return True


# -- views of the Cluster API objects ----------------------------------------------------------------------


def _name_list(value: object) -> tuple[str, ...]:
    return tuple(part for part in (str(value or "")).split(",") if part)


@dataclass(frozen=True)
class MachineDeploymentView:
    key: MachineDeploymentKey
    replicas: int
    resource_version: str
    max_size: int | None = None
    paused: bool = False
    scaled_up_for: tuple[str, ...] = ()
    scaled_down_for: tuple[str, ...] = ()


def machine_deployment_view(md: Mapping[str, Any]) -> MachineDeploymentView:
    meta = md.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = md.get("spec") or {}
    try:
        max_size: int | None = int(annotations[MAX_SIZE])
    except (KeyError, TypeError, ValueError):
        max_size = (
            None  # missing or unparseable means no limit, as in cluster-autoscaler (the catalog skips it)
        )
    return MachineDeploymentView(
        key=MachineDeploymentKey(str(meta.get("namespace") or "default"), str(meta.get("name") or "")),
        replicas=int(spec.get("replicas") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        max_size=max_size,
        paused=bool(spec.get("paused")) or PAUSED in annotations,
        scaled_up_for=_name_list(annotations.get(SCALED_UP_FOR)),
        scaled_down_for=_name_list(annotations.get(SCALED_DOWN_FOR)),
    )


@dataclass(frozen=True)
class MachineView:
    namespace: str
    name: str
    deployment: str | None
    claim: str | None
    provider_id: str | None
    deleting: bool
    marked: bool
    created: str
    first_seen: float

    @property
    def md(self) -> MachineDeploymentKey | None:
        return MachineDeploymentKey(self.namespace, self.deployment) if self.deployment else None


def machine_view(machine: Mapping[str, Any], first_seen: float) -> MachineView:
    meta = machine.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    return MachineView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        deployment=labels.get(DEPLOYMENT_NAME),
        claim=annotations.get(NODECLAIM) or None,
        provider_id=(machine.get("spec") or {}).get("providerID") or None,
        deleting=bool(meta.get("deletionTimestamp")),
        marked=DELETE_MACHINE in annotations,
        created=str(meta.get("creationTimestamp") or ""),
        first_seen=first_seen,
    )


# -- actions -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendClaimEvent:
    claim: str
    event: NodeClaimEvent
    expected_last_sequence: int


@dataclass(frozen=True)
class MarkMachine:
    """Annotate ``cluster.x-k8s.io/delete-machine`` so Cluster API removes exactly this Machine first."""

    namespace: str
    name: str
    reason: str


@dataclass(frozen=True)
class BindMachine:
    namespace: str
    name: str
    claim: str
    nodepool: str


@dataclass(frozen=True)
class ScaleDeployment:
    """One merge patch of ``spec.replicas`` and the two record annotations, preconditioned on the version."""

    key: MachineDeploymentKey
    resource_version: str
    replicas_from: int
    replicas_to: int
    scaled_up_for: tuple[str, ...]
    scaled_down_for: tuple[str, ...]

    def patch(self) -> dict[str, Any]:
        return {
            "metadata": {
                "resourceVersion": self.resource_version,
                "annotations": {
                    SCALED_UP_FOR: ",".join(self.scaled_up_for) or None,
                    SCALED_DOWN_FOR: ",".join(self.scaled_down_for) or None,
                },
            },
            "spec": {"replicas": self.replicas_to},
        }


@dataclass
class Decision:
    """Carry out in this order: marks, binds, scales, appends (a mark precedes its decrement)."""

    marks: list[MarkMachine] = field(default_factory=list)
    binds: list[BindMachine] = field(default_factory=list)
    scales: list[ScaleDeployment] = field(default_factory=list)
    appends: list[AppendClaimEvent] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.marks or self.binds or self.scales or self.appends)


@dataclass(frozen=True)
class LauncherState:
    claims: Mapping[str, ClaimState]
    targets: Targets
    deployments: Mapping[MachineDeploymentKey, MachineDeploymentView]
    machines: Sequence[MachineView]
    now: float
    leak_grace: float = 600.0


# -- the decider ---------------------------------------------------------------------------------------------


def _target(
    targets: Targets, claim: ClaimState, choice: InstanceChoice
) -> tuple[MachineDeploymentKey | None, str | None]:
    offered = targets.get(claim.planned.node_class) or {}
    if choice.zone is not None:
        return offered.get((choice.instance_type, choice.zone)), choice.zone
    for (type_name, zone), key in sorted(offered.items(), key=lambda item: (item[0][0], item[0][1] or "")):
        if type_name == choice.instance_type:
            return key, zone
    return None, None


def _launch_failed(claim: ClaimState, choice: InstanceChoice, reason: str) -> AppendClaimEvent:
    retryable = claim.failed_attempts + 1 < len(claim.attempts)
    event = make_event(
        NodeClaimLaunchFailed,
        producer=PRODUCER,
        key=(claim.name, "launch-failed", claim.failed_attempts),
        causation=claim.planned,
        correlation_id=claim.planned.correlation_id or claim.name,
        nodeclaim=claim.name,
        instance_type=choice.instance_type,
        reason=reason,
        retryable=retryable,
    )
    return AppendClaimEvent(claim.name, event, claim.last_sequence)


def _launched(
    claim: ClaimState, choice: InstanceChoice, zone: str | None, machine: MachineView
) -> AppendClaimEvent:
    assert machine.provider_id is not None
    event = make_event(
        NodeClaimLaunched,
        producer=PRODUCER,
        key=(claim.name, "launched"),
        causation=claim.planned,
        correlation_id=claim.planned.correlation_id or claim.name,
        nodeclaim=claim.name,
        provider_id=machine.provider_id,
        instance_type=choice.instance_type,
        zone=zone,
        capacity_type=choice.capacity_type,
        machine=machine.name,
    )
    return AppendClaimEvent(claim.name, event, claim.last_sequence)


def _terminated(claim: ClaimState, drained: NodeClaimDrained) -> AppendClaimEvent:
    machine = claim.launched.machine if claim.launched is not None else None
    event = make_event(
        NodeClaimTerminated,
        producer=PRODUCER,
        key=(claim.name, "terminated"),
        causation=drained,
        correlation_id=claim.planned.correlation_id or claim.name,
        nodeclaim=claim.name,
        reason="drained; its Machine was removed" if machine else "drained; it had no Machine",
        machine=machine,
    )
    return AppendClaimEvent(claim.name, event, claim.last_sequence)


def _newest_first(machines: list[MachineView]) -> list[MachineView]:
    return sorted(machines, key=lambda m: (m.created, m.name), reverse=True)


def decide(state: LauncherState) -> Decision:
    """Everything to do now so that Machines, MD replicas and the claims' stories agree."""
    decision = Decision()
    active = [m for m in state.machines if not m.deleting]
    bound: dict[str, list[MachineView]] = {}
    for machine in active:
        if machine.claim is not None:
            bound.setdefault(machine.claim, []).append(machine)

    # claims waiting for a replica, by the MD their current choice maps to (in the order they were planned)
    waiting: dict[MachineDeploymentKey, list[ClaimState]] = {}
    for claim in sorted(state.claims.values(), key=lambda c: c.first_sequence):
        if not claim.live or claim.launched is not None or claim.planned.node_class not in state.targets:
            continue
        choice = claim.current_choice
        if choice is None:
            continue
        key, zone = _target(state.targets, claim, choice)
        machines = sorted(bound.get(claim.name, []), key=lambda m: (m.provider_id is None, m.name))
        if machines:
            if machines[0].provider_id is not None:
                decision.appends.append(_launched(claim, choice, zone, machines[0]))
            continue
        if key is None or key not in state.deployments:
            where = f"in zone {choice.zone}" if choice.zone else "in any zone"
            decision.appends.append(
                _launch_failed(
                    claim,
                    choice,
                    f"no MachineDeployment of ClusterAPINodeClass {claim.planned.node_class} offers "
                    f"{choice.instance_type} {where}",
                )
            )
            continue
        waiting.setdefault(key, []).append(claim)

    by_md: dict[MachineDeploymentKey, list[MachineView]] = {}
    for machine in state.machines:
        if machine.md is not None:
            by_md.setdefault(machine.md, []).append(machine)

    for key in sorted(state.deployments):
        _decide_deployment(
            state, state.deployments[key], by_md.get(key, []), bound, waiting.get(key, []), decision
        )

    # a drained claim whose Machine is gone (deleted, not just deleting) has ended: say so on its subject
    with_machine = {m.claim for m in state.machines if m.claim is not None}
    for claim in state.claims.values():
        if claim.drained is not None and claim.ended is None and claim.name not in with_machine:
            decision.appends.append(_terminated(claim, claim.drained))
    return decision


def _removal_reason(
    state: LauncherState, machine: MachineView, bound: Mapping[str, list[MachineView]]
) -> str | None:
    assert machine.claim is not None
    claim = state.claims.get(machine.claim)
    if claim is None:
        if state.now - machine.first_seen >= state.leak_grace:
            return f"leaked: bound to NodeClaim {machine.claim}, which the event log does not have"
        return None
    if claim.ended is not None:
        return f"NodeClaim {claim.name}: {claim.ended}"
    if claim.drained is not None:
        return f"NodeClaim {claim.name} was drained"
    if claim.final_failure:
        return f"NodeClaim {claim.name} failed to launch"
    if claim.launched is not None and claim.launched.machine not in (None, machine.name):
        return f"NodeClaim {claim.name} launched on Machine {claim.launched.machine}"
    keep = sorted(bound.get(claim.name, []), key=lambda m: (m.provider_id is None, m.name))
    if keep and keep[0].name != machine.name and claim.launched is None:
        return f"NodeClaim {claim.name} is bound to Machine {keep[0].name} too"
    return None


def _decide_deployment(
    state: LauncherState,
    view: MachineDeploymentView,
    machines: list[MachineView],
    bound: Mapping[str, list[MachineView]],
    waiting: list[ClaimState],
    decision: Decision,
) -> None:
    active = [m for m in machines if not m.deleting]

    # removals: mark first (if not yet), then one replica fewer for each not yet on the scaled-down list
    decrements: list[str] = []
    for machine in active:
        if machine.claim is None:
            continue
        reason = _removal_reason(state, machine, bound)
        if reason is None:
            continue
        if not machine.marked:
            decision.marks.append(MarkMachine(machine.namespace, machine.name, reason))
        if machine.name not in view.scaled_down_for:
            decrements.append(machine.name)

    # the scaled-up list: claims still waiting for their Machine (live or not), in list order
    bound_now = {name for name, ms in bound.items() if ms}
    waiting_names = {c.name for c in waiting}
    listed_live: list[str] = []
    listed_gone: list[str] = []
    for name in view.scaled_up_for:
        if name in bound_now:
            continue
        if name in waiting_names:
            listed_live.append(name)
        else:
            listed_gone.append(name)
    listed_names = set(listed_live)
    owed = [c for c in waiting if c.name not in listed_names]
    # an owed claim takes over the entry of a claim that went away before its Machine came: no new replica
    while owed and listed_gone:
        listed_gone.pop(0)
        listed_live.append(owed.pop(0).name)

    unbound = _newest_first([m for m in active if m.claim is None and not m.marked])
    newly_bound: set[str] = set()

    def bind(claim_name: str, nodepool: str) -> bool:
        if not unbound:
            return False
        machine = unbound.pop(0)
        decision.binds.append(BindMachine(machine.namespace, machine.name, claim_name, nodepool))
        newly_bound.add(claim_name)
        return True

    for name in listed_live:
        claim = state.claims[name]
        bind(name, claim.planned.nodepool)
    # owed claims do not take Machines that were there before: a running node is not a new machine
    still_owed = owed
    for name in listed_gone:
        gone = state.claims.get(name)
        bind(name, gone.planned.nodepool if gone is not None else "")

    replicas = max(0, view.replicas - len(decrements))
    room = None if view.max_size is None else max(0, view.max_size - replicas)
    granted: list[str] = []
    for claim in still_owed:
        choice = claim.current_choice
        assert choice is not None
        if view.paused:
            decision.appends.append(_launch_failed(claim, choice, f"MachineDeployment {view.key} is paused"))
        elif room is not None and len(granted) >= room:
            decision.appends.append(
                _launch_failed(
                    claim,
                    choice,
                    f"MachineDeployment {view.key} is at its max size {view.max_size} "
                    f"(annotation {MAX_SIZE})",
                )
            )
        else:
            granted.append(claim.name)

    existing = {m.name for m in machines}
    scaled_up = tuple(n for n in (*listed_live, *listed_gone) if n not in newly_bound) + tuple(granted)
    scaled_down = tuple(n for n in view.scaled_down_for if n in existing) + tuple(decrements)
    target = replicas + len(granted)
    if target != view.replicas or scaled_up != view.scaled_up_for or scaled_down != view.scaled_down_for:
        decision.scales.append(
            ScaleDeployment(view.key, view.resource_version, view.replicas, target, scaled_up, scaled_down)
        )
