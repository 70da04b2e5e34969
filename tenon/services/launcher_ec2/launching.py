"""What launcher-ec2 should do now (pure): claims + fleets + instances -> decisions.

Level-triggered like the Cluster API launcher: on every input and every tick :func:`plan` looks at the whole
state, and deciding twice on the same state decides nothing new (ids derive from the claim and its attempt).
Time enters only as the deciding input's ``decidedAt`` (or the tick's moment).

**Launch.** A live claim of an EC2NodeClass this launcher published a catalog for, not launched, with no
fleet request for its current attempt, gets ``Ec2FleetRequested``: one CreateFleet (type ``instant``, one
instance) whose overrides are the claim's choices from its current one on, as long as they share its capacity
type and architecture (at most :data:`MAX_OVERRIDES`), each in its zone (or, for a choice of any zone, in
every zone of the NodeClass's subnets where the catalog offers it), minus the offerings marked unavailable;
``price-capacity-optimized`` for spot, ``lowest-price`` for on-demand; tags ``karpenter.sh/nodepool``,
``karpenter.sh/nodeclaim``, ``karpenter.k8s.aws/ec2nodeclass``, ``kubernetes.io/cluster/<name>`` and the
NodeClass's ``spec.tags``. The client token derives from the claim and the attempt. The executor looks for an
instance already tagged with the claim before it calls CreateFleet, so a crash mid-call never yields two.

**The answer.** An instance: ``NodeClaimLaunchFailed`` for each choice before the one EC2 launched (they were
refused: insufficient capacity), then ``NodeClaimLaunched`` (providerID ``aws:///<zone>/<id>``). No instance:
``NodeClaimLaunchFailed`` for every choice the fleet held (``retryable`` while the claim has choices left);
the refused offerings were marked unavailable when the answer was folded, so the scheduler sees them too (the
catalog is published again) and the claim's next attempt leaves them out. A choice with no override left
(every offering of it marked unavailable, or no subnet or image for it) fails at once with the reason.

**Removal and termination**: :mod:`.removal`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from proto import events as ev
from proto.ids import derive_id
from tenon.domain.nodeclaim import NodeClaim
from tenon.runtime.eventlog.factories import make_event
from tenon.services.launcher_ec2 import names
from tenon.services.launcher_ec2.observations import PRODUCER, provider_id
from tenon.services.launcher_ec2.state import CatalogRecord, Ec2State

MAX_OVERRIDES = 60
"""Karpenter's ``maxInstanceTypes``: the overrides of one fleet (types x zones here)."""
STRATEGIES = {"spot": "price-capacity-optimized", "on-demand": "lowest-price"}

E = TypeVar("E", bound=ev.Event)


@dataclass
class Plan:
    """The decisions of one call, in the order they are carried out."""

    state: Ec2State
    cause: ev.Event | None
    at: datetime
    cluster: str
    terminations: list[ev.Ec2InstanceTerminationDecided] = field(default_factory=list)
    requests: list[ev.Ec2FleetRequested] = field(default_factory=list)
    claim_events: list[ev.NodeClaimEvent] = field(default_factory=list)
    kept: list[ev.Ec2InstanceKept] = field(default_factory=list)

    @property
    def decisions(self) -> list[ev.Event]:
        return [*self.terminations, *self.requests, *self.claim_events, *self.kept]

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

    def launch_failed(self, claim: NodeClaim, index: int, reason: str) -> None:
        """``NodeClaimLaunchFailed`` for the claim's choice ``index`` (its next failure)."""
        failed = len(claim.launch_failures) + sum(
            1
            for e in self.claim_events
            if isinstance(e, ev.NodeClaimLaunchFailed) and e.nodeclaim == claim.name
        )
        choice = claim.attempts[index]
        self.claim_events.append(
            self.event(
                ev.NodeClaimLaunchFailed,
                (claim.name, "launch-failed", failed),
                correlation(claim),
                nodeclaim=claim.name,
                instance_type=choice.instance_type,
                reason=reason,
                retryable=failed + 1 < len(claim.attempts),
            )
        )

    def launched(self, claim: NodeClaim, answer: ev.Ec2FleetAnswered) -> None:
        assert answer.instance_id is not None
        self.claim_events.append(
            self.event(
                ev.NodeClaimLaunched,
                (claim.name, "launched"),
                correlation(claim),
                nodeclaim=claim.name,
                provider_id=provider_id(answer.zone, answer.instance_id),
                instance_type=answer.instance_type or "",
                zone=answer.zone,
                capacity_type=answer.capacity_type,
                machine=answer.instance_id,
            )
        )

    def terminated(self, claim: NodeClaim, instances: Sequence[str]) -> None:
        self.claim_events.append(
            self.event(
                ev.NodeClaimTerminated,
                (claim.name, "terminated"),
                correlation(claim),
                nodeclaim=claim.name,
                reason=(
                    f"drained; instance {', '.join(instances)} terminated"
                    if instances
                    else "drained; it had no instance"
                ),
                machine=instances[0] if instances else None,
            )
        )


