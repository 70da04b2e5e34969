"""What an SQS message from EventBridge says (pure): an interruption of named instances, nothing to act on, or
a message that cannot be read.

The queue carries EventBridge events, ``{version, id, detail-type, source, account, time, region, resources,
detail}``, routed on ``(source, detail-type)`` as Karpenter routes them (``pkg/controllers/interruption/
parser.go``):

===============================================  =========================================================
``aws.ec2`` EC2 Spot Instance Interruption        ``spot-interruption`` of ``detail.instance-id``; the
Warning                                           instance goes two minutes after ``time``
``aws.ec2`` EC2 Instance Rebalance Recommendation ``rebalance-recommendation`` of ``detail.instance-id``
``aws.ec2`` EC2 Instance State-change             ``state-change`` when ``detail.state`` is stopping,
Notification                                      stopped, shutting-down or terminated (others: nothing)
``aws.health`` AWS Health Event                   ``scheduled-change`` of each ``detail.affectedEntities[]
                                                  .entityValue`` when ``detail.service`` is EC2 and the
                                                  category ``scheduledChange``, due at ``detail.startTime``
===============================================  =========================================================

A known event with nothing to do (a state change to ``running``, a Health event of another service) is *not
handled*: counted and deleted. Any other message (another source or detail-type), and a body that is not a
JSON object, lacks those fields or names no instance, is *malformed*: it goes to the dead-letter stream with
the reason, and is deleted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

SPOT_WARNING = timedelta(minutes=2)
"""A spot instance is reclaimed two minutes after its interruption warning."""
STOPPING_STATES = ("stopping", "stopped", "shutting-down", "terminated")

Kind = Literal["spot-interruption", "rebalance-recommendation", "scheduled-change", "state-change"]


@dataclass(frozen=True)
class Interruption:
    kind: Kind
    instance_ids: tuple[str, ...]
    deadline: datetime | None
    detail: dict[str, Any] = field(default_factory=dict)
    """What the notice carries besides: the source, the detail-type, the event id and time, the state."""


@dataclass(frozen=True)
class NotHandled:
    reason: str
    message_type: str


@dataclass(frozen=True)
class Malformed:
    reason: str


Reading = Interruption | NotHandled | Malformed


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _instance(detail: dict[str, Any]) -> str | None:
    value = detail.get("instance-id")
    return value if isinstance(value, str) and value.startswith("i-") else None


def _common(envelope: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": envelope.get("source"),
        "detailType": envelope.get("detail-type"),
        "eventId": envelope.get("id"),
        "time": envelope.get("time"),
    }


def _ec2(envelope: dict[str, Any], detail: dict[str, Any], kind: str) -> Reading:
    instance = _instance(detail)
    if instance is None:
        return Malformed(f"{kind}: detail.instance-id is missing or not an instance id")
    at = _time(envelope.get("time"))
    common = _common(envelope)
    if kind == "EC2 Spot Instance Interruption Warning":
        deadline = at + SPOT_WARNING if at is not None else None
        action = detail.get("instance-action")
        return Interruption("spot-interruption", (instance,), deadline, {**common, "instanceAction": action})
    if kind == "EC2 Instance Rebalance Recommendation":
        return Interruption("rebalance-recommendation", (instance,), None, common)
    state = detail.get("state")
    if state not in STOPPING_STATES:
        return NotHandled(f"state-change to {state!r}: nothing to do", "state_change_other")
    return Interruption("state-change", (instance,), at, {**common, "state": state})


def _health(envelope: dict[str, Any], detail: dict[str, Any]) -> Reading:
    if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
        return NotHandled(
            f"AWS Health event of {detail.get('service')!r}/{detail.get('eventTypeCategory')!r}: not an EC2 "
            "scheduled change",
            "health_other",
        )
    entities = detail.get("affectedEntities")
    if not isinstance(entities, list):
        return Malformed("AWS Health Event: detail.affectedEntities is not a list")
    instances = tuple(
        str(e["entityValue"])
        for e in entities
        if isinstance(e, dict) and isinstance(e.get("entityValue"), str) and e["entityValue"].startswith("i-")
    )
    if not instances:
        return Malformed("AWS Health Event: no instance id in detail.affectedEntities[].entityValue")
    deadline = _time(detail.get("startTime"))
    common = {**_common(envelope), "eventTypeCode": detail.get("eventTypeCode")}
    return Interruption("scheduled-change", instances, deadline, common)


EC2_KINDS = (
    "EC2 Spot Instance Interruption Warning",
    "EC2 Instance Rebalance Recommendation",
    "EC2 Instance State-change Notification",
)


def read_message(body: str) -> Reading:
    """What the message says (see the module docstring); never raises."""
    try:
        envelope = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return Malformed(f"not JSON: {str(exc)[:200]}")
    if not isinstance(envelope, dict):
        return Malformed(f"not a JSON object but a {type(envelope).__name__}")
    source, kind = envelope.get("source"), envelope.get("detail-type")
    if not isinstance(source, str) or not isinstance(kind, str):
        return Malformed("not an EventBridge event: source or detail-type is missing")
    detail = envelope.get("detail")
    if not isinstance(detail, dict):
        return Malformed(f"{kind}: detail is missing or not an object")
    if source == "aws.ec2" and kind in EC2_KINDS:
        return _ec2(envelope, detail, kind)
    if source == "aws.health" and kind == "AWS Health Event":
        return _health(envelope, detail)
    return Malformed(f"unknown message: {source} {kind!r} is not an event tenon reads")
