"""What the Cluster API launcher should do now (pure): claims + MachineDeployments + Machines -> decisions.

The launcher is level-triggered: on every input (a claim event, an observation of Cluster API, a catalog, its
own decisions coming back) and on every tick it calls :func:`plan` on the whole current state, and the runtime
carries out and records the decisions it returns (events: ``MachineRemovalDecided``, ``MachineBound``,
``MachineDeploymentScaled``, ``NodeClaimLaunched``, ``NodeClaimLaunchFailed``, ``NodeClaimTerminated``,
``MachineKept``), folding each into the state at once. Deciding twice on the same state therefore decides
nothing new, which is what makes a redelivered ``NodeClaimPlanned`` or a restart harmless. Nothing here reads
a clock or a socket: time enters as the deciding input's ``decidedAt`` (or the tick's moment).

**The durable record lives on the MachineDeployment.** A crash can fall between two writes, so every write
that changes ``spec.replicas`` also records *why* in annotations on the same object, in the same patch
(preconditioned on the spec and annotations decided from, so a concurrent writer makes it fail and the
launcher decides again from what it then observes):

* ``tenon.sh/scaled-up-for``: the claims a replica was added for that have no Machine bound yet. A claim on
  that list is never scaled for again; when its Machine appears it is bound, and the claim leaves the list
  with the MD's next write (at the latest when no listed claim waits any more; until then its entry is
  skipped).
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
which hands a claim a node that may already be full). Live claims come first and take a Machine once it has
its ``spec.providerID`` (the cloud's instance exists), and that claim is Launched in the same plan, right
after the bind, in the same lane. (Binding as soon as the Machine appears was measured slower under load: the
binds of a wave are one slow step on a busy API server, and every claim whose providerID came meanwhile
waited for that step to end before a plan could Launch it.) A claim that went away still takes the Machine its
replica produced at once, which is then removed like any Machine bound to a gone claim.

**Launched**: a live claim with a bound Machine that has ``spec.providerID`` gets ``NodeClaimLaunched``.

**Max size**: an owed claim beyond ``max-size - replicas`` (or on a paused MD, or whose choice no MD offers)
gets ``NodeClaimLaunchFailed``: ``retryable=True`` while the claim has another choice (the scheduler's
fallbacks, in order), ``False`` on the last. The claim's current choice is the one after as many choices as it
has LaunchFailed events, so the aggregate alone says where it stands.

**Removal** happens only on positive evidence (:mod:`.removal`): the delete-machine annotation on exactly that
Machine, then one replica fewer, so Cluster API never picks another Machine. Until Cluster API is deleting
it, the MachineDeployment grows for no claim: a replica given back before then cancels the one taken away
(its MachineSet deletes marked Machines only when it shrinks). A Machine the launcher cannot prove unwanted
is kept, and ``MachineKept`` says why, once.

**Terminated**: the disruption service drains a node and appends ``NodeClaimDrained``; the launcher removes
the claim's Machine and, once no Machine bound to the claim exists any more, appends ``NodeClaimTerminated``
(``services/disruption/termination.py`` counts on this).

Only claims of NodeClasses this launcher published a catalog for are its own; the others are another
launcher's, and only claims known from their ``NodeClaimPlanned`` (a complete story) are launched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from proto import events as ev
from tenon.core.wellknown import MAX_SIZE
from tenon.domain.nodeclaim import NodeClaim
from tenon.runtime.eventlog.factories import make_event
from tenon.services.launcher_capi.observations import PRODUCER, MachineDeploymentView, MachineView
from tenon.services.launcher_capi.removal import Keep, Remove, verdict
from tenon.services.launcher_capi.state import LauncherState

E = TypeVar("E", bound=ev.Event)


@dataclass
class Plan:
    """The decisions of one call, in the order they are carried out: claim events, removals, binds (each
    followed by the Launched of its claim when the Machine has its providerID), scales, and the Machines kept
    (a removal's mark precedes its decrement; a bind precedes the scale that records it, and its claim's
    Launched). The other claim events never rest on that plan's Cluster API actions (a claim is Launched as
    the Machine an earlier plan bound), so they go first, together with the marks and binds."""

    state: LauncherState
    cause: ev.Event | None
    at: datetime
    removals: list[ev.MachineRemovalDecided] = field(default_factory=list)
    binds: list[ev.MachineBound | ev.NodeClaimLaunched] = field(default_factory=list)
    scales: list[ev.MachineDeploymentScaled] = field(default_factory=list)
    claim_events: list[ev.NodeClaimEvent] = field(default_factory=list)
    kept: list[ev.MachineKept] = field(default_factory=list)

    @property
    def decisions(self) -> list[ev.Event]:
        return [*self.claim_events, *self.removals, *self.binds, *self.scales, *self.kept]

    def event(
        self, event_type: type[E], key: tuple[object, ...], correlation: str | None, **fields: Any
    ) -> E:
        return make_event(
            event_type,
            producer=PRODUCER,
            key=key,
            causation=self.cause,
            correlation_id=correlation,
            decided_at=self.at,
            **fields,
        )

    # --- claim events ---------------------------------------------------------------------------------------

    def launch_failed(self, claim: NodeClaim, choice: ev.InstanceChoice, reason: str) -> None:
        failed = len(claim.launch_failures)
        self.claim_events.append(
            self.event(
                ev.NodeClaimLaunchFailed,
                (claim.name, "launch-failed", failed),
                _correlation(claim),
                nodeclaim=claim.name,
                instance_type=choice.instance_type,
                reason=reason,
                retryable=failed + 1 < len(claim.attempts),
            )
        )

    def launched(
        self,
        claim: NodeClaim,
        choice: ev.InstanceChoice,
        zone: str | None,
        machine: MachineView,
        *,
        after_bind: bool = False,
    ) -> None:
        """The claim's Launched; ``after_bind``: right after this plan's bind of its Machine."""
        (self.binds if after_bind else self.claim_events).append(
            self.event(
                ev.NodeClaimLaunched,
                (claim.name, "launched"),
                _correlation(claim),
                nodeclaim=claim.name,
                provider_id=machine.provider_id,
                instance_type=choice.instance_type,
                zone=zone,
                capacity_type=choice.capacity_type,
                machine=machine.name,
            )
        )

    def terminated(self, claim: NodeClaim) -> None:
        machine = claim.launched.machine if claim.launched is not None else None
        self.claim_events.append(
            self.event(
                ev.NodeClaimTerminated,
                (claim.name, "terminated"),
                _correlation(claim),
                nodeclaim=claim.name,
                reason="drained; its Machine was removed" if machine else "drained; it had no Machine",
                machine=machine,
            )
        )

    # --- Cluster API actions --------------------------------------------------------------------------------

    def remove(self, machine: MachineView, removal: Remove) -> None:
        assert machine.claim is not None
        self.removals.append(
            self.event(
                ev.MachineRemovalDecided,
                (machine.ref, machine.uid, machine.claim),
                machine.claim,
                namespace=machine.namespace,
                machine=machine.name,
                machine_deployment=machine.deployment,
                nodeclaim=machine.claim,
                reason=removal.reason,
                evidence=removal.evidence,
            )
        )

    def keep(self, machine: MachineView, keep: Keep) -> None:
        assert machine.claim is not None
        if self.state.was_kept(machine, machine.claim, keep.code):
            return  # said once already
        self.kept.append(
            self.event(
                ev.MachineKept,
                (machine.ref, machine.uid, machine.claim, keep.code),
                machine.claim,
                namespace=machine.namespace,
                machine=machine.name,
                machine_deployment=machine.deployment,
                nodeclaim=machine.claim,
                code=keep.code,
                reason=keep.reason,
            )
        )

    def bind(self, machine: MachineView, claim: str, nodepool: str) -> None:
        self.binds.append(
            self.event(
                ev.MachineBound,
                (machine.ref, machine.uid, claim),
                claim,
                namespace=machine.namespace,
                machine=machine.name,
                machine_deployment=machine.deployment,
                nodeclaim=claim,
                nodepool=nodepool,
            )
        )

    def scale(
        self, view: MachineDeploymentView, to: int, up: tuple[str, ...], down: tuple[str, ...], why: str
    ) -> None:
        self.scales.append(
            self.event(
                ev.MachineDeploymentScaled,
                (view.ref, view.resource_version, view.replicas, to, ",".join(up), ",".join(down)),
                self.cause.correlation_id if self.cause is not None else None,
                namespace=view.namespace,
                machine_deployment=view.name,
                resource_version=view.resource_version,
                replicas_from=view.replicas,
                replicas_to=to,
                scaled_up_for=up,
                scaled_down_for=down,
                reason=why,
            )
        )


def _correlation(claim: NodeClaim) -> str:
    planned = claim.planned
    return (planned.correlation_id if planned is not None else None) or claim.name


# --- the decider --------------------------------------------------------------------------------------------


class Targets:
    """Which MachineDeployment launches a choice, per NodeClass, from the launcher's catalogs (indexed once
    per decision, not once per claim)."""

    def __init__(self, state: LauncherState) -> None:
        self.state = state
        self._index: dict[str, dict[tuple[str, str | None], tuple[str, str | None]]] = {}

    def of(self, node_class: str, choice: ev.InstanceChoice) -> tuple[str | None, str | None]:
        """``namespace/name`` of the MachineDeployment and the zone it launches in (None: no MD offers it)."""
        index = self._index.get(node_class)
        if index is None:
            index = self._index[node_class] = {}
            # any zone: the first offer by (type, zone) of that type, as the catalog lists them
            for offer in sorted(self.state.offers(node_class), key=lambda o: (o.instance_type, o.zone or "")):
                found = (f"{offer.namespace}/{offer.machine_deployment}", offer.zone)
                index.setdefault((offer.instance_type, offer.zone), found)
                index.setdefault((offer.instance_type, None), found)
        return index.get((choice.instance_type, choice.zone), (None, None))


def _launched_as(machines: list[MachineView] | None) -> tuple[bool, MachineView | None]:
    """(whether a bound Machine is still booting, the bound Machine the claim is launched as: the first with a
    providerID); (False, None) when none is bound."""
    if not machines:
        return False, None
    first = min(machines, key=lambda m: (m.provider_id is None, m.name))
    return (False, first) if first.provider_id is not None else (True, None)


def _newest_first(machines: list[MachineView]) -> list[MachineView]:
    return sorted(machines, key=lambda m: (m.created, m.name), reverse=True)


def plan(state: LauncherState, cause: ev.Event | None, at: datetime) -> list[ev.Event]:
    """Everything to do now so that Machines, MD replicas and the claims' stories agree. ``cause`` is the
    input decided on (None on a tick) and ``at`` its moment."""
    decided = Plan(state, cause, at)
    bound: dict[str, list[MachineView]] = {}
    for machine in state.machines.values():
        if machine.claim is not None and not machine.deleting:
            bound.setdefault(machine.claim, []).append(machine)
    targets = Targets(state)
    waiting = _waiting_claims(decided, bound, targets)

    by_md: dict[str, list[MachineView]] = {}
    for machine in state.machines.values():
        if machine.deployment is not None:
            by_md.setdefault(f"{machine.namespace}/{machine.deployment}", []).append(machine)
    for ref in sorted(state.deployments):
        machines = by_md.get(ref, [])
        _decide_deployment(decided, state.deployments[ref], machines, bound, waiting.get(ref, []), targets)

    # a drained claim whose Machine is gone (deleted, not just deleting) has ended: say so in its story
    with_machine = {m.claim for m in state.machines.values() if m.claim is not None}
    for claim in state.claims.values():
        if claim.drained is not None and claim.terminated is None and state.ours(claim):
            if claim.name not in with_machine:
                decided.terminated(claim)
    return decided.decisions


def _waiting_claims(
    decided: Plan, bound: Mapping[str, list[MachineView]], targets: Targets
) -> dict[str, list[NodeClaim]]:
    """Claims waiting for a replica, by the MD their current choice maps to (in the order they were planned);
    Launched for those whose Machine has its providerID, LaunchFailed for those no MD offers."""
    waiting: dict[str, list[NodeClaim]] = {}
    state = decided.state
    for claim in sorted(state.claims.values(), key=lambda c: c.first_sequence):
        # cheapest questions first: most claims are launched (or another launcher's) once a cluster runs,
        # and a claim whose Machine is still booting has nothing to decide
        if claim.launched is not None or not state.ours(claim):
            continue
        booting, machine = _launched_as(bound.get(claim.name))
        if booting or not claim.live:
            continue
        choice = claim.current_choice
        if choice is None:
            continue
        assert claim.planned is not None
        ref, zone = targets.of(claim.planned.node_class, choice)
        if machine is not None:
            decided.launched(claim, choice, zone, machine)
            continue
        if ref is None or ref not in state.deployments:
            where = f"in zone {choice.zone}" if choice.zone else "in any zone"
            decided.launch_failed(
                claim,
                choice,
                f"no MachineDeployment of ClusterAPINodeClass {claim.planned.node_class} offers "
                f"{choice.instance_type} {where}",
            )
            continue
        waiting.setdefault(ref, []).append(claim)
    return waiting


def _removals(
    decided: Plan,
    view: MachineDeploymentView,
    active: list[MachineView],
    bound: Mapping[str, list[MachineView]],
) -> list[str]:
    """Mark the Machines to remove (if not yet) and return those still owed their decrement."""
    decrements: list[str] = []
    for machine in active:
        if machine.claim is None:
            continue
        outcome = verdict(decided.state, machine, bound)
        if isinstance(outcome, Keep):
            decided.keep(machine, outcome)
        removing = isinstance(outcome, Remove)
        if isinstance(outcome, Remove) and not machine.marked:
            decided.remove(machine, outcome)
        ours = removing or machine.ref in decided.state.removals
        if ours and (machine.marked or removing) and machine.name not in view.scaled_down_for:
            decrements.append(machine.name)
    return decrements


def _bind(
    decided: Plan,
    listed_live: list[str],
    listed_gone: list[str],
    unbound: list[MachineView],
    targets: Targets,
) -> set[str]:
    """Bind the listed claims to the unbound Machines (newest first): a live claim to a Machine with its
    providerID, and Launched right after; a claim gone, at once. The claims bound."""
    state = decided.state
    provisioned = [m for m in unbound if m.provider_id]
    newly_bound: set[str] = set()
    for name in listed_live:
        if not provisioned:
            break
        machine = provisioned.pop(0)
        unbound.remove(machine)
        claim = state.claims[name]
        decided.bind(machine, name, claim.nodepool or "")
        newly_bound.add(name)
        choice = claim.current_choice
        if choice is not None and claim.planned is not None:
            _, zone = targets.of(claim.planned.node_class, choice)
            decided.launched(claim, choice, zone, machine, after_bind=True)
    for name in listed_gone:
        if not unbound:
            break
        gone = state.claims.get(name)
        decided.bind(unbound.pop(0), name, (gone.nodepool if gone is not None else None) or "")
        newly_bound.add(name)
    return newly_bound


def _decide_deployment(
    decided: Plan,
    view: MachineDeploymentView,
    machines: list[MachineView],
    bound: Mapping[str, list[MachineView]],
    waiting: list[NodeClaim],
    targets: Targets,
) -> None:
    active = [m for m in machines if not m.deleting]
    decrements = _removals(decided, view, active, bound)

    # the scaled-up list: claims still waiting for their Machine (live or not), in list order
    bound_now = {name for name, ms in bound.items() if ms}
    waiting_names = {c.name for c in waiting}
    listed_live: list[str] = []
    listed_gone: list[str] = []
    for name in view.scaled_up_for:
        if name in bound_now:
            continue
        (listed_live if name in waiting_names else listed_gone).append(name)
    listed_names = set(listed_live)
    owed = [c for c in waiting if c.name not in listed_names]
    # an owed claim takes over the entry of a claim that went away before its Machine came: no new replica
    took_over = bool(owed and listed_gone)
    while owed and listed_gone:
        listed_gone.pop(0)
        listed_live.append(owed.pop(0).name)

    unbound = _newest_first([m for m in active if m.claim is None and not m.marked])
    # owed claims do not take Machines that were there before: a running node is not a new machine
    newly_bound = _bind(decided, listed_live, listed_gone, unbound, targets)

    replicas = max(0, view.replicas - len(decrements))
    existing = {m.name for m in machines}
    scaled_down = tuple(n for n in view.scaled_down_for if n in existing) + tuple(decrements)
    # Cluster API deletes a marked Machine only when its MachineSet shrinks: a replica granted in the write
    # that takes one away (or before Cluster API began deleting the Machine it was taken for) cancels that,
    # and the MachineDeployment keeps its size with neither the marked Machines going nor new ones coming.
    # Owed claims wait for those Machines to be deleting.
    removing = set(scaled_down)
    settling = any(m.name in removing and not m.deleting for m in machines)
    granted = [] if settling else _grant(decided, view, replicas, owed)
    scaled_up = tuple(n for n in (*listed_live, *listed_gone) if n not in newly_bound) + tuple(granted)
    target = replicas + len(granted)
    # entries of claims that got their Machine leave the list with the MD's next write, or once no listed
    # claim waits any more and none of its Machines' claims waits to be Launched: a burst of binds costs one
    # write, not one each (a bound entry is skipped when read), and that write never holds back a plan on the
    # way to a Launched (a MachineDeployment's write is a step of its own, after the binds)
    changed = target != view.replicas or scaled_down != view.scaled_down_for or took_over
    tidy = scaled_up != view.scaled_up_for and not scaled_up
    if changed or (tidy and not newly_bound and not _launching(decided.state, active)):
        decided.scale(view, target, scaled_up, scaled_down, _why(view, granted, decrements, newly_bound))


def _launching(state: LauncherState, machines: list[MachineView]) -> bool:
    """Whether one of these Machines is bound to a live claim not Launched yet."""
    for machine in machines:
        claim = state.claims.get(machine.claim) if machine.claim is not None else None
        if claim is not None and claim.launched is None and claim.live:
            return True
    return False


def _grant(decided: Plan, view: MachineDeploymentView, replicas: int, owed: list[NodeClaim]) -> list[str]:
    """The owed claims this MD grows for; the others fail over to their next choice."""
    room = None if view.max_size is None else max(0, view.max_size - replicas)
    granted: list[str] = []
    for claim in owed:
        choice = claim.current_choice
        assert choice is not None
        if view.paused:
            decided.launch_failed(claim, choice, f"MachineDeployment {view.ref} is paused")
        elif room is not None and len(granted) >= room:
            decided.launch_failed(
                claim,
                choice,
                f"MachineDeployment {view.ref} is at its max size {view.max_size} (annotation {MAX_SIZE})",
            )
        else:
            granted.append(claim.name)
    return granted


def _why(
    view: MachineDeploymentView, granted: list[str], decrements: list[str], newly_bound: set[str]
) -> str:
    parts = []
    if granted:
        parts.append(f"a replica for NodeClaim {', '.join(granted)}")
    if decrements:
        parts.append(f"one replica fewer for Machine {', '.join(decrements)} (marked delete-machine)")
    if newly_bound:
        parts.append(f"NodeClaim {', '.join(sorted(newly_bound))} got its Machine")
    return "; ".join(parts) or f"records of MachineDeployment {view.ref} brought up to date"