def correlation(claim: NodeClaim) -> str:
    planned = claim.planned
    return (planned.correlation_id if planned is not None else None) or claim.name


def client_token(claim: str, attempt: int) -> str:
    """At most 64 characters, the same for the same claim and attempt (CreateFleet's idempotency)."""
    return f"tenon-{derive_id('launcher-ec2', 'ClientToken', claim, attempt)}"[:64]


# --- launching ------------------------------------------------------------------------------------------


@dataclass
class _Group:
    capacity_type: str
    arch: str
    overrides: list[ev.Ec2Override] = field(default_factory=list)
    last_choice: int = 0


def _overrides_of(
    state: Ec2State, record: CatalogRecord, choice: ev.InstanceChoice, index: int, at: datetime
) -> tuple[list[ev.Ec2Override], str]:
    """The overrides one choice contributes, or none and why."""
    offer = record.types.get(choice.instance_type)
    if offer is None:
        return [], f"instance type {choice.instance_type} is not in the EC2NodeClass's catalog"
    image = record.image_of_arch.get(offer.arch)
    if image is None:
        return [], f"no AMI of the EC2NodeClass runs {offer.arch}"
    out, marked = [], []
    for capacity, zone, price in offer.offerings:
        if capacity != choice.capacity_type or (choice.zone and zone != choice.zone):
            continue
        subnet = record.subnet_of_zone.get(zone)
        if subnet is None:
            continue
        until = state.unavailable_until(capacity, choice.instance_type, zone, at)
        if until is not None:
            marked.append(f"{zone} until {until.strftime('%H:%M:%SZ')}")
            continue
        out.append(ev.Ec2Override(choice.instance_type, zone, subnet, image, price, index))
    if out:
        return out, ""
    where = f"zone {choice.zone}" if choice.zone else "any zone of the NodeClass's subnets"
    if marked:
        return [], (
            f"{choice.capacity_type} {choice.instance_type} is marked unavailable (insufficient capacity) in "
            f"{', '.join(marked)}"
        )
    return [], f"no {choice.capacity_type} offering of {choice.instance_type} in {where}"


def _group(
    state: Ec2State, record: CatalogRecord, claim: NodeClaim, at: datetime, decided: Plan
) -> _Group | None:
    """The overrides of the claim's next fleet; fails a first choice that has none (the next plan goes on)."""
    start = len(claim.launch_failures)
    attempts = claim.attempts
    first = attempts[start]
    offer = record.types.get(first.instance_type)
    overrides, why = _overrides_of(state, record, first, start, at)
    if not overrides or offer is None:
        decided.launch_failed(claim, start, why)
        return None
    group = _Group(first.capacity_type, offer.arch, overrides, start)
    for index in range(start + 1, len(attempts)):
        choice = attempts[index]
        other = record.types.get(choice.instance_type)
        if choice.capacity_type != group.capacity_type or other is None or other.arch != group.arch:
            break
        more, _ = _overrides_of(state, record, choice, index, at)
        if not more or len(group.overrides) + len(more) > MAX_OVERRIDES:
            break
        group.overrides += more
        group.last_choice = index
    return group


