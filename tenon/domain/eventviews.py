"""How each event type reads to a person: the one table ``tenon tap``, ``tenon replay`` and ``tenon explain``
print from.

:mod:`proto.registry` says, per event type, where it is published and who writes and reads it; this table,
keyed the same way, says what it means to someone reading the log:

* ``summary``: the event in one line (``claim c1 launched: c3-8 as openstack:///m-1``): ``tenon tap`` and
  ``tenon replay`` print it;
* ``nodeclaims``: the NodeClaims it concerns (its own claim, the claims a batch answer planned or placed pods
  on, a disruption decision's candidates, blocked claims and replacements, the claim a Cluster API Machine is
  bound to or a MachineDeployment was scaled up for): ``tenon tap --nodeclaim`` filters on it;
* ``pods``: the pods it concerns, as ``namespace/name``: ``tenon explain --pod`` follows a pod with it;
* ``claim_step``: for a step of a claim's life, its name (``Launched``) and the line ``tenon explain`` prints
  for it under "Where it is in its life", which may look at the claim's plan (a launch as a fallback type).

Every type of :data:`proto.events.EVENT_TYPES` has an entry (``tests/explain/test_event_views.py`` checks it,
so a new event type cannot be forgotten); :func:`view_of` names this file when one is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proto import events as ev
from tenon.core import wellknown
from tenon.domain.projection import object_key
from tenon.domain.wording import name_of, price

Names = Callable[[Any], tuple[str, ...]]
LifeLine = Callable[[Any, ev.NodeClaimPlanned | None], str]


def _none(event: ev.Event) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class ClaimStep:
    """A step of a NodeClaim's life as ``tenon explain`` lists it."""

    name: str
    """``Planned``, ``Launched``, ``LaunchFailed``, ... (the event type without ``NodeClaim``)."""
    line: LifeLine
    """What the step says, given the claim's plan (``None`` when the plan is not in the log)."""


@dataclass(frozen=True)
class EventView:
    type: type[ev.Event]
    summary: Callable[[Any], str]
    nodeclaims: Names = _none
    pods: Names = _none
    claim_step: ClaimStep | None = None


# --- observations of the cluster ----------------------------------------------------------------------------


def _node_observed(e: ev.NodeObserved) -> str:
    return f"node {name_of(e.node)} {e.change}"


def _bound_pod(e: ev.BoundPodObserved) -> str:
    return f"pod {object_key(e.pod)} on {(e.pod.get('spec') or {}).get('nodeName')} {e.change}"


def _names(objects: tuple[ev.KubeObject, ...]) -> str:
    return ", ".join(name_of(o) for o in objects)


def _daemonsets(e: ev.DaemonSetsSnapshot) -> str:
    return "daemonsets: " + (", ".join(object_key(d) for d in e.daemonsets) or "none")


def _pdbs(e: ev.PodDisruptionBudgetsSnapshot) -> str:
    return "poddisruptionbudgets: " + (", ".join(object_key(p) for p in e.pdbs) or "none")


def _catalog(e: ev.CatalogSnapshot) -> str:
    skipped = f", {len(e.skipped)} skipped" if e.skipped else ""
    return f"catalog {e.node_class} ({e.provider}): {len(e.instance_types)} type(s){skipped}"


def _pending(e: ev.PendingBatch) -> str:
    return f"batch {e.batch_id}: {len(e.pods)} pending pod(s), closed by {e.window_closed_by}"


# --- the scheduler's answer ---------------------------------------------------------------------------------


def _batch_planned(e: ev.BatchPlanned) -> str:
    parts = [f"{len(e.nodeclaims)} new claim(s)"]
    if e.existing:
        parts.append(f"{len(e.existing)} pod(s) on existing room")
    if e.unschedulable:
        parts.append(f"{len(e.unschedulable)} unschedulable")
    return f"batch {e.batch_id}: {', '.join(parts)}, {price(e.total_price_per_hour)}"


def _batch_claims(e: ev.BatchPlanned) -> tuple[str, ...]:
    in_flight = tuple(p.node for p in e.existing if p.kind == "NodeClaim")
    return tuple(dict.fromkeys(e.nodeclaims + in_flight))


def _batch_pods(e: ev.BatchPlanned) -> tuple[str, ...]:
    """The pods the answer itself places or gives up on (a new claim's pods are on its NodeClaimPlanned)."""
    return tuple(p.pod for p in e.existing) + tuple(u.pod for u in e.unschedulable)


# --- the NodeClaim lifecycle --------------------------------------------------------------------------------


def _claim(e: ev.NodeClaimEvent) -> tuple[str, ...]:
    return (e.nodeclaim,)


