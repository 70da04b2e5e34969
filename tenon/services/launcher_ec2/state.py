"""What launcher-ec2 knows, as a fold of its inputs (pure): the state its decider decides on.

Every field comes from an event in the log, so the live service and ``tenon replay launcher-ec2`` build the
same state from the same records:

* ``claims``: every NodeClaim's aggregate (a step written by a service that does not own it is refused);
* ``nodeclasses``: the EC2NodeClasses of the latest ``NodeClassesSnapshot``;
* ``catalogs``: per NodeClass, the launcher's own latest ``CatalogSnapshot``, read back into what a launch
  needs: each type's architecture and offerings, the subnet of each zone, the image and launch template of
  each architecture;
* ``requests`` / ``answers``: the latest ``Ec2FleetRequested`` of each claim and EC2's answer to it;
* ``instances``: the instances tagged for the cluster, as observed (and as the answers and the launcher's own
  terminations changed them, before the next poll shows it);
* ``unavailable``: offerings EC2 refused for lack of capacity, and spot offerings of interrupted instances,
  each until a moment (3 minutes after, as Karpenter's unavailable-offerings cache; a new mark extends it);
* ``terminations``, ``kept``, ``checks``: the launcher's termination decisions, its ``Ec2InstanceKept``
  decisions (each once per instance and reason) and the latest leak check of each instance.

An observation of an instance stored before the launcher's last action on it (a lower log sequence) is set
aside, so a poll answered before a TerminateInstances does not undo it (as in the Cluster API launcher).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from proto import events as ev
from tenon.core.wellknown import ARCH
from tenon.domain.nodeclaim import ClaimBook, NodeClaim
from tenon.services.launcher_ec2 import names
from tenon.services.launcher_ec2.catalog import snapshot_content_hash
from tenon.services.launcher_ec2.nodeclass import served_node_classes
from tenon.services.launcher_ec2.observations import (
    PRODUCER,
    InstanceView,
    instance_of_provider_id,
    instance_view,
)

UNAVAILABLE_FOR = timedelta(minutes=3)
"""How long an offering EC2 refused (or a spot offering just interrupted) is not offered (Karpenter's
``UnavailableOfferingsTTL``)."""

CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "MaxFleetCountExceeded",
        "ReservationCapacityExceeded",
    }
)
"""Fleet error codes that say "not this offering, now" (Karpenter's ``unfulfillableCapacityErrorCodes``): the
offering is marked unavailable and the claim goes to its next choice."""


class TypeOffer(msgspec.Struct, frozen=True):
    arch: str
    offerings: tuple[tuple[str, str, float], ...]
    """(capacity type, zone, price) of each offering the catalog published."""


class CatalogRecord(msgspec.Struct, frozen=True):
    event_id: str
    content_hash: str
    published_at: datetime
    types: dict[str, TypeOffer] = {}
    subnet_of_zone: dict[str, str] = {}
    image_of_arch: dict[str, str] = {}
    launch_template_of_arch: dict[str, str] = {}


def mark_key(capacity_type: str, instance_type: str, zone: str) -> str:
    return f"{capacity_type}|{instance_type}|{zone}"


def catalog_record(event: ev.CatalogSnapshot) -> CatalogRecord:
    """What a published catalog says a launch needs (see :func:`.catalog.resolution_source`)."""
    types = {}
    for entry in event.instance_types:
        arch = str((entry.get("labels") or {}).get(ARCH) or "amd64")
        offerings = tuple(
            (str(o.get("capacityType")), str(o.get("zone")), float(o.get("price") or 0.0))
            for o in entry.get("offerings") or []
            if isinstance(o, Mapping)
        )
        types[str(entry.get("name"))] = TypeOffer(arch, offerings)
    source: Mapping[str, Any] = next(
        (s for s in event.sources if s.get("kind") == "EC2NodeClassResolution"), {}
    )
    templates = source.get("launchTemplates") or {}
    return CatalogRecord(
        event.id,
        snapshot_content_hash(event),
        event.decided_at,
        types,
        dict(source.get("subnetOfZone") or {}),
        dict(source.get("imageOfArchitecture") or {}),
        {str(arch): str(t.get("name")) for arch, t in templates.items() if isinstance(t, Mapping)},
    )


@dataclass
class Ec2State:
    claims: ClaimBook = field(default_factory=ClaimBook)
    nodeclasses: dict[str, ev.KubeObject] = field(default_factory=dict)
    catalogs: dict[str, CatalogRecord] = field(default_factory=dict)
    requests: dict[str, ev.Ec2FleetRequested] = field(default_factory=dict)
    answers: dict[str, ev.Ec2FleetAnswered] = field(default_factory=dict)
    instances: dict[str, InstanceView] = field(default_factory=dict)
    unavailable: dict[str, datetime] = field(default_factory=dict)
    """``capacity|type|zone`` -> until when the offering is not offered."""
    terminations: dict[str, str] = field(default_factory=dict)
    """Instance -> the claim a recorded ``Ec2InstanceTerminationDecided`` named."""
    kept: dict[str, list[str]] = field(default_factory=dict)
    checks: dict[str, ev.Ec2InstanceLeakChecked] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
    """Instance -> the log sequence of the launcher's last action on it."""

    def ours(self, claim: NodeClaim) -> bool:
        """Whether the claim is this launcher's: planned on a NodeClass it published a catalog for."""
        return claim.planned is not None and claim.planned.node_class in self.catalogs

    def answer_to(self, request: ev.Ec2FleetRequested) -> ev.Ec2FleetAnswered | None:
        answer = self.answers.get(request.nodeclaim)
        return answer if answer is not None and answer.after == request.id else None

    def unavailable_until(
        self, capacity_type: str, instance_type: str, zone: str, at: datetime
    ) -> datetime | None:
        until = self.unavailable.get(mark_key(capacity_type, instance_type, zone))
        return until if until is not None and until > at else None

    def active_marks(self, at: datetime) -> dict[tuple[str, str, str], datetime]:
        out = {}
        for key, until in self.unavailable.items():
            if until > at:
                capacity, instance_type, zone = key.split("|")
                out[(capacity, instance_type, zone)] = until
        return out

    def instances_of(self, claim: str) -> list[InstanceView]:
        return [i for i in self.instances.values() if i.claim == claim]

    def was_kept(self, instance: str, claim: str, code: str) -> bool:
        return f"{claim}|{code}" in self.kept.get(instance, ())

    # --- folding ------------------------------------------------------------------------------------------

    def apply(self, event: ev.Event, sequence: int = 0) -> Ec2State:
        if isinstance(event, ev.NodeClaimEvent):
            self.claims.fold(event, sequence)
            return self
        fold = _FOLDS.get(type(event))
        if fold is not None:
            fold(self, event, sequence)
        return self

    def _nodeclasses(self, event: ev.NodeClassesSnapshot, sequence: int = 0) -> None:
        self.nodeclasses = served_node_classes(event.nodeclasses)

    def _catalog(self, event: ev.CatalogSnapshot, sequence: int = 0) -> None:
        if event.producer == PRODUCER and event.provider == names.PROVIDER:
            self.catalogs[event.node_class] = catalog_record(event)

    def _requested(self, event: ev.Ec2FleetRequested, sequence: int = 0) -> None:
        self.requests[event.nodeclaim] = event

    def _answered(self, event: ev.Ec2FleetAnswered, sequence: int = 0) -> None:
        request = self.requests.get(event.nodeclaim)
        self.answers[event.nodeclaim] = event
        until = event.decided_at + UNAVAILABLE_FOR
        capacity = request.capacity_type if request is not None else (event.capacity_type or "on-demand")
        for error in event.errors:
            if error.code not in CAPACITY_ERRORS:
                continue
            zones = [error.zone] if error.zone else _zones_of(request, error.instance_type)
            for zone in zones:
                self.unavailable[mark_key(capacity, error.instance_type, zone)] = until
        if event.instance_id and event.instance_id not in self.instances:
            node_class = request.node_class if request is not None else None
            self.instances[event.instance_id] = InstanceView(
                id=event.instance_id,
                instance_type=event.instance_type or "",
                zone=event.zone or "",
                state="pending",
                lifecycle=event.capacity_type or "on-demand",
                claim=event.nodeclaim,
                nodepool=request.nodepool if request is not None else None,
                node_class=node_class,
                seen_at=event.decided_at,
            )
        self._forget_expired(event.decided_at)

    def _observed(self, event: ev.Ec2InstanceObserved, sequence: int = 0) -> None:
        instance_id = str(event.instance.get("instanceId") or "")
        if not instance_id:
            return
        if event.change == "removed":
            for table in (self.instances, self.terminations, self.kept, self.checks, self.written):
                table.pop(instance_id, None)
            return
        if sequence and sequence <= self.written.get(instance_id, 0):
            return  # older than the launcher's own action on it
        previous = self.instances.get(instance_id)
        seen = previous.seen_at if previous is not None and previous.seen_at else event.decided_at
        self.instances[instance_id] = instance_view(event.instance, seen_at=seen)

    def _terminated(self, event: ev.Ec2InstanceTerminationDecided, sequence: int = 0) -> None:
        self.terminations[event.instance_id] = event.nodeclaim
        self.written[event.instance_id] = max(sequence, self.written.get(event.instance_id, 0))
        view = self.instances.get(event.instance_id)
        if view is not None and not view.gone:
            self.instances[event.instance_id] = msgspec.structs.replace(view, state="shutting-down")

    def _kept(self, event: ev.Ec2InstanceKept, sequence: int = 0) -> None:
        entries = self.kept.setdefault(event.instance_id, [])
        entry = f"{event.nodeclaim}|{event.code}"
        if entry not in entries:
            entries.append(entry)

    def _checked(self, event: ev.Ec2InstanceLeakChecked, sequence: int = 0) -> None:
        self.checks[event.instance_id] = event

    def _interrupted(self, event: ev.InterruptionNotice, sequence: int = 0) -> None:
        """A spot instance about to be reclaimed: its (spot, type, zone) is not offered for a while."""
        if event.kind != "spot-interruption":
            return
        instance = self.instances.get(instance_of_provider_id(event.provider_id) or "")
        if instance is not None and instance.instance_type and instance.zone:
            key = mark_key("spot", instance.instance_type, instance.zone)
            self.unavailable[key] = event.decided_at + UNAVAILABLE_FOR
        self._forget_expired(event.decided_at)

    def _forget_expired(self, now: datetime) -> None:
        for key in [k for k, until in self.unavailable.items() if until <= now - UNAVAILABLE_FOR]:
            del self.unavailable[key]


def _zones_of(request: ev.Ec2FleetRequested | None, instance_type: str) -> list[str]:
    if request is None:
        return []
    return sorted({o.zone for o in request.overrides if o.instance_type == instance_type})


_FOLDS: dict[type[ev.Event], Any] = {
    ev.NodeClassesSnapshot: Ec2State._nodeclasses,
    ev.CatalogSnapshot: Ec2State._catalog,
    ev.Ec2FleetRequested: Ec2State._requested,
    ev.Ec2FleetAnswered: Ec2State._answered,
    ev.Ec2InstanceObserved: Ec2State._observed,
    ev.Ec2InstanceTerminationDecided: Ec2State._terminated,
    ev.Ec2InstanceKept: Ec2State._kept,
    ev.Ec2InstanceLeakChecked: Ec2State._checked,
    ev.InterruptionNotice: Ec2State._interrupted,
}


def _decode_hook(kind: type, obj: Any) -> Any:
    if kind is ClaimBook:
        return ClaimBook.from_plain(obj)
    raise NotImplementedError(f"cannot decode {kind}")


def encode_state(state: Ec2State) -> bytes:
    return msgspec.msgpack.encode(state)


def decode_state(data: bytes) -> Ec2State:
    return msgspec.msgpack.decode(data, type=Ec2State, dec_hook=_decode_hook)