def _request(decided: Plan, claim: NodeClaim, record: CatalogRecord) -> None:
    assert claim.planned is not None
    group = _group(decided.state, record, claim, decided.at, decided)
    if group is None:
        return
    template = record.launch_template_of_arch.get(group.arch)
    if template is None:
        decided.launch_failed(claim, group.last_choice, f"no launch template for {group.arch} in the catalog")
        return
    attempt = len(claim.launch_failures)
    nodeclass = decided.state.nodeclasses.get(claim.planned.node_class) or {}
    extra = (nodeclass.get("spec") or {}).get("tags") or {}
    tags = {
        **{str(k): str(v) for k, v in extra.items() if isinstance(k, str)},
        names.TAG_NODEPOOL: claim.planned.nodepool,
        names.TAG_NODECLAIM: claim.name,
        names.TAG_NODECLASS: claim.planned.node_class,
        f"{names.TAG_CLUSTER_PREFIX}{decided.cluster}": "owned",
        names.TAG_EKS_CLUSTER: decided.cluster,
        names.TAG_NAME: claim.name,
    }
    decided.requests.append(
        decided.event(
            ev.Ec2FleetRequested,
            (claim.name, attempt),
            correlation(claim),
            nodeclaim=claim.name,
            node_class=claim.planned.node_class,
            nodepool=claim.planned.nodepool,
            capacity_type=group.capacity_type,
            allocation_strategy=STRATEGIES.get(group.capacity_type, "lowest-price"),
            overrides=tuple(group.overrides),
            launch_template=template,
            client_token=client_token(claim.name, attempt),
            attempt=attempt,
            tags=tags,
        )
    )


def _refusals(answer: ev.Ec2FleetAnswered, instance_type: str) -> str:
    found = [e for e in answer.errors if e.instance_type == instance_type]
    if not found:
        return f"EC2 launched another instance type of the fleet first ({answer.instance_type})"
    return "; ".join(f"{e.code} in {e.zone or 'every zone'}" for e in found)


def _answered(
    decided: Plan, claim: NodeClaim, request: ev.Ec2FleetRequested, answer: ev.Ec2FleetAnswered
) -> None:
    choices = sorted({o.choice for o in request.overrides})
    if answer.instance_id:
        launched_choice = next(
            (
                o.choice
                for o in request.overrides
                if o.instance_type == answer.instance_type and o.zone == answer.zone
            ),
            None,
        )
        for index in choices:
            if launched_choice is None or index >= launched_choice:
                break
            choice = claim.attempts[index]
            decided.launch_failed(
                claim,
                index,
                f"CreateFleet refused {choice.instance_type}: {_refusals(answer, choice.instance_type)}",
            )
        decided.launched(claim, answer)
        return
    for index in choices:
        choice = claim.attempts[index]
        if answer.error_code:
            reason = f"CreateFleet failed: {answer.error_code}: {answer.error_message}"
        else:
            reason = f"CreateFleet refused {choice.instance_type}: {_refusals(answer, choice.instance_type)}"
        decided.launch_failed(claim, index, reason)


def _decide_claim(decided: Plan, claim: NodeClaim) -> None:
    state = decided.state
    assert claim.planned is not None
    record = state.catalogs[claim.planned.node_class]
    attempt = len(claim.launch_failures)
    request = state.requests.get(claim.name)
    if request is not None and request.attempt == attempt:
        answer = state.answer_to(request)
        if answer is not None:
            _answered(decided, claim, request, answer)
        return  # asked; the executor answers
    if claim.current_choice is not None:
        _request(decided, claim, record)


def plan(state: Ec2State, cause: ev.Event | None, at: datetime, cluster: str) -> list[ev.Event]:
    """Everything to do now so that instances and the claims' stories agree."""
    from tenon.services.launcher_ec2.removal import decide_removals

    decided = Plan(state, cause, at, cluster)
    for claim in sorted(state.claims.values(), key=lambda c: c.first_sequence):
        if claim.launched is not None or not claim.live or not state.ours(claim):
            continue
        _decide_claim(decided, claim)
    decide_removals(decided)
    return decided.decisions
