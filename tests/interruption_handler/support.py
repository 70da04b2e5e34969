"""Helpers for the interruption-handler tests: EventBridge messages, a running handler, the queue's depth."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from devtools.aws import client
from proto import events as ev
from proto import subjects
from proto.ids import derive_id
from tenon.runtime.decider import DeciderRuntime
from tenon.runtime.eventlog import EventLog
from tenon.services.interruption_handler.decider import InterruptionDecider
from tenon.services.interruption_handler.executor import InterruptionExecutor
from tenon.services.interruption_handler.sqs import InterruptionQueue
from tests.interruption_handler.conftest import QUEUE
from tests.support.events import append_to_claim, build_event
from tests.support.services import running
from tests.support.waiting import until

EVENT_TIME = "2026-11-29T10:00:00Z"


def spot_warning(instance: str, time: str = EVENT_TIME) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"spot-{instance}",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": time,
        "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1b:instance/{instance}"],
        "detail": {"instance-id": instance, "instance-action": "terminate"},
    }


def state_change(instance: str, state: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"state-{instance}-{state}",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "time": EVENT_TIME,
        "region": "us-east-1",
        "resources": [],
        "detail": {"instance-id": instance, "state": state},
    }


def health_change(*instances: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "health-1",
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "time": EVENT_TIME,
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "service": "EC2",
            "eventTypeCategory": "scheduledChange",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "startTime": "2026-11-30T10:00:00Z",
            "affectedEntities": [{"entityValue": i} for i in instances],
        },
    }


def send(url: str, body: dict[str, Any] | str) -> str:
    sqs = client("sqs", url)
    queue_url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    text = body if isinstance(body, str) else json.dumps(body)
    return str(sqs.send_message(QueueUrl=queue_url, MessageBody=text)["MessageId"])


def queue_depth(url: str) -> int:
    """Messages in the queue, visible or in flight."""
    sqs = client("sqs", url)
    queue_url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[n]) for n in names)


async def launched(event_log: EventLog, claim: str, instance: str, zone: str = "us-east-1b") -> None:
    """The claim's story up to Launched as instance ``instance`` (what the scheduler and launcher write)."""
    planned = build_event(
        ev.NodeClaimPlanned,
        derive_id("test", "planned", claim),
        nodeclaim=claim,
        nodepool="default",
        node_class="default",
        choice=ev.InstanceChoice("m5.large", zone, "spot", 0.03),
        fallbacks=(),
        pods=(),
        requirements=(),
        labels={},
    )
    await append_to_claim(event_log, planned)
    event = build_event(
        ev.NodeClaimLaunched,
        derive_id("test", "launched", claim),
        producer="launcher-ec2",
        nodeclaim=claim,
        provider_id=f"aws:///{zone}/{instance}",
        instance_type="m5.large",
        zone=zone,
        capacity_type="spot",
        machine=instance,
    )
    await append_to_claim(event_log, event)


@contextlib.asynccontextmanager
async def running_handler(
    event_log: EventLog, url: str
) -> AsyncIterator[tuple[DeciderRuntime[Any], InterruptionExecutor]]:
    queue = InterruptionQueue(
        QUEUE, region="us-east-1", endpoint_url=url, wait=1, visibility=2, max_messages=10
    )
    executor = InterruptionExecutor(queue)
    async with running(InterruptionDecider(), executor, event_log) as runtime:
        await until(executor.polling.is_set, 15, what="the handler polling its queue")
        yield runtime, executor


async def notices(event_log: EventLog) -> list[ev.InterruptionNotice]:
    return [
        r.event
        async for r in event_log.read(subjects.INTERRUPTIONS)
        if isinstance(r.event, ev.InterruptionNotice)
    ]


async def dead_letters(event_log: EventLog) -> list[ev.DeadLetter]:
    return [
        r.event
        async for r in event_log.read(subjects.DEADLETTERS, stream=subjects.DEADLETTER_STREAM)
        if isinstance(r.event, ev.DeadLetter)
    ]