def _planned(e: ev.NodeClaimPlanned) -> str:
    c = e.choice
    return (
        f"claim {e.nodeclaim} planned: {c.instance_type} {c.capacity_type} {c.zone or 'any zone'} "
        f"{price(c.price_per_hour)} for {len(e.pods)} pod(s) [nodepool {e.nodepool}]"
    )


def _planned_step(e: ev.NodeClaimPlanned, plan: ev.NodeClaimPlanned | None) -> str:
    c = e.choice
    return f"{c.instance_type} at {price(c.price_per_hour)} for {len(e.pods)} pod(s) (by {e.producer})"


def _launched_step(e: ev.NodeClaimLaunched, plan: ev.NodeClaimPlanned | None) -> str:
    text = f"as {e.provider_id}" + (f" (machine {e.machine})" if e.machine else "")
    if plan is not None and e.instance_type != plan.choice.instance_type:
        return f"{text}; launched as fallback {e.instance_type} instead of {plan.choice.instance_type}"
    return f"{e.instance_type} {text}"


def _launch_failed_step(e: ev.NodeClaimLaunchFailed, plan: ev.NodeClaimPlanned | None) -> str:
    then = "a fallback may follow" if e.retryable else "no retry"
    return f"{e.instance_type} could not be launched: {e.reason} ({then})"


def _abandoned_step(e: ev.NodeClaimAbandoned, plan: ev.NodeClaimPlanned | None) -> str:
    pods = f"; its pods go back to the scheduler: {', '.join(e.pods)}" if e.pods else ""
    return f"{e.reason}{pods}"


def _disruption_step(e: ev.DisruptionRequested, plan: ev.NodeClaimPlanned | None) -> str:
    node = f" node {e.node}" if e.node else ""
    return f"{e.method}:{node} {e.reason}"


def _drained_step(e: ev.NodeClaimDrained, plan: ev.NodeClaimPlanned | None) -> str:
    evicted = ", ".join(e.evicted) if e.evicted else "none"
    expired = "; the termination grace period ran out" if e.grace_period_expired else ""
    return f"{len(e.evicted)} pod(s) evicted: {evicted}{expired}"


def _terminated_step(e: ev.NodeClaimTerminated, plan: ev.NodeClaimPlanned | None) -> str:
    return e.reason + (f" (machine {e.machine} removed)" if e.machine else "")


def _claim_step(
    event_type: type[ev.NodeClaimEvent], summary: Callable[[Any], str], line: LifeLine, pods: Names = _none
) -> EventView:
    step = ClaimStep(event_type.__name__.removeprefix("NodeClaim"), line)
    return EventView(event_type, summary, nodeclaims=_claim, pods=pods, claim_step=step)


# --- disruption, interruption, faults -----------------------------------------------------------------------


def _decision(e: ev.DisruptionDecision) -> str:
    names = ", ".join(c.nodeclaim for c in e.candidates) or "none"
    stage = "" if e.stage == "confirmed" else f" {e.stage}"
    return f"{e.method}{stage}: {names} ({e.reason}; budget {e.budget})"


def _replacements(e: ev.ReplacementsRequested) -> str:
    new = ", ".join(f"{r.nodeclaim} ({r.choice.instance_type})" for r in e.replacements)
    return f"replacements for {', '.join(e.candidates)}: {new} ({e.reason})"


def _decision_claims(e: ev.DisruptionDecision) -> tuple[str, ...]:
    named = [c.nodeclaim for c in e.candidates] + [b.nodeclaim for b in e.blocked] + list(e.replacements)
    return tuple(dict.fromkeys(named))


# --- Cluster API, as the Cluster API launcher sees it and acts on it ----------------------------------------


def _machine_deployment_observed(e: ev.MachineDeploymentObserved) -> str:
    replicas = (e.machine_deployment.get("spec") or {}).get("replicas")
    return f"machinedeployment {object_key(e.machine_deployment)} {e.change}: {replicas} replica(s)"


def _machine_claim(machine: ev.KubeObject) -> tuple[str, ...]:
    """The claim a Machine is bound to (tenon's ownership mark on it), if any."""
    claim = ((machine.get("metadata") or {}).get("annotations") or {}).get(wellknown.NODECLAIM)
    return (str(claim),) if claim else ()


def _machine_observed(e: ev.MachineObserved) -> str:
    bound = "".join(f" (claim {claim})" for claim in _machine_claim(e.machine))
    return f"machine {object_key(e.machine)} {e.change}{bound}"


def _scaled(e: ev.MachineDeploymentScaled) -> str:
    replicas = f"{e.replicas_from} -> {e.replicas_to}"
    return f"machinedeployment {e.namespace}/{e.machine_deployment} scaled {replicas}: {e.reason}"


