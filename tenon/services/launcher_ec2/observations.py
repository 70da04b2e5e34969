"""What launcher-ec2 sees of EC2, as events: instances trimmed to what it decides on (pure).

Its decisions must replay from the log alone (``tenon replay launcher-ec2``), so what it saw goes into the log
first: ``Ec2InstanceObserved`` on ``tenon.ec2.instance.<id>`` with the instance **trimmed to the fields a
decision reads** (id, type, zone, state, lifecycle, launch time, private DNS name, and the tags tenon reads),
so that nothing else EC2 changes is an event, and ``Ec2FleetAnswered`` on ``tenon.ec2.fleet.<claim>`` for
what a CreateFleet returned.

Ids derive from what was seen (the instance id, its state, the action it follows), so the same observation
published twice (a poll and the answer to the launcher's own call, or two leaders) is one event.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from proto.events import Ec2FleetAnswered, Ec2FleetError, Ec2InstanceObserved, KubeObject, ObservedChange
from proto.registry import LAUNCHER_EC2
from tenon.runtime.eventlog.factories import make_event
from tenon.services.launcher_ec2 import names

PRODUCER = LAUNCHER_EC2
GONE = ("shutting-down", "terminated")
"""Instance states after which the machine is going away for good (what ``NodeClaimTerminated`` waits for)."""
TRIMMED_TAGS = (names.TAG_NODECLAIM, names.TAG_NODEPOOL, names.TAG_NODECLASS)


def provider_id(zone: str | None, instance_id: str) -> str:
    """Karpenter's providerID of an EC2 instance: ``aws:///<zone>/<instance-id>``."""
    return f"aws:///{zone or ''}/{instance_id}"


def instance_of_provider_id(value: str) -> str | None:
    """The instance id in an ``aws:///zone/id`` providerID (None for any other)."""
    if not value.startswith("aws:///"):
        return None
    instance = value.rsplit("/", 1)[-1]
    return instance if instance.startswith("i-") else None


def _time(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value or "")


def trim_instance(described: Mapping[str, Any], cluster_tag: str) -> KubeObject:
    """The instance as a decision reads it (see the module docstring)."""
    tags = {str(t.get("Key")): str(t.get("Value") or "") for t in described.get("Tags") or []}
    kept = {k: tags[k] for k in (*TRIMMED_TAGS, cluster_tag) if k in tags}
    return {
        "instanceId": str(described.get("InstanceId") or ""),
        "instanceType": str(described.get("InstanceType") or ""),
        "zone": str((described.get("Placement") or {}).get("AvailabilityZone") or ""),
        "state": str((described.get("State") or {}).get("Name") or ""),
        "lifecycle": "spot" if described.get("InstanceLifecycle") == "spot" else "on-demand",
        "launchTime": _time(described.get("LaunchTime")),
        "privateDnsName": str(described.get("PrivateDnsName") or ""),
        "tags": kept,
    }


def instance_observed(
    trimmed: KubeObject, change: ObservedChange, *, at: datetime | None = None, after: str | None = None
) -> Ec2InstanceObserved:
    key: tuple[object, ...] = (trimmed.get("instanceId"), trimmed.get("state"), change)
    return make_event(
        Ec2InstanceObserved,
        producer=PRODUCER,
        key=(*key, after) if after else key,
        correlation_id=(trimmed.get("tags") or {}).get(names.TAG_NODECLAIM),
        decided_at=at,
        change=change,
        instance=trimmed,
        after=after,
    )


def fleet_answered(
    nodeclaim: str,
    request_id: str,
    *,
    at: datetime | None = None,
    instance: KubeObject | None = None,
    found_by_tag: bool = False,
    errors: tuple[Ec2FleetError, ...] = (),
    error_code: str | None = None,
    error_message: str = "",
) -> Ec2FleetAnswered:
    return make_event(
        Ec2FleetAnswered,
        producer=PRODUCER,
        key=(nodeclaim, request_id),
        correlation_id=nodeclaim,
        decided_at=at,
        nodeclaim=nodeclaim,
        after=request_id,
        instance_id=(instance or {}).get("instanceId") or None,
        instance_type=(instance or {}).get("instanceType") or None,
        zone=(instance or {}).get("zone") or None,
        capacity_type=(instance or {}).get("lifecycle") or None,
        found_by_tag=found_by_tag,
        errors=errors,
        error_code=error_code,
        error_message=error_message,
    )


class InstanceView(msgspec.Struct, frozen=True):
    """An instance as a decision reads it."""

    id: str
    instance_type: str = ""
    zone: str = ""
    state: str = "pending"
    lifecycle: str = "on-demand"
    launch_time: str = ""
    claim: str | None = None
    nodepool: str | None = None
    node_class: str | None = None
    seen_at: datetime | None = None
    """When the launcher first saw it (the leak grace counts from the later of this and its launch)."""

    @property
    def gone(self) -> bool:
        return self.state in GONE

    @property
    def provider_id(self) -> str:
        return provider_id(self.zone, self.id)


def instance_view(trimmed: Mapping[str, Any], seen_at: datetime | None = None) -> InstanceView:
    tags = trimmed.get("tags") or {}
    return InstanceView(
        id=str(trimmed.get("instanceId") or ""),
        instance_type=str(trimmed.get("instanceType") or ""),
        zone=str(trimmed.get("zone") or ""),
        state=str(trimmed.get("state") or ""),
        lifecycle=str(trimmed.get("lifecycle") or "on-demand"),
        launch_time=str(trimmed.get("launchTime") or ""),
        claim=tags.get(names.TAG_NODECLAIM) or None,
        nodepool=tags.get(names.TAG_NODEPOOL) or None,
        node_class=tags.get(names.TAG_NODECLASS) or None,
        seen_at=seen_at,
    )
