"""interruption-handler against the local AWS's SQS and a real nats-server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.interruption_handler.support import (
    dead_letters,
    health_change,
    launched,
    notices,
    queue_depth,
    running_handler,
    send,
    spot_warning,
    state_change,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration


async def test_a_spot_warning_becomes_a_notice_and_the_message_is_deleted(jetstream_log, local_aws) -> None:
    aws, _ = local_aws
    await launched(jetstream_log, "default-aaaaa", "i-0123456789abcdef0")
    async with running_handler(jetstream_log, aws.url):
        send(aws.url, spot_warning("i-0123456789abcdef0"))
        [notice] = await until(lambda: notices(jetstream_log), 15, what="an InterruptionNotice")
        await until(lambda: queue_depth(aws.url) == 0, 15, what="the SQS message deleted")
    assert notice.kind == "spot-interruption"
    assert notice.provider_id == "aws:///us-east-1b/i-0123456789abcdef0"
    assert notice.deadline == datetime(2026, 11, 29, 10, 0, tzinfo=UTC) + timedelta(minutes=2)
    assert notice.detail["instanceAction"] == "terminate"


async def test_a_malformed_message_is_dead_lettered_and_the_handler_goes_on(jetstream_log, local_aws) -> None:
    aws, _ = local_aws
    await launched(jetstream_log, "default-bbbbb", "i-0aaaaaaaaaaaaaaa1")
    async with running_handler(jetstream_log, aws.url):
        send(aws.url, "{not json")
        send(
            aws.url,
            {
                "source": "aws.autoscaling",
                "detail-type": "EC2 Instance-terminate Lifecycle Action",
                "detail": {},
            },
        )
        [first, second] = await until(
            lambda: _at_least(dead_letters(jetstream_log), 2), 15, what="two dead letters"
        )
        send(aws.url, state_change("i-0aaaaaaaaaaaaaaa1", "stopping"))
        [notice] = await until(lambda: notices(jetstream_log), 15, what="a notice after the dead letters")
        await until(lambda: queue_depth(aws.url) == 0, 15, what="every message deleted")
    reasons = sorted([first.error, second.error])
    assert reasons[0].startswith("not JSON")
    assert "unknown message: aws.autoscaling" in reasons[1]
    assert first.consumer == "interruption-handler" and first.data in ("{not json", second.data)
    assert (notice.kind, notice.detail["state"]) == ("state-change", "stopping")


async def test_a_notice_for_an_instance_tenon_does_not_run_is_counted_and_deleted(
    jetstream_log, local_aws
) -> None:
    aws, _ = local_aws
    await launched(jetstream_log, "default-ccccc", "i-0ccccccccccccccc1")
    async with running_handler(jetstream_log, aws.url) as (runtime, executor):
        send(aws.url, spot_warning("i-0ffffffffffffffff"))
        send(aws.url, health_change("i-0ffffffffffffffff", "i-0ccccccccccccccc1"))
        [notice] = await until(lambda: notices(jetstream_log), 15, what="the health notice")
        await until(lambda: executor.deleted == 2, 15, what="both messages deleted")
        outcomes = sorted(o.result for o in runtime.state.handled.values())
    assert notice.kind == "scheduled-change" and notice.provider_id.endswith("/i-0ccccccccccccccc1")
    assert outcomes == ["notice", "unknown-instance"]
    assert queue_depth(aws.url) == 0


async def test_the_message_stays_in_the_queue_until_the_log_has_stored_it(
    jetstream_log, nats_server, local_aws
) -> None:
    aws, _ = local_aws
    await launched(jetstream_log, "default-ddddd", "i-0ddddddddddddddd1")
    async with running_handler(jetstream_log, aws.url) as (_, executor):
        nats_server.stop()
        send(aws.url, spot_warning("i-0ddddddddddddddd1"))
        await until(lambda: executor.received >= 1, 15, what="the message received while the log is down")
        assert queue_depth(aws.url) == 1 and executor.deleted == 0
        nats_server.start()
        await until(lambda: notices(jetstream_log), 30, what="the notice once the log is back")
        await until(lambda: queue_depth(aws.url) == 0, 30, what="the message deleted after the store")


async def _at_least(found, count: int):
    items = await found
    return items if len(items) >= count else None