def _leak_checked(e: ev.MachineLeakChecked) -> str:
    log = "reaches back past it" if e.log_reaches_back else "does not reach back past it"
    return (
        f"machine {e.namespace}/{e.machine} bound to unknown claim {e.nodeclaim}: "
        f"NodeClaim object {e.nodeclaim_object}, the log {log}"
    )


def _machine_named(e: ev.MachineBound | ev.MachineRemovalDecided | ev.MachineKept) -> tuple[str, ...]:
    return (e.nodeclaim,)


# --- EC2, as the EC2 launcher and the interruption handler see it and act on it -----------------------------


def _fleet_requested(e: ev.Ec2FleetRequested) -> str:
    types = sorted({o.instance_type for o in e.overrides})
    overrides = f"{len(e.overrides)} override(s): {', '.join(types)}"
    return f"claim {e.nodeclaim} fleet requested ({e.capacity_type}, {overrides})"


def _fleet_answered(e: ev.Ec2FleetAnswered) -> str:
    if e.instance_id:
        found = " (found by tag)" if e.found_by_tag else ""
        return f"claim {e.nodeclaim} fleet answered: {e.instance_id} {e.instance_type} {e.zone}{found}"
    refused = (
        ", ".join(f"{x.instance_type}/{x.zone}: {x.code}" for x in e.errors) or e.error_code or "no instance"
    )
    return f"claim {e.nodeclaim} fleet refused: {refused}"


def _instance_observed(e: ev.Ec2InstanceObserved) -> str:
    instance = e.instance
    what = f"{instance.get('state')} {instance.get('instanceType')}"
    return f"instance {instance.get('instanceId')} {e.change}: {what}"


def _ec2_leak_checked(e: ev.Ec2InstanceLeakChecked) -> str:
    log = "reaches back past it" if e.log_reaches_back else "does not reach back past it"
    return (
        f"instance {e.instance_id} tagged for unknown claim {e.nodeclaim}: "
        f"NodeClaim object {e.nodeclaim_object}, the log {log}"
    )


def _dead_letter(e: ev.DeadLetter) -> str:
    where = f"#{e.original_sequence} {e.original_subject}"
    return f"dead letter from {e.consumer} ({where}): {e.error}"


VIEWS: tuple[EventView, ...] = (
    EventView(ev.NodeObserved, _node_observed),
    EventView(ev.BoundPodObserved, _bound_pod, pods=lambda e: (object_key(e.pod),)),
    EventView(ev.NodePoolsSnapshot, lambda e: f"nodepools: {_names(e.nodepools)}"),
    EventView(ev.NodeClassesSnapshot, lambda e: f"nodeclasses: {_names(e.nodeclasses)}"),
    EventView(ev.DaemonSetsSnapshot, _daemonsets),
    EventView(ev.PodDisruptionBudgetsSnapshot, _pdbs),
    EventView(ev.CatalogSnapshot, _catalog),
    EventView(ev.PendingBatch, _pending, pods=lambda e: tuple(object_key(p) for p in e.pods)),
    EventView(ev.BatchPlanned, _batch_planned, nodeclaims=_batch_claims, pods=_batch_pods),
    _claim_step(ev.NodeClaimPlanned, _planned, _planned_step, pods=lambda e: e.pods),
    _claim_step(
        ev.NodeClaimLaunched,
        lambda e: f"claim {e.nodeclaim} launched: {e.instance_type} as {e.provider_id}",
        _launched_step,
    ),
    _claim_step(
        ev.NodeClaimLaunchFailed,
        lambda e: f"claim {e.nodeclaim} launch of {e.instance_type} failed: {e.reason}",
        _launch_failed_step,
    ),
    _claim_step(
        ev.NodeClaimRegistered,
        lambda e: f"claim {e.nodeclaim} registered as node {e.node}",
        lambda e, plan: f"node {e.node} joined ({e.provider_id})",
    ),
    _claim_step(
        ev.NodeClaimInitialized,
        lambda e: f"claim {e.nodeclaim} initialized (node {e.node} ready)",
        lambda e, plan: f"node {e.node} is Ready, startup taints gone: pods may land",
    ),
    _claim_step(
        ev.NodeClaimAbandoned,
        lambda e: f"claim {e.nodeclaim} abandoned: {e.reason}",
        _abandoned_step,
        pods=lambda e: e.pods,
    ),
    _claim_step(
        ev.DisruptionRequested,
        lambda e: f"claim {e.nodeclaim} disruption requested ({e.method}): {e.reason}",
        _disruption_step,
    ),
    _claim_step(
        ev.NodeClaimDrained,
        lambda e: f"claim {e.nodeclaim} drained: {len(e.evicted)} pod(s) evicted",
        _drained_step,
        pods=lambda e: e.evicted,
    ),
    _claim_step(
        ev.NodeClaimTerminated, lambda e: f"claim {e.nodeclaim} terminated: {e.reason}", _terminated_step
    ),
    EventView(ev.InterruptionNotice, lambda e: f"{e.kind} for {e.provider_id}"),
    EventView(ev.DisruptionDecision, _decision, nodeclaims=_decision_claims),
    EventView(
        ev.ReplacementsRequested,
        _replacements,
        nodeclaims=lambda e: (*e.candidates, *(r.nodeclaim for r in e.replacements)),
    ),
    EventView(ev.MachineDeploymentObserved, _machine_deployment_observed),
    EventView(ev.MachineObserved, _machine_observed, nodeclaims=lambda e: _machine_claim(e.machine)),
    EventView(ev.MachineDeploymentScaled, _scaled, nodeclaims=lambda e: e.scaled_up_for),
    EventView(ev.MachineLeakChecked, _leak_checked, nodeclaims=lambda e: (e.nodeclaim,)),
    EventView(
        ev.MachineBound,
        lambda e: f"machine {e.namespace}/{e.machine} bound to claim {e.nodeclaim} [nodepool {e.nodepool}]",
        nodeclaims=_machine_named,
    ),
    EventView(
        ev.MachineRemovalDecided,
        lambda e: f"machine {e.namespace}/{e.machine} to be removed (claim {e.nodeclaim}): {e.reason}",
        nodeclaims=_machine_named,
    ),
    EventView(
        ev.MachineKept,
        lambda e: f"machine {e.namespace}/{e.machine} kept (claim {e.nodeclaim}, {e.code}): {e.reason}",
        nodeclaims=_machine_named,
    ),
    EventView(ev.Ec2FleetRequested, _fleet_requested, nodeclaims=lambda e: (e.nodeclaim,)),
    EventView(ev.Ec2FleetAnswered, _fleet_answered, nodeclaims=lambda e: (e.nodeclaim,)),
    EventView(ev.Ec2InstanceObserved, _instance_observed),
    EventView(ev.Ec2InstanceLeakChecked, _ec2_leak_checked, nodeclaims=lambda e: (e.nodeclaim,)),
    EventView(
        ev.Ec2InstanceTerminationDecided,
        lambda e: f"instance {e.instance_id} to be terminated (claim {e.nodeclaim}): {e.reason}",
        nodeclaims=lambda e: (e.nodeclaim,),
    ),
    EventView(
        ev.Ec2InstanceKept,
        lambda e: f"instance {e.instance_id} kept (claim {e.nodeclaim}, {e.code}): {e.reason}",
        nodeclaims=lambda e: (e.nodeclaim,),
    ),
    EventView(
        ev.InterruptionMessageReceived,
        lambda e: f"message {e.message_id} from queue {e.queue} (received {e.receive_count} time(s))",
    ),
    EventView(ev.DeadLetter, _dead_letter),
)

BY_TYPE: dict[type[ev.Event], EventView] = {view.type: view for view in VIEWS}


def view_of(event_type: type[ev.Event]) -> EventView:
    try:
        return BY_TYPE[event_type]
    except KeyError:
        raise KeyError(
            f"{event_type.__name__} is missing from tenon/domain/eventviews.py: give it a summary there"
        ) from None


def summary(event: ev.Event) -> str:
    """What the event says, in one line."""
    return view_of(type(event)).summary(event)


def nodeclaims_of(event: ev.Event) -> tuple[str, ...]:
    """The NodeClaims ``event`` concerns."""
    return view_of(type(event)).nodeclaims(event)


def pods_of(event: ev.Event) -> tuple[str, ...]:
    """The pods ``event`` concerns, as ``namespace/name``."""
    return view_of(type(event)).pods(event)


def concerns_nodeclaim(event: ev.Event, name: str) -> bool:
    """Whether ``event`` is about the NodeClaim ``name``: it names the claim, or carries it as correlation."""
    return event.correlation_id == name or name in nodeclaims_of(event)


def claim_step(event: ev.NodeClaimEvent, plan: ev.NodeClaimPlanned | None) -> tuple[str, str]:
    """(step name, what it says) for a step of a claim's life, knowing the claim's ``plan`` if any."""
    step = view_of(type(event)).claim_step
    if step is None:
        raise KeyError(f"{type(event).__name__} has no claim step in tenon/domain/eventviews.py")
    return step.name, step.line(event, plan)
